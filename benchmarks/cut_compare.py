"""Where a model's result goes wrong on a GPU target: the ONNX graph cut after each named point
(its output that tensor), each cut built for cuda and for llvm-cpu and run on the same
uniform(-1, 1) input, and the relative error of each backend's result against the last one's.
Backend `torch32` runs the cut op by op in torch eager on the GPU in float32 (onnx_torch_eager.py):
a reference that is neither IREE nor f16.

    python benchmarks/cut_compare.py MODEL.onnx --points a,b,c [--backends cuda,cpu,torch32]

The first point whose error is large holds the dispatch that goes wrong. Needs onnx and the IREE
tools on PATH (benchmarks/gpu_setup.sh puts them there). Written for ResNet-50 f16 on CUDA, whose
default build's result is 0.97 off llvm-cpu's (BENCHMARKS.md, issue 35); not yet run there.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.targets import parse_target  # noqa: E402

TARGETS = {"cuda": parse_target("cuda:sm_80"), "cpu": parse_target("llvm-cpu")}


def build_and_run(program: Path, backend: str, function: str, inputs: list[Path], out: Path,
                  extra_flags: tuple[str, ...] = ()) -> np.ndarray:
    """`program` built for `backend` ("cuda" or "cpu", the tuner's own target flags) into
    OUT.vmfb, run once on `inputs`; its first result, as f32. Shared by the GPU numerics scripts
    (cut_compare.py, conv_numerics.py, rewrite_check.py)."""
    target = TARGETS[backend]
    vmfb = out.with_suffix(".vmfb")
    subprocess.run(["iree-compile", str(program), *target.compile_flags, *extra_flags, "-o", str(vmfb)], check=True)
    subprocess.run(["iree-run-module", f"--module={vmfb}", f"--function={function}", f"--device={target.device}",
                    *(f"--input=@{p}" for p in inputs), f"--output=@{out.with_suffix('.npy')}"],
                   check=True, capture_output=True)
    return np.load(out.with_suffix(".npy")).astype(np.float32)


def cut(model, point: str, work: Path) -> Path:
    import onnx

    part = onnx.utils.Extractor(model).extract_model([i.name for i in model.graph.input], [point])
    part.graph.name = "cut"
    onnx.save(part, work / f"{point}.onnx")
    subprocess.run(["iree-import-onnx", str(work / f"{point}.onnx"), "-o", str(work / f"{point}.mlir")], check=True)
    return work / f"{point}.mlir"


def _torch32(path: Path, inputs: list[Path]) -> np.ndarray:
    import torch

    from onnx_torch_eager import build

    run, _ = build(path, "cuda", False, compute_dtype=torch.float32)
    with torch.no_grad():
        return run(*(torch.from_numpy(np.load(p)).cuda() for p in inputs))[0].float().cpu().numpy()


def compare(model, point: str, backends: list[str], inputs: list[Path], work: Path) -> dict[str, tuple[float, float]]:
    """Each backend's (relative error against the last backend's result, largest magnitude)."""
    program = cut(model, point, work)
    outs = {}
    for b in backends:
        if b == "torch32":
            outs[b] = _torch32(work / f"{point}.onnx", inputs)
            continue
        outs[b] = build_and_run(program, b, "cut", inputs, work / f"{point}_{b}")
    ref = outs[backends[-1]]
    scale = max(float(np.abs(ref).max()), 1e-30)
    return {b: (float(np.abs(o - ref).max() / scale), float(np.abs(o).max())) for b, o in outs.items()}


def main() -> None:
    import onnx
    from onnx import shape_inference

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--points", required=True, help="tensor names, comma-separated, in graph order")
    parser.add_argument("--backends", default="cuda,cpu,torch32")
    parser.add_argument("--work", type=Path, default=Path("/tmp/cut-compare"))
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    model = shape_inference.infer_shapes(onnx.load(args.model))
    rng = np.random.default_rng(0)
    types = {1: np.float32, 10: np.float16}
    inputs = []
    for i, spec in enumerate(model.graph.input):
        shape = [d.dim_value for d in spec.type.tensor_type.shape.dim]
        inputs.append(args.work / f"input{i}.npy")
        np.save(inputs[-1], rng.uniform(-1, 1, shape).astype(types[spec.type.tensor_type.elem_type]))
    with ThreadPoolExecutor(6) as pool:
        for point, errors in zip(args.points.split(","), pool.map(
                lambda p: compare(model, p, args.backends.split(","), inputs, args.work), args.points.split(","))):
            print(point, "  ".join(f"{b}: error {e:.3g}, max {m:.3g}" for b, (e, m) in errors.items()), flush=True)


if __name__ == "__main__":
    main()
