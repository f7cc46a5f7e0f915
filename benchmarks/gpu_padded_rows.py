"""The mma.sync kernel on rows no tile divides (pipelines/llvmgpu_mma_sync_padded.py) against
IREE's default and torch (cuBLAS + GELU), by CUPTI kernel time, interleaved; every output checked.

    .venv/bin/python benchmarks/gpu_padded_rows.py compile --out DIR [--set held-out|reported]   # here
    python3 benchmarks/gpu_padded_rows.py measure --out DIR --rounds 5                        # on the GPU

`compile` builds, for each shape, `main(A f16[M,K], B f16[K,N], bias f16[N]) = gelu(A B + bias)`
narrowed to f16 (a linear layer as exporters write it: one dispatch, the matmul and one
elementwise op) with IREE's default and with each padded kernel of KERNELS that lays out on it,
its PTX read back (a kernel counts only with ldmatrix and cp.async). `measure` runs each module 5
times (outputs that differ between runs are a race, reported as an infinite error), compares
them with torch's f32 result, then times every module and torch's `gelu(addmm(bias, A, B))` in
rotating order, 20 calls a round under one torch.profiler (CUPTI) session.

The held-out set (the default) is what the kernel's preferences were chosen on; `reported` is
ViT-B/16's and Whisper-base's own shapes, which the preferences were not chosen on."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HELD_OUT = {"clip_vit_l14_mlp_up_4x257": (1028, 4096, 1024), "deit_s_mlp_down_8x197": (1576, 384, 1536),
            "whisper_small_mlp_up_1500": (1500, 3072, 768), "wav2vec2_base_mlp_up_8x249": (1992, 3072, 768),
            "clip_text_mlp_up_8x77": (616, 2048, 512)}
REPORTED = {"vit_b16_mlp_up_8x197": (1576, 3072, 768), "vit_b16_mlp_down_8x197": (1576, 768, 3072),
            "whisper_base_mlp_up_1500": (1500, 2048, 512)}
KERNELS = [(64, 128, 32, 2, 2, 3), (64, 128, 32, 2, 2, 4), (128, 128, 32, 2, 2, 3), (128, 128, 32, 2, 2, 4),
           (128, 128, 32, 2, 4, 4), (64, 64, 32, 2, 2, 4)]
SHARED_LIMIT = 166912  # IREE 3.13's sm_80 target: max_workgroup_memory_bytes
CALLS = 20


def program(m: int, n: int, k: int) -> str:
    """gelu(A B + bias) in f32, narrowed to f16, the GELU exact (erf) as torch's default."""
    return f"""
func.func @main(%a: tensor<{m}x{k}xf16>, %b: tensor<{k}x{n}xf16>, %bias: tensor<{n}xf16>) -> tensor<{m}x{n}xf16> {{
  %zero = arith.constant 0.0 : f32
  %half = arith.constant 0.5 : f32
  %one = arith.constant 1.0 : f32
  %rsqrt2 = arith.constant 0.70710678 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %c = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf16>, tensor<{k}x{n}xf16>) outs(%acc : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %e16 = tensor.empty() : tensor<{m}x{n}xf16>
  %g = linalg.generic {{indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]}} ins(%c, %bias : tensor<{m}x{n}xf32>, tensor<{n}xf16>) outs(%e16 : tensor<{m}x{n}xf16>) {{
  ^bb0(%x: f32, %bb: f16, %o: f16):
    %b32 = arith.extf %bb : f16 to f32
    %y = arith.addf %x, %b32 : f32
    %s = arith.mulf %y, %rsqrt2 : f32
    %er = math.erf %s : f32
    %p = arith.addf %er, %one : f32
    %h = arith.mulf %y, %half : f32
    %r = arith.mulf %h, %p : f32
    %t = arith.truncf %r : f32 to f16
    linalg.yield %t : f16
  }} -> tensor<{m}x{n}xf16>
  return %g : tensor<{m}x{n}xf16>
}}
"""


def compile_all(out: Path, shapes: dict[str, tuple[int, int, int]]) -> None:
    from benchmarks.gpu_mma_sync import compile_counting_ptx
    from pipelines.llvmgpu_mma_sync_strategy import MmaSyncTiles, library_for_every_contraction
    from tuner.targets import parse_target

    out = out.resolve()
    flags = parse_target("cuda").compile_flags
    manifest = {}
    for shape, (m, n, k) in shapes.items():
        work = out / shape
        work.mkdir(parents=True, exist_ok=True)
        (work / "main.mlir").write_text(program(m, n, k))
        builds = {"default": []}
        for tiles in KERNELS:
            kernel = MmaSyncTiles(*tiles, epilogue=True, padded=m % tiles[0] != 0)
            if kernel.fits(m, n, k, SHARED_LIMIT):
                name = "p%dx%dk%dw%dx%ds%d" % tiles
                (work / f"{name}.mlir").write_text(library_for_every_contraction(kernel))
                builds[name] = [f"--iree-codegen-transform-dialect-library={work / name}.mlir@__kernel_config"]
        manifest[shape] = {"mnk": [m, n, k], "modules": {}}
        for name, extra in builds.items():
            run, counts = compile_counting_ptx(work / "main.mlir", [*flags, *extra], work / f"{name}.vmfb")
            ok = run.returncode == 0 and (name == "default" or (counts["ldmatrix"] > 0 and counts["cp.async"] > 0))
            print(f"{shape:28s} {name:20s} {'ok' if ok else 'failed':7s} " + " ".join(f"{l}={c}" for l, c in counts.items()),
                  flush=True)
            if ok:
                manifest[shape]["modules"][name] = {"vmfb": f"{shape}/{name}.vmfb", "ptx": counts}
        for library in work.glob("p*.mlir"):
            library.unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def uniform_operands(out: Path, shape: str, m: int, n: int, k: int) -> tuple:
    """A[m, k], B[k, n] and bias[n], f16 uniform in [-1, 1), the same for every module."""
    import numpy as np

    rng = np.random.default_rng(0)
    return (rng.uniform(-1, 1, (m, k)).astype(np.float16), rng.uniform(-1, 1, (k, n)).astype(np.float16),
            rng.uniform(-1, 1, (n,)).astype(np.float16))


def measure(out: Path, rounds: int, function: str = "main", operands=uniform_operands) -> None:
    """Every module of DIR/manifest.json checked and timed beside torch's gelu(addmm) on
    `operands(out, shape, m, n, k)` -> (A, B, bias); measured.json written."""
    import torch

    from benchmarks.gpu_common import checked_iree_runs, interleaved_kernel_ms, report_shape

    manifest = json.loads((out / "manifest.json").read_text())
    report = {}
    for shape, entry in manifest.items():
        m, n, k = entry["mnk"]
        a, b, bias = operands(out, shape, m, n, k)
        ta, tb, tbias = (torch.from_numpy(x).cuda() for x in (a, b, bias))
        reference = torch.nn.functional.gelu(ta.float() @ tb.float() + tbias.float())
        scale = float(reference.abs().max())
        runs, errors = {}, {}
        checked_iree_runs(out, entry["modules"], function, [a, b, bias], reference, scale, runs, errors)
        runs["torch"] = lambda: torch.nn.functional.gelu(torch.addmm(tbias, ta, tb))
        errors["torch"] = float((runs["torch"]().float() - reference).abs().max()) / scale
        times = interleaved_kernel_ms(runs, rounds, CALLS, on_device=("torch",))
        report[shape] = report_shape(f"{shape} ({m}x{n}x{k}, bias + GELU)", (m, n, k), times, errors, rounds)
    (out / "measured.json").write_text(json.dumps(report, indent=1))


def main() -> None:
    from benchmarks.gpu_common import compile_or_measure

    compile_or_measure(__doc__, ".gpu-padded-rows", compile_all, measure, sets={"held-out": HELD_OUT, "reported": REPORTED})


if __name__ == "__main__":
    main()
