"""Linear layers as external Hopper kernels (tuner.rewrite.external_gemm) against IREE's default
and torch (cuBLAS + GELU), by CUPTI kernel time, interleaved; every output checked.

    .venv/bin/python benchmarks/gpu_external_gemm.py compile --out DIR [--set held-out|reported]   # here (Triton needed)
    python3 benchmarks/gpu_external_gemm.py measure --out DIR --rounds 5                          # on the GPU

`compile` writes, for each shape, an ONNX linear layer as torch exports one, `Gelu(MatMul(X, W) +
B)` in f16 (W and B arguments, not initializers, so that the modules travel without weights), imports it with iree-import-onnx and builds it with
IREE's default and, for each of TILES, with its MatMul alone rewritten as Triton's sm_90a kernel
(the bias and GELU a dispatch of their own), and once as the rewrite makes it, the bias and GELU in
the kernel too (`fused`, the rewrite's own tiles; the program's extern PTX read back: it must hold
wgmma). `measure` runs each module 5 times (outputs
that differ between runs are a race, reported as an infinite error), compares them with torch's
f32 result, then times every module and torch's `gelu(addmm(B, X, W))` in rotating order, 20 calls
a round under one torch.profiler (CUPTI) session. An external kernel's time is its own kernel
plus the elementwise dispatch of the bias and GELU (IREE cannot fuse into it); `fused` is one
kernel."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.gpu_padded_rows import HELD_OUT, REPORTED  # noqa: E402

TILES = [(128, 256, 64, 8, 3), (128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4)]


def write_linear(path: Path, m: int, n: int, k: int) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    rng = np.random.default_rng(0)
    w, b = rng.uniform(-1, 1, (k, n)).astype(np.float16), rng.uniform(-1, 1, (n,)).astype(np.float16)
    np.save(path.parent / "w.npy", w)
    np.save(path.parent / "b.npy", b)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
         helper.make_node("Gelu", ["z"], ["out"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT16, [k, n]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT16, [n])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT16, [m, n])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)


def compile_all(out: Path, shapes: dict[str, tuple[int, int, int]]) -> None:
    from tuner.external.gemm_kernel import GemmTiles
    from tuner.external.triton_gemm import triton_gemm
    from tuner.rewrite import Rewrite, rewrite_program
    from tuner.rewrite.external_gemm import external_gemms
    from tuner.targets import parse_target
    from tuner.tools import find_tool as tool

    out = out.resolve()
    flags = parse_target("cuda").compile_flags
    manifest = {}
    for shape, (m, n, k) in shapes.items():
        work = out / shape
        work.mkdir(parents=True, exist_ok=True)
        write_linear(work / "model.onnx", m, n, k)
        subprocess.run([tool("iree-import-onnx"), str(work / "model.onnx"), "-o", str(work / "default.mlir")], check=True)
        programs = {"default": work / "default.mlir"}
        for t in TILES:
            tiles = GemmTiles(*t)
            name = "x%dx%dx%dw%ds%d" % t
            rewrite = Rewrite(name, lambda module, tiles=tiles: external_gemms(module, lambda p, _: triton_gemm(p, tiles), fuse=False), "")
            try:
                changed = rewrite_program(work / "default.mlir", rewrite, work / f"{name}.mlir")
            except ValueError as e:  # the tiles do not lay out on the shape
                print(f"{shape:28s} {name:20s} declined: {e}")
                continue
            if changed:
                programs[name] = work / f"{name}.mlir"
        # The bias and GELU in the kernel too, the tiles by the rewrite's own rule.
        fused = Rewrite("fused", external_gemms, "")
        if rewrite_program(work / "default.mlir", fused, work / "fused.mlir"):
            programs["fused"] = work / "fused.mlir"
        manifest[shape] = {"mnk": [m, n, k], "modules": {}}
        for name, program in programs.items():
            binaries = work / f"{name}-binaries"
            run = subprocess.run([tool("iree-compile"), str(program), *flags, "-o", str(work / f"{name}.vmfb"),
                                  f"--iree-hal-dump-executable-binaries-to={binaries}"], capture_output=True, text=True)
            wgmma = sum(p.read_text().count("wgmma.mma_async") for p in binaries.glob("*.ptx"))
            ok = run.returncode == 0 and (name == "default" or wgmma > 0)
            print(f"{shape:28s} {name:20s} {'ok' if ok else 'failed: ' + run.stderr[-300:]} wgmma={wgmma}", flush=True)
            if ok:
                manifest[shape]["modules"][name] = {"vmfb": f"{shape}/{name}.vmfb"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def saved_operands(out: Path, shape: str, m: int, n: int, k: int) -> tuple:
    """X[m, k] uniform in [-1, 1) and the W and B compile wrote for the shape."""
    import numpy as np

    return (np.random.default_rng(1).uniform(-1, 1, (m, k)).astype(np.float16), np.load(out / shape / "w.npy"),
            np.load(out / shape / "b.npy"))


def measure(out: Path, rounds: int) -> None:
    from benchmarks.gpu_padded_rows import measure as measure_linear_layers

    measure_linear_layers(out, rounds, "linear", saved_operands)


def main() -> None:
    from benchmarks.gpu_common import compile_or_measure

    compile_or_measure(__doc__, ".gpu-external-gemm", compile_all, measure, sets={"held-out": HELD_OUT, "reported": REPORTED})


if __name__ == "__main__":
    main()
