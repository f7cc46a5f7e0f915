"""One attention as torch.onnx.export (dynamo) writes `F.scaled_dot_product_attention`, in the torch
dialect as iree-import-onnx gives it: Kᵀ as a flattened rank-3 transpose, √scale on Q and Kᵀ,
Softmax, the `Where(IsNaN(P), 0, P)` guard, MatMul by V (tuner.rewrite.attention's docstring).
Writes DIR/decomposed.mlir (that form), DIR/raised.mlir (after the GPU's raise-attention) and
DIR/input0.npy ... input2.npy (Q, K, V: seeded normals), so that the attention op, tuned, can be
timed against the decomposed form it replaces (benchmarks/gpu_attention_vs_decomposed.sh).

    python benchmarks/sdpa_export_form.py DIR --batch 8 --heads 12 --seq 197 --head-dim 64 [--dtype f16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

META = ('attributes {torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64, '
        'torch.onnx_meta.producer_name = "", torch.onnx_meta.producer_version = ""}')


def program(b: int, h: int, s: int, d: int, dtype: str) -> str:
    t, sc, kt = (f"!torch.vtensor<[{b},{h},{x},{y}],{dtype}>" for x, y in ((s, d), (s, s), (d, s)))
    flat, flat_t = f"!torch.vtensor<[{b * h},{s},{d}],{dtype}>", f"!torch.vtensor<[{b * h},{d},{s}],{dtype}>"
    scalar = f"!torch.vtensor<[],{dtype}>"
    return f"""
func.func @main_graph(%q: {t}, %k: {t}, %v: {t}) -> {t} {META} {{
  %c = torch.vtensor.literal(dense<{(1 / d) ** 0.25:.6f}> : tensor<{dtype}>) : {scalar}
  %zero = torch.vtensor.literal(dense<0.0> : tensor<{dtype}>) : {scalar}
  %shape3 = torch.vtensor.literal(dense<[{b * h}, {s}, {d}]> : tensor<3xsi64>) : !torch.vtensor<[3],si64>
  %shape4 = torch.vtensor.literal(dense<[{b}, {h}, {d}, {s}]> : tensor<4xsi64>) : !torch.vtensor<[4],si64>
  %k3 = torch.operator "onnx.Reshape"(%k, %shape3) : ({t}, !torch.vtensor<[3],si64>) -> {flat}
  %kt3 = torch.operator "onnx.Transpose"(%k3) {{torch.onnx.perm = [0 : si64, 2 : si64, 1 : si64]}} : ({flat}) -> {flat_t}
  %kt = torch.operator "onnx.Reshape"(%kt3, %shape4) : ({flat_t}, !torch.vtensor<[4],si64>) -> {kt}
  %qs = torch.operator "onnx.Mul"(%q, %c) : ({t}, {scalar}) -> {t}
  %kts = torch.operator "onnx.Mul"(%kt, %c) : ({kt}, {scalar}) -> {kt}
  %scores = torch.operator "onnx.MatMul"(%qs, %kts) : ({t}, {kt}) -> {sc}
  %p = torch.operator "onnx.Softmax"(%scores) {{torch.onnx.axis = -1 : si64}} : ({sc}) -> {sc}
  %nan = torch.operator "onnx.IsNaN"(%p) : ({sc}) -> !torch.vtensor<[{b},{h},{s},{s}],i1>
  %g = torch.operator "onnx.Where"(%nan, %zero, %p) : (!torch.vtensor<[{b},{h},{s},{s}],i1>, {scalar}, {sc}) -> {sc}
  %o = torch.operator "onnx.MatMul"(%g, %v) : ({sc}, {t}) -> {t}
  return %o : {t}
}}
"""


def main() -> None:
    import numpy as np
    from iree.compiler import ir

    from tuner.rewrite import REWRITES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--seq", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--dtype", default="f16")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    text = program(args.batch, args.heads, args.seq, args.head_dim, args.dtype)
    (args.out / "decomposed.mlir").write_text(text)
    rng = np.random.default_rng(0)
    for i in range(3):
        shape = (args.batch, args.heads, args.seq, args.head_dim)
        np.save(args.out / f"input{i}.npy", rng.standard_normal(shape).astype(np.float16 if args.dtype == "f16" else np.float32))
    raise_gpu = next(r for r in REWRITES["gpu"] if r.name == "raise-attention")
    with ir.Context() as context:
        context.allow_unregistered_dialects = True
        module = ir.Module.parse(text)
        print(raise_gpu.apply(module))
        (args.out / "raised.mlir").write_text(str(module))


if __name__ == "__main__":
    main()
