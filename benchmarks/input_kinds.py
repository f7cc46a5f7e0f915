"""The kinds of model files users bring, each run through `tune` and `tune-model` as a user would,
and the result rebuilt with plain iree-compile and run (with its parameter archive where it has one).

    python benchmarks/input_kinds.py [--budget 4] [--out bench-inputs]

The files (built here, with the onnx package and IREE's own importer where they are ONNX):
- an ONNX MLP whose weights are externalized into a parameter archive
  (`iree-import-onnx --externalize-params`), tuned with `--parameters model=FILE.irpa`;
- a torch-dialect linear layer in bf16 with a bf16 result;
- a decode step whose token ids are `1x?xi64` (a torch symbolic shape), with a static matmul;
- an NCHW convolution (linalg.conv_2d_nchw_fchw, 2 images, f32);
- the small ONNX CNN of examples/onnx_models.py, with one image and with four.
Prints a Markdown table (the README's): what `tune` did, what `tune-model` did, and whether the
rebuilt model ran.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "examples"))

from tuner.core.running import input_flag  # noqa: E402
from tuner.evaluation.device_identity import cpu_identity  # noqa: E402
from tuner.tools import find_tool, run_tool  # noqa: E402

BF16_LINEAR = """
func.func @main(%x: !torch.vtensor<[256,512],bf16>, %w: !torch.vtensor<[512,1024],bf16>) -> !torch.vtensor<[256,1024],bf16> {
  %0 = torch.aten.mm %x, %w : !torch.vtensor<[256,512],bf16>, !torch.vtensor<[512,1024],bf16> -> !torch.vtensor<[256,1024],bf16>
  %1 = torch.aten.relu %0 : !torch.vtensor<[256,1024],bf16> -> !torch.vtensor<[256,1024],bf16>
  return %1 : !torch.vtensor<[256,1024],bf16>
}
"""
DECODE_STEP = """
func.func @main(%ids: !torch.vtensor<[1,?],si64>, %h: !torch.vtensor<[64,512],f32>, %w: !torch.vtensor<[512,2048],f32>) -> (!torch.vtensor<[1,?],si64>, !torch.vtensor<[64,2048],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 1, max_val = 256} : !torch.int
  torch.bind_symbolic_shape %ids, [%s0], affine_map<()[s0] -> (1, s0 * 16)> : !torch.vtensor<[1,?],si64>
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %ids, %ids, %int1 : !torch.vtensor<[1,?],si64>, !torch.vtensor<[1,?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  torch.bind_symbolic_shape %0, [%s0], affine_map<()[s0] -> (1, s0 * 16)> : !torch.vtensor<[1,?],si64>
  %1 = torch.aten.mm %h, %w : !torch.vtensor<[64,512],f32>, !torch.vtensor<[512,2048],f32> -> !torch.vtensor<[64,2048],f32>
  return %0, %1 : !torch.vtensor<[1,?],si64>, !torch.vtensor<[64,2048],f32>
}
"""
NCHW_CONV = """
func.func @main(%x: tensor<2x64x58x58xf32>, %w: tensor<64x64x3x3xf32>) -> tensor<2x64x56x56xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x64x56x56xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<2x64x56x56xf32>) -> tensor<2x64x56x56xf32>
  %r = linalg.conv_2d_nchw_fchw {dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>} ins(%x, %w : tensor<2x64x58x58xf32>, tensor<64x64x3x3xf32>) outs(%f : tensor<2x64x56x56xf32>) -> tensor<2x64x56x56xf32>
  return %r : tensor<2x64x56x56xf32>
}
"""


def externalized_mlp(out: Path) -> tuple[Path, list[str]]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.uniform(-0.05, 0.05, s).astype(np.float32), n)
             for n, s in (("w1", (512, 1024)), ("w2", (1024, 512)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 512])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 512])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), out / "mlp.onnx")
    run = run_tool([find_tool("iree-import-onnx"), str(out / "mlp.onnx"), "--externalize-params",
                    "--save-params-to", str(out / "mlp.irpa"), "-o", str(out / "mlp_params.mlir")], 300)
    if not run.ok:
        raise SystemExit(run.stderr)
    return out / "mlp_params.mlir", [f"model={out / 'mlp.irpa'}"]


def files(out: Path) -> list[tuple[str, Path, list[str]]]:
    import onnx
    import onnx_models

    kinds = []
    path, params = externalized_mlp(out)
    kinds.append(("ONNX MLP, weights in a parameter archive (`--externalize-params`)", path, params))
    for name, text in (("torch linear layer, bf16 in and out", BF16_LINEAR),
                       ("decode step, `1x?xi64` token ids (torch symbolic shape)", DECODE_STEP),
                       ("NCHW convolution, 2 images, f32", NCHW_CONV)):
        p = out / (name.split(",")[0].replace(" ", "_") + ".mlir")
        p.write_text(text)
        kinds.append((name, p, []))
    for batch in (1, 4):
        p = out / f"cnn_b{batch}.onnx"
        onnx.save(onnx_models.small_cnn(batch), p)
        kinds.append((f"ONNX CNN, {batch} image{'s' if batch > 1 else ''} (3x3 convs, NCHW)", p, []))
    return kinds


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=REPO, capture_output=True, text=True)


def last(run: subprocess.CompletedProcess, prefix: str) -> str:
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.startswith(prefix)]
    return lines[-1][len(prefix):].strip() if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=4)
    parser.add_argument("--out", type=Path, default=Path("bench-inputs"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {cpu_identity()}; {platform.machine()}; --budget {args.budget}")
    rows = []
    for name, path, params in files(args.out):
        extra = [f"--parameters={p}" for p in params]
        stem = path.stem
        tuned = cli("tune", str(path), "--budget", str(args.budget), "--output", str(args.out / f"tune-{stem}"),
                    "--force", *extra)
        tune_said = (last(tuned, "best:") and "winner: " + last(tuned, "best:").split(":")[0]) \
            or (last(tuned, "no winner:") and "default kept") or last(tuned, "error:") or "?"
        picked = last(tuned, "tuning ").split(":")[0]
        model_dir = args.out / f"model-{stem}"
        model = cli("tune-model", str(path), "--budget", str(args.budget), "--output", str(model_dir), "--force", *extra)
        model_said = f"exit {model.returncode}: " + (last(model, "error:") or "?")
        ran = "-"
        if model.returncode == 0:
            results = json.loads((model_dir / "results.json").read_text())
            figure = results.get("figure") or {}
            model_said = (f"{len(results['kept'])} config(s) kept, flags {results['flags'] or 'none'}; "
                          + (f"{figure.get('speedup', 1.0):.2f}x the default model" if figure else results["verdict"][:120]))
            program, vmfb = results["input"], model_dir / "rebuilt.vmfb"
            built = run_tool([find_tool("iree-compile"), program, f"@{model_dir / 'model_flags.txt'}", "-o", str(vmfb)], 600)
            inputs = sorted((model_dir / "model-inputs").glob("input*"),
                            key=lambda p: int(p.name[len("input"):].split(".")[0]))
            if built.ok:
                run = run_tool([find_tool("iree-run-module"), f"--module={vmfb}", f"--function={results['entry']}",
                                *(f"--input={input_flag(p)}" for p in inputs),
                                *(f"--parameters={p}" for p in params)], 300)
                ran = "yes" if run.ok else f"no: {run.first_error()}"
            else:
                ran = f"did not build: {built.first_error()}"
        rows.append((name, f"exit {tuned.returncode}; {picked or '-'}; {tune_said}", model_said, ran))
        print(f"{name}: tune exit {tuned.returncode} ({tune_said}); tune-model {model_said}; rebuilt runs: {ran}",
              flush=True)
    print()
    print("| input | `tune` (exit; dispatch; outcome) | `tune-model` | rebuilt with plain iree-compile, runs |")
    print("|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
