"""Does a program rewrite make a model right on a GPU, and at what cost? The ONNX model is imported,
rewritten (tuner.rewrite), and both programs are built for cuda and for llvm-cpu and run on the
same uniform(-1, 1) inputs; each result's relative error (largest difference over largest
magnitude) against the original program's llvm-cpu result is printed, and the cuda modules are
left in WORK for benchmarks/gpu_model_kernels.py.

    python benchmarks/rewrite_check.py MODEL.onnx --rewrite pointwise-conv-as-matmul [--work DIR]
        [--variant NAME=FLAG[,FLAG...]]...   # the rewritten program also built for cuda with these flags
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from cut_compare import build_and_run  # noqa: E402
from tuner.rewrite import combined, named_rewrites, rewrite_program  # noqa: E402


def main() -> None:
    import onnx

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--rewrite", required=True, help="a rewrite's name, or several joined by +")
    parser.add_argument("--work", type=Path, default=Path("/tmp/rewrite-check"))
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME=FLAG[;FLAG...]: the rewritten program built for cuda with these flags too "
                             "(WORK/NAME-cuda.vmfb)")
    args = parser.parse_args()
    known = named_rewrites()
    rewrite = combined([known[n] for n in args.rewrite.split("+")])
    args.work.mkdir(parents=True, exist_ok=True)
    original = args.work / "original.mlir"
    subprocess.run(["iree-import-onnx", str(args.model), "-o", str(original)], check=True)
    rewritten = args.work / "rewritten.mlir"
    changed = rewrite_program(original, rewrite, rewritten)
    print(f"{args.rewrite}: {len(changed)} rewritten")
    if not changed:  # the variants are then the original program's
        shutil.copyfile(original, rewritten)
    model = onnx.load(args.model)
    rng = np.random.default_rng(0)
    types = {1: np.float32, 10: np.float16}
    inputs = []
    for i, spec in enumerate(model.graph.input):
        inputs.append(args.work / f"input{i}.npy")
        np.save(inputs[-1], rng.uniform(-1, 1, [d.dim_value for d in spec.type.tensor_type.shape.dim])
                .astype(types[spec.type.tensor_type.elem_type]))
    entry = model.graph.name
    outputs = {}
    for program in (original, rewritten):
        for backend in ("cpu", "cuda"):
            name = f"{program.stem}-{backend}"
            outputs[name] = build_and_run(program, backend, entry, inputs, args.work / name)
    for variant in args.variant:
        name, flags = variant.split("=", 1)
        try:
            outputs[f"{name}-cuda"] = build_and_run(rewritten, "cuda", entry, inputs, args.work / f"{name}-cuda",
                                                    tuple(flags.split(";")))
        except subprocess.CalledProcessError as e:
            print(f"{name}-cuda: did not build or run ({e.cmd[0]} exit {e.returncode})")
    ref = outputs["original-cpu"]
    scale = max(float(np.abs(ref).max()), 1e-30)
    for name, out in outputs.items():
        finite = np.all(np.isfinite(out))
        print(f"{name}: relative error {float(np.abs(out - ref).max()) / scale:.3g}" + ("" if finite else " (not finite)"))


if __name__ == "__main__":
    main()
