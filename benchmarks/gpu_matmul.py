"""Tune f16 matmuls for cuda (TileAndFuse) and compare default, tuned and torch on an NVIDIA GPU.

Two steps, because the GPU machine has the IREE runtime but not the compiler:

    # here (compiler): tune --compile-only for each shape into OUT
    python benchmarks/gpu_matmul.py compile --out .gpu-runs [--candidates 40] [--only NAMES] [--no-split-k]
    # there (runtime + torch): the benchmark stage per shape, then default/tuned/torch side by side
    python benchmarks/gpu_matmul.py measure --out .gpu-runs [--rounds 5]

`measure` runs `iree-tuner benchmark` on each shape's directory (the same code as the CLI),
then times the baseline's and the winner's dispatch benchmark modules with iree-benchmark-module
(as the tuner does: batches of dispatches, per-dispatch time) and torch.matmul with CUDA events,
in rotating interleaved rounds, cross-checks all three with CUDA-profiler kernel times
(gpu_kernel_times.py), and prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_common import arguments, benchmark_stage, chosen_id, default_tuned_torch  # noqa: E402

# (name, M, N, K): the first is the headline; the rest are shapes from real models.
SHAPES = [
    ("square 4096", 4096, 4096, 4096),
    ("square 2048", 2048, 2048, 2048),
    ("LLM MLP up 512x11008x4096", 512, 11008, 4096),
    ("skinny 16x4096x4096", 16, 4096, 4096),
    ("unaligned 1000x3000x2000", 1000, 3000, 2000),
    ("large K 1024x1024x16384", 1024, 1024, 16384),
    # Held out for split-K (issue 13): real models' MLP down projections, in no other file.
    ("Qwen2-7B MLP down 512x3584x18944", 512, 3584, 18944),
    ("Phi-3-mini MLP down 512x3072x8192", 512, 3072, 8192),
]


def wanted(name: str, only: str | None) -> bool:
    return not only or any(part and part in name for part in only.split(","))


def slug(name: str) -> str:
    return name.split()[0] + "_" + name.split()[-1]


def mlir_for(m: int, n: int, k: int) -> str:
    return f"""func.func @main(%a: tensor<{m}x{k}xf16>, %b: tensor<{k}x{n}xf16>) -> tensor<{m}x{n}xf32> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf16>, tensor<{k}x{n}xf16>) outs(%f : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}
"""


def compile_all(out: Path, candidates: int, target: str, only: str | None, no_split: bool = False) -> None:
    from tuner import api
    from tuner.core.settings import EvalSettings, RunOptions, SearchSettings

    if no_split:  # the same search without split-K, to see what it adds
        import pipelines.llvmgpu_tile_and_fuse as tile_and_fuse

        tile_and_fuse.SPLIT_FACTORS = ()
    for name, m, n, k in SHAPES:
        if not wanted(name, only):
            continue
        work = out / (slug(name) + ("-nosplit" if no_split else ""))
        work.mkdir(parents=True, exist_ok=True)
        src = work / "input.mlir"
        src.write_text(mlir_for(m, n, k))
        t0 = time.perf_counter()
        count = candidates if name == SHAPES[0][0] else max(1, candidates * 3 // 4)
        tuning = api.tune(src, target, work, search=SearchSettings(budget=count), run=RunOptions(EvalSettings(), compile_only=True))
        ok = sum(b.result.ok for b in tuning.manifest.built)
        print(f"{name}: {ok}/{len(tuning.manifest.built)} candidates compiled and verified "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)


def torch_matmul(inputs: list[Path]):
    import numpy as np
    import torch

    a, b = (torch.from_numpy(np.load(p)).cuda() for p in inputs)
    return lambda: torch.matmul(a, b)  # f16 x f16 -> f16 (cuBLAS accumulates in f32)


def measure_all(out: Path, rounds: int, repetitions: int, only: str | None) -> None:
    rows = []
    runs = [(f"{name}{variant}", m, n, k, out / (slug(name) + suffix)) for name, m, n, k in SHAPES
            for variant, suffix in (("", ""), (" (no split-K)", "-nosplit"))]
    for name, m, n, k, work in runs:
        if not wanted(name, only) or not (work / "manifest.json").exists():
            continue
        stage = benchmark_stage(work, repetitions)
        if stage is None:
            continue
        data, manifest, bench_s = stage
        med = default_tuned_torch(data, manifest, work, torch_matmul(list(manifest.inputs(work))), rounds)
        built = {b.result.candidate_id: b for b in manifest.built}
        best = next(c for c in data["candidates"] if c["candidate_id"] == chosen_id(data))
        default = next(b for b in manifest.built if b.result.is_baseline)
        # Cross-check with kernel times from the CUDA profiler, all three in one process.
        kt = subprocess.run([sys.executable, str(Path(__file__).with_name("gpu_kernel_times.py")), "--json",
                             str(m), str(n), str(k), f"default={default.vmfb}",
                             f"tuned={built[best['candidate_id']].vmfb}"], capture_output=True, text=True)
        kernels = json.loads(kt.stdout.strip().splitlines()[-1]) if kt.returncode == 0 else {}
        failed = sum(c["status"] != "ok" for c in data["candidates"])
        claimed = best.get("speedup") if data["best"] is not None else 1.0  # the tuner's own paired figure
        rows.append((name, med, kernels, best["label"], len(data["candidates"]), failed, bench_s, claimed,
                     [c.get("device_id") for c in data["candidates"] if c["is_baseline"]]))
        print(f"{name}: default {med['default']:.3f} ms, tuned {med['tuned']:.3f} ms "
              f"({med['default'] / med['tuned']:.2f}x), torch {med['torch']:.3f} ms; winner {best['label']}", flush=True)
    import torch

    print()
    print(f"Device: {torch.cuda.get_device_name(0)}; IREE runtime 3.13.0, cuda sm_80 PTX; torch {torch.__version__}; "
          f"{rounds} interleaved rounds, medians.")
    print()
    print(f"Device identity the results are stored under: {sorted({d for r in rows for d in r[-1]})}")
    print()
    print("| shape (f16 x f16 -> f32) | default ms | tuned ms | torch ms | tuned vs default | tuner's claim (paired) "
          "| torch vs tuned | kernel ms default / tuned / torch (CUPTI) | winner | candidates (failed) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, med, kernels, label, count, failed, bench_s, claimed, _ in rows:
        kcol = " / ".join(f"{kernels[x]:.3f}" for x in ("default", "tuned", "torch")) if kernels else "-"
        print(f"| {name} | {med['default']:.3f} | {med['tuned']:.3f} | {med['torch']:.3f} "
              f"| **{med['default'] / med['tuned']:.2f}x** | {claimed:.2f}x | {med['tuned'] / med['torch']:.2f}x "
              f"| {kcol} | {label} | {count} ({failed}), measured in {bench_s:.0f} s |")


def main() -> None:
    parser = arguments(__doc__, ".gpu-runs", 40)
    parser.add_argument("--only", default=None, help="only shapes whose name contains one of these (comma-separated)")
    parser.add_argument("--no-split-k", action="store_true", help="compile: offer no split-K configs (into SHAPE-nosplit)")
    args = parser.parse_args()
    if args.step == "compile":
        compile_all(args.out, args.candidates, args.target, args.only, args.no_split_k)
    else:
        measure_all(args.out, args.rounds, args.repetitions, args.only)


if __name__ == "__main__":
    main()
