"""Tune a batch matmul, convolutions and attention for cuda; compare default, tuned and torch on the GPU.

Two steps, because the GPU machine has the IREE runtime but not the compiler:

    # here (compiler): tune --compile-only for each sample into OUT
    python benchmarks/gpu_kinds.py compile --out .gpu-kinds [--candidates 30]
    # there (runtime + torch): the benchmark stage per sample, then default/tuned/torch side by side
    python benchmarks/gpu_kinds.py measure --out .gpu-kinds [--rounds 5]

`measure` runs `iree-tuner benchmark` on each directory (the CLI's own code), then times the
baseline's and the winner's dispatch benchmark modules (batches of dispatches, per-dispatch
time, as the tuner does) and torch's equivalent op (torch.matmul; conv2d in channels-last f16,
i.e. cuDNN; scaled_dot_product_attention) with CUDA events, in rotating interleaved rounds, and prints a Markdown table.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.gpu_common import ROOT, arguments, benchmark_stage, chosen_id, default_tuned_torch  # noqa: E402

SAMPLES = {
    "batch matmul 16x1024x1024x1024 f16": "batch_matmul_16x1024x1024x1024_f16f16f32.mlir",
    "conv 3x3 NHWC 2x32x32x256 f16": "conv_2d_nhwc_hwcf_2x34x34x256_3x3x256_f16f16f32.mlir",
    "conv-large 3x3 NHWC 8x64x64x256 f16": "conv_2d_nhwc_hwcf_8x66x66x256_3x3x256_f16f16f32.mlir",
    "attention 32x4096x4096x64 f16": "attention_32x4096x4096x64_f16.mlir",
}


def slug(name: str) -> str:
    return name.split()[0]


def compile_all(out: Path, candidates: int, target: str) -> None:
    from tuner import api
    from tuner.core.settings import RunOptions, SearchSettings

    for name, sample in SAMPLES.items():
        work = out / slug(name)
        if (work / "manifest.json").exists():
            continue  # compiled by an earlier call
        t0 = time.perf_counter()
        tuning = api.tune(ROOT / "sample_dispatches" / sample, target, work, search=SearchSettings(budget=candidates), run=RunOptions(compile_only=True))
        ok = sum(b.result.ok for b in tuning.manifest.built)
        print(f"{name}: {ok}/{len(tuning.manifest.built)} candidates compiled and verified "
              f"in {time.perf_counter() - t0:.0f} s", flush=True)


def torch_op(name: str, inputs: list[Path]):
    """torch's version of the sample on the GPU, as a no-argument callable."""
    import numpy as np
    import torch

    if name.startswith("attention"):
        # As (1, heads, L, E): SDPA runs its flash kernel on 4-D inputs. The sample's scale is
        # 0.125 = 1/sqrt(64), SDPA's default.
        q, k, v = (torch.from_numpy(np.load(p)).cuda().unsqueeze(0) for p in inputs)
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    a, b = (torch.from_numpy(np.load(p)).cuda() for p in inputs)
    if name.startswith("conv"):
        # NHWC input, HWCF filter -> torch's NCHW / OIHW views in channels-last memory (cuDNN).
        x = a.permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
        w = b.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        return lambda: torch.nn.functional.conv2d(x, w)
    return lambda: torch.matmul(a, b)  # f16 x f16 -> f16, f32 accumulation in cuBLAS


def measure_all(out: Path, rounds: int, repetitions: int) -> None:
    import torch

    rows = []
    for name in SAMPLES:
        work = out / slug(name)
        if not (work / "manifest.json").exists():
            continue
        stage = benchmark_stage(work, repetitions)
        if stage is None:
            continue
        data, manifest, bench_s = stage
        med = default_tuned_torch(data, manifest, work, torch_op(name, list(manifest.inputs(work))), rounds)
        best = next(c for c in data["candidates"] if c["candidate_id"] == chosen_id(data))
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
    args = arguments(__doc__, ".gpu-kinds", 30).parse_args()
    if args.step == "compile":
        compile_all(args.out, args.candidates, args.target)
    else:
        measure_all(args.out, args.rounds, args.repetitions)


if __name__ == "__main__":
    main()
