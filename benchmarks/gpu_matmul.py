"""Tune f16 matmuls for cuda (TileAndFuse) and compare default, tuned and torch on an NVIDIA GPU.

Two steps, because the GPU machine has the IREE runtime but not the compiler:

    # here (compiler): tune --compile-only for each shape into OUT
    python benchmarks/gpu_matmul.py compile --out .gpu-runs [--candidates 40]
    # there (runtime + torch): the benchmark stage per shape, then default/tuned/torch side by side
    python benchmarks/gpu_matmul.py measure --out .gpu-runs [--rounds 5]

`measure` runs `iree-tuner benchmark` on each shape's directory (the same code as the CLI),
then times the baseline's and the winner's dispatch benchmark modules with iree-benchmark-module
(as the tuner does: batches of dispatches, per-dispatch time) and torch.matmul with CUDA events,
in rotating interleaved rounds, cross-checks all three with CUDA-profiler kernel times
(gpu_kernel_times.py), and prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (name, M, N, K): the first is the headline; the rest are shapes from real models.
SHAPES = [
    ("square 4096", 4096, 4096, 4096),
    ("square 2048", 2048, 2048, 2048),
    ("LLM MLP up 512x11008x4096", 512, 11008, 4096),
    ("skinny 16x4096x4096", 16, 4096, 4096),
    ("unaligned 1000x3000x2000", 1000, 3000, 2000),
    ("large K 1024x1024x16384", 1024, 1024, 16384),
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


def compile_all(out: Path, candidates: int, target: str, only: str | None) -> None:
    from tuner import api
    from tuner.settings import EvalSettings

    for name, m, n, k in SHAPES:
        if not wanted(name, only):
            continue
        work = out / slug(name)
        work.mkdir(parents=True, exist_ok=True)
        src = work / "input.mlir"
        src.write_text(mlir_for(m, n, k))
        t0 = time.perf_counter()
        count = candidates if name == SHAPES[0][0] else max(1, candidates * 3 // 4)
        tuning = api.tune(src, target, count, work, settings=EvalSettings(), compile_only=True)
        ok = sum(b.result.ok for b in tuning.manifest.built)
        print(f"{name}: {ok}/{len(tuning.manifest.built)} candidates compiled and verified "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)


def time_torch(m: int, n: int, k: int, a_path: Path, b_path: Path, reps: int) -> list[float]:
    import numpy as np
    import torch

    a = torch.from_numpy(np.load(a_path)).cuda()
    b = torch.from_numpy(np.load(b_path)).cuda()
    for _ in range(5):
        torch.matmul(a, b)
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.matmul(a, b)  # f16 x f16 -> f16 (cuBLAS accumulates in f32)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def measure_all(out: Path, rounds: int, repetitions: int, only: str | None) -> None:
    from tuner.manifest import Manifest
    from tuner.runner import RunSettings, benchmark

    rows = []
    for name, m, n, k in SHAPES:
        work = out / slug(name)
        if not wanted(name, only) or not (work / "manifest.json").exists():
            continue
        t0 = time.perf_counter()
        cmd = [sys.executable, "-m", "tuner.cli", "benchmark", str(work), "--repetitions", str(repetitions)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        print(run.stdout[-3000:], run.stderr[-2000:], flush=True)
        if run.returncode:
            print(f"{name}: benchmark stage failed ({run.returncode})", flush=True)
            continue
        bench_s = time.perf_counter() - t0
        data = json.loads((work / "results.json").read_text())
        manifest = Manifest.read(work)
        by_id = {c["candidate_id"]: c for c in data["candidates"]}
        best = by_id[data["best"]]
        built = {b.result.candidate_id: b for b in manifest.built}
        base = next(b for b in manifest.built if b.result.is_baseline)
        chosen = {"default": base, "tuned": built[best["candidate_id"]]}
        inputs = manifest.inputs(work)
        settings = RunSettings(device="cuda", entry="main", inputs=inputs, repetitions=3, min_time_s=0.2)
        samples: dict[str, list[float]] = {"default": [], "tuned": [], "torch": []}
        for round_ in range(rounds):
            # Rotate the order each round: whatever runs first after a pause can see lower clocks.
            order = ["default", "tuned", "torch"]
            for label in order[round_ % 3:] + order[: round_ % 3]:
                if label == "torch":
                    samples["torch"] += time_torch(m, n, k, inputs[0], inputs[1], 20)
                    continue
                # The dispatch alone, as the tuner timed it (device work without per-call overhead).
                timing, brun = benchmark(chosen[label].vmfb, settings, chosen[label].dispatch_benchmark)
                if timing is None:
                    raise SystemExit(f"{name}: timing {label} failed: {brun.first_error()}")
                samples[label] += timing.times_ms
        med = {key: statistics.median(v) for key, v in samples.items()}
        # Cross-check with kernel times from the CUDA profiler, all three in one process.
        kt = subprocess.run([sys.executable, str(Path(__file__).with_name("gpu_kernel_times.py")), "--json",
                             str(m), str(n), str(k), f"default={chosen['default'].vmfb}",
                             f"tuned={chosen['tuned'].vmfb}"], capture_output=True, text=True)
        kernels = json.loads(kt.stdout.strip().splitlines()[-1]) if kt.returncode == 0 else {}
        failed = sum(c["status"] != "ok" for c in data["candidates"])
        rows.append((name, med, kernels, best["label"], len(data["candidates"]), failed, bench_s))
        print(f"{name}: default {med['default']:.3f} ms, tuned {med['tuned']:.3f} ms "
              f"({med['default'] / med['tuned']:.2f}x), torch {med['torch']:.3f} ms; winner {best['label']}", flush=True)
    import torch

    print()
    print(f"Device: {torch.cuda.get_device_name(0)}; IREE runtime 3.13.0, cuda sm_80 PTX; torch {torch.__version__}; "
          f"{rounds} interleaved rounds, medians.")
    print()
    print("| shape (f16 x f16 -> f32) | default ms | tuned ms | torch ms | tuned vs default | torch vs tuned "
          "| kernel ms default / tuned / torch (CUPTI) | winner | candidates (failed) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, med, kernels, label, count, failed, bench_s in rows:
        kcol = " / ".join(f"{kernels[x]:.3f}" for x in ("default", "tuned", "torch")) if kernels else "-"
        print(f"| {name} | {med['default']:.3f} | {med['tuned']:.3f} | {med['torch']:.3f} "
              f"| **{med['default'] / med['tuned']:.2f}x** | {med['tuned'] / med['torch']:.2f}x | {kcol} | {label} "
              f"| {count} ({failed}), measured in {bench_s:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("--out", type=Path, default=Path(".gpu-runs"))
    parser.add_argument("--candidates", type=int, default=40)
    parser.add_argument("--target", default="cuda:sm_80")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--only", default=None, help="only shapes whose name contains one of these (comma-separated)")
    args = parser.parse_args()
    if args.step == "compile":
        compile_all(args.out, args.candidates, args.target, args.only)
    else:
        measure_all(args.out, args.rounds, args.repetitions, args.only)


if __name__ == "__main__":
    main()
