"""Single ONNX convolutions built for cuda and for llvm-cpu and checked against torch's float32
conv2d on the GPU: which shapes IREE 3.13 computes wrong on CUDA (issue 35: ResNet-50's first
1x1 convolution after the max pool, 64->64 on 8x64x56x56 f16, is wrong on CUDA and right on CPU).

    python benchmarks/conv_numerics.py [--work DIR] [--configs DIR]

Each case prints the relative error (largest difference over largest magnitude) of each backend,
and the lowering config CUDA gave the convolution's dispatch. Needs onnx, torch and the IREE tools
on PATH (benchmarks/gpu_setup.sh puts them there).
"""

from __future__ import annotations

import argparse
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from cut_compare import build_and_run
# (batch, in channels, size, out channels, kernel, stride, dtype, bias, relu before)
CASES = [
    (8, 64, 56, 64, 1, 1, "f16", True, False),   # ResNet-50 s1b0_1 as the model holds it
    (8, 64, 56, 64, 1, 1, "f16", False, False),
    (8, 64, 56, 64, 1, 1, "f32", True, False),
    (1, 64, 56, 64, 1, 1, "f16", True, False),
    (8, 64, 56, 256, 1, 1, "f16", True, False),  # s1b0_down
    (8, 256, 56, 64, 1, 1, "f16", True, False),  # s1b1_1
    (8, 64, 56, 64, 3, 1, "f16", True, False),   # s1b0_2
    (8, 128, 28, 128, 1, 1, "f16", True, False),
    (8, 64, 64, 64, 1, 1, "f16", True, False),
    (8, 64, 56, 64, 1, 1, "f16", True, True),
]


def model(case, rng):
    from onnx import TensorProto, helper, numpy_helper

    n, c, s, k, r, stride, dt, bias, relu = case
    npt = np.float16 if dt == "f16" else np.float32
    elem = TensorProto.FLOAT16 if dt == "f16" else TensorProto.FLOAT
    w = (rng.standard_normal((k, c, r, r)) * np.sqrt(2.0 / (c * r * r))).astype(npt)
    inits = [numpy_helper.from_array(w, "w")]
    ins = ["xr" if relu else "x", "w"]
    nodes = [helper.make_node("Relu", ["x"], ["xr"])] if relu else []
    if bias:
        inits.append(numpy_helper.from_array((rng.standard_normal(k) * 0.01).astype(npt), "b"))
        ins.append("b")
    nodes.append(helper.make_node("Conv", ins, ["y"], kernel_shape=[r, r], strides=[stride] * 2, pads=[r // 2] * 4))
    out = (s + 2 * (r // 2) - r) // stride + 1
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", elem, [n, c, s, s])],
                              [helper.make_tensor_value_info("y", elem, [n, k, out, out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, inits


def as_matmul(m):
    """The model with its 1x1 convolution written as the rewrite `pointwise-conv-as-matmul`
    writes it: Reshape(W) [O, C] MatMul Reshape(X) [N, C, H*W], plus the bias, back to NCHW."""
    from onnx import helper, numpy_helper

    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    w = inits[conv.input[1]]
    xshape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
    n, o = xshape[0], w.shape[0]
    new_inits = [numpy_helper.from_array(w.reshape(o, -1), "w2"),
                 numpy_helper.from_array(np.array([n, w.shape[1], -1], np.int64), "xs"),
                 numpy_helper.from_array(np.array([n, o, xshape[2], xshape[3]], np.int64), "ys")]
    nodes = [x for x in m.graph.node if x.op_type != "Conv"]
    nodes += [helper.make_node("Reshape", [conv.input[0], "xs"], ["x2"]),
              helper.make_node("MatMul", ["w2", "x2"], ["mm"])]
    last = "mm"
    if len(conv.input) > 2:
        new_inits.append(numpy_helper.from_array(inits[conv.input[2]].reshape(o, 1), "b2"))
        nodes.append(helper.make_node("Add", ["mm", "b2"], ["mmb"]))
        last = "mmb"
    nodes.append(helper.make_node("Reshape", [last, "ys"], [conv.output[0]]))
    graph = helper.make_graph(nodes, "conv", list(m.graph.input), list(m.graph.output), new_inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def check(i: int, case, work: Path, configs: Path, extra_cuda: tuple[str, ...] = (), matmul: bool = False) -> str:
    import onnx
    import torch
    from onnx import numpy_helper

    rng = np.random.default_rng(i)
    m, w, inits = model(case, rng)
    if matmul:
        m = as_matmul(m)
    d = work / f"case{i}{'-mm' if matmul else ''}"
    d.mkdir(parents=True, exist_ok=True)
    onnx.save(m, d / "m.onnx")
    x = rng.uniform(-1, 1, (case[0], case[1], case[2], case[2])).astype(np.float16 if case[6] == "f16" else np.float32)
    np.save(d / "x.npy", x)
    subprocess.run(["iree-import-onnx", str(d / "m.onnx"), "-o", str(d / "m.mlir")], check=True)
    xt = torch.from_numpy(x).float().cuda()
    if case[8]:
        xt = xt.relu()
    b = torch.from_numpy(numpy_helper.to_array(inits[1])).float().cuda() if case[7] else None
    ref = torch.nn.functional.conv2d(xt, torch.from_numpy(w).float().cuda(), b, stride=case[5],
                                     padding=case[4] // 2).cpu().numpy()
    scale = float(np.abs(ref).max())
    parts = []
    for backend in ("cuda", "cpu"):
        extra = (f"--iree-hal-dump-executable-configurations-to={configs / f'case{i}'}", *extra_cuda) \
            if backend == "cuda" else ()
        got = build_and_run(d / "m.mlir", backend, "conv", [d / "x.npy"], d / backend, extra)
        parts.append(f"{backend} {float(np.abs(got - ref).max()) / scale:.3g}")
    cfg = ""
    for f in sorted((configs / f"case{i}").glob("*.mlir")):
        text = f.read_text()
        for line in text.splitlines():
            if "lowering_config" in line and ("conv" in line or "matmul" in line or "generic" in line):
                cfg = re.sub(r"\s+", " ", line.strip())[:400]
                break
        if cfg:
            break
    return f"{case}{' as MatMul' if matmul else ''}: {'  '.join(parts)}\n    {cfg}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("/tmp/conv-numerics"))
    parser.add_argument("--configs", type=Path, default=Path("/tmp/conv-numerics/configs"))
    parser.add_argument("--cases", help="indices into CASES, comma-separated (default: every case)")
    parser.add_argument("--matmul", action="store_true", help="each 1x1 convolution written as a MatMul")
    parser.add_argument("--cuda-flag", action="append", default=[], help="one more iree-compile flag for cuda")
    args = parser.parse_args()
    chosen = [(i, CASES[i]) for i in map(int, args.cases.split(","))] if args.cases else list(enumerate(CASES))
    with ThreadPoolExecutor(8) as pool:
        for line in pool.map(lambda ic: check(ic[0], ic[1], args.work, args.configs, tuple(args.cuda_flag),
                                                    args.matmul and ic[1][4] == 1), chosen):
            print(line, flush=True)


if __name__ == "__main__":
    main()
