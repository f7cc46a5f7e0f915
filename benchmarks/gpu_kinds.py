"""Tune a batch matmul and a convolution for cuda and compare default, tuned and torch on the GPU.

Two steps, because the GPU machine has the IREE runtime but not the compiler:

    # here (compiler): tune --compile-only for each sample into OUT
    python benchmarks/gpu_kinds.py compile --out .gpu-kinds [--candidates 30]
    # there (runtime + torch): the benchmark stage per sample, then default/tuned/torch side by side
    python benchmarks/gpu_kinds.py measure --out .gpu-kinds [--rounds 5]

`measure` runs `iree-tuner benchmark` on each directory (the CLI's own code), then times the
baseline's and the winner's dispatch benchmark modules (batches of dispatches, per-dispatch
time, as the tuner does) and torch's equivalent op (torch.matmul; conv2d in channels-last f16,
i.e. cuDNN) with CUDA events, in rotating interleaved rounds, and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SAMPLES = {
    "batch matmul 16x1024x1024x1024 f16": "batch_matmul_16x1024x1024x1024_f16f16f32.mlir",
    "conv 3x3 NHWC 2x32x32x256 f16": "conv_2d_nhwc_hwcf_2x34x34x256_3x3x256_f16f16f32.mlir",
    "conv-large 3x3 NHWC 8x64x64x256 f16": "conv_2d_nhwc_hwcf_8x66x66x256_3x3x256_f16f16f32.mlir",
}


def slug(name: str) -> str:
    return name.split()[0]


def compile_all(out: Path, candidates: int, target: str) -> None:
    from tuner import api

    for name, sample in SAMPLES.items():
        work = out / slug(name)
        if (work / "manifest.json").exists():
            continue  # compiled by an earlier call
        t0 = time.perf_counter()
        tuning = api.tune(ROOT / "sample_dispatches" / sample, target, candidates, work, compile_only=True)
        ok = sum(b.result.ok for b in tuning.manifest.built)
        print(f"{name}: {ok}/{len(tuning.manifest.built)} candidates compiled and verified "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)


def torch_op(name: str, inputs: list[Path]):
    """torch's version of the sample on the GPU, as a no-argument callable."""
    import numpy as np
    import torch

    a, b = (torch.from_numpy(np.load(p)).cuda() for p in inputs)
    if name.startswith("conv"):
        # NHWC input, HWCF filter -> torch's NCHW / OIHW views in channels-last memory (cuDNN).
        x = a.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w = b.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        return lambda: torch.nn.functional.conv2d(x, w)
    return lambda: torch.matmul(a, b)  # f16 x f16 -> f16, f32 accumulation in cuBLAS


def time_torch(fn, reps: int) -> list[float]:
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return times


def measure_all(out: Path, rounds: int, repetitions: int) -> None:
    import torch

    from tuner.manifest import Manifest
    from tuner.runner import RunSettings, benchmark

    rows = []
    for name in SAMPLES:
        work = out / slug(name)
        if not (work / "manifest.json").exists():
            continue
        t0 = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "tuner.cli", "benchmark", str(work), "--repetitions",
                              str(repetitions)], capture_output=True, text=True, cwd=ROOT)
        print(run.stdout[-2500:], run.stderr[-2000:], flush=True)
        if run.returncode:
            print(f"{name}: benchmark stage failed ({run.returncode})", flush=True)
            continue
        bench_s = time.perf_counter() - t0
        data = json.loads((work / "results.json").read_text())
        manifest = Manifest.read(work)
        best = next(c for c in data["candidates"] if c["candidate_id"] == data["best"])
        built = {b.result.candidate_id: b for b in manifest.built}
        chosen = {"default": next(b for b in manifest.built if b.result.is_baseline),
                  "tuned": built[best["candidate_id"]]}
        inputs = list(manifest.inputs(work))
        settings = RunSettings(device="cuda", entry="main", inputs=tuple(inputs), repetitions=3, min_time_s=0.2)
        reference = torch_op(name, inputs)
        samples: dict[str, list[float]] = {"default": [], "tuned": [], "torch": []}
        for round_ in range(rounds):
            order = ["default", "tuned", "torch"]
            for label in order[round_ % 3:] + order[: round_ % 3]:
                if label == "torch":
                    samples["torch"] += time_torch(reference, 20)
                    continue
                timing, brun = benchmark(chosen[label].vmfb, settings, chosen[label].dispatch_benchmark)
                if timing is None:
                    raise SystemExit(f"{name}: timing {label} failed: {brun.first_error()}")
                samples[label] += timing.times_ms
        med = {key: statistics.median(v) for key, v in samples.items()}
        failed = sum(c["status"] != "ok" for c in data["candidates"])
        rows.append((name, med, best["label"], len(data["candidates"]), failed, bench_s))
        print(f"{name}: default {med['default']:.3f} ms, tuned {med['tuned']:.3f} ms "
              f"({med['default'] / med['tuned']:.2f}x), torch {med['torch']:.3f} ms; winner {best['label']}", flush=True)
    print()
    print(f"Device: {torch.cuda.get_device_name(0)}; IREE runtime 3.13.0, cuda sm_80 PTX; torch {torch.__version__}; "
          f"{rounds} interleaved rounds, medians.")
    print()
    print("| dispatch | default ms | tuned ms | torch ms | tuned vs default | torch vs tuned | winner | candidates (failed) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, med, label, count, failed, bench_s in rows:
        print(f"| {name} | {med['default']:.3f} | {med['tuned']:.3f} | {med['torch']:.3f} "
              f"| **{med['default'] / med['tuned']:.2f}x** | {med['tuned'] / med['torch']:.2f}x | {label} "
              f"| {count} ({failed}), measured in {bench_s:.0f} s |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("--out", type=Path, default=Path(".gpu-kinds"))
    parser.add_argument("--candidates", type=int, default=30)
    parser.add_argument("--target", default="cuda:sm_80")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    if args.step == "compile":
        compile_all(args.out, args.candidates, args.target)
    else:
        measure_all(args.out, args.rounds, args.repetitions)


if __name__ == "__main__":
    main()
