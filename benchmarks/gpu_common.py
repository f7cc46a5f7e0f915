"""What the GPU benchmark scripts share: the benchmark stage run through the CLI, CUDA-event
timing of torch, and rotating interleaved rounds of default, tuned and torch."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterable, Optional

ROOT = Path(__file__).resolve().parent.parent


def benchmark_stage(work: Path, repetitions: int):
    """`iree-tuner benchmark WORK` (the CLI's own code); (results.json, manifest, seconds) or None."""
    from tuner.build.manifest import Manifest

    t0 = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "tuner.cli", "benchmark", str(work), "--repetitions", str(repetitions)],
                         capture_output=True, text=True, cwd=ROOT)
    print(run.stdout[-2500:], run.stderr[-2000:], flush=True)
    if run.returncode:
        print(f"{work}: benchmark stage failed ({run.returncode})", flush=True)
        return None
    return json.loads((work / "results.json").read_text()), Manifest.read(work), time.perf_counter() - t0


def time_cuda(fn: Callable[[], object], reps: int) -> list[float]:
    """Milliseconds per call of `fn` on the GPU, by CUDA events, after a warm-up."""
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


def interleaved_kernel_ms(runs: dict[str, Callable[[], object]], rounds: int, calls: int,
                          on_device: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """Each run's CUPTI kernel milliseconds per call, a figure a round: in each round every run in
    turn (the order rotated by one each round), 3 calls of warm-up, then `calls` calls under one
    torch.profiler session. Runs not named in `on_device` return an IREE buffer, read back to the
    host after their calls so that they are complete; the read-back's copy is not counted
    (kernel_us)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    times: dict[str, list[float]] = {name: [] for name in runs}
    names = list(runs)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            for _ in range(3):
                runs[name]()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    last = runs[name]()
                torch.cuda.synchronize()
                if name not in on_device:
                    last.to_host()
            times[name].append(kernel_us(prof) / 1000.0 / calls)
    return times


# The record of a copy from the device to the host, as torch.profiler names it ("Memcpy DtoH
# (Device -> Pageable)"): the read-back that ends an IREE run's calls, which no program computes.
# Copies and fills inside a program (device to device, memsets) are its work and stay counted.
READBACK = "Memcpy DtoH"


def is_readback(name: str) -> bool:
    return name.startswith(READBACK)


def kernel_us(prof) -> float:
    """The summed time of a torch.profiler session's CUDA device records but the read-back,
    microseconds: a 64 MB result read back once in 20 calls would add 60-130 us a call to the run
    that returns it to the host and nothing to one that keeps it on the device (torch's)."""
    import torch

    return summed_us((e.name, e.device_time_total) for e in prof.events()
                     if e.device_type == torch.autograd.DeviceType.CUDA)


def summed_us(records: Iterable[tuple[str, float]]) -> float:
    """The sum of (name, microseconds) device records but the read-backs."""
    return sum(us for name, us in records if not is_readback(name))


def select_then_confirm(runs: dict[str, Callable[[], object]], candidates: list[str], figures: dict[str, str],
                        select: int, rounds: int, calls: int, on_device: tuple[str, ...] = ()) -> tuple[str, dict, dict]:
    """Tuning as the kernel-tiles stage does it, then figures not taken from the tuning's own
    timings: `select` interleaved rounds of every run of `candidates`, the fastest by median
    kept (its name: "tuned"); then `rounds` fresh interleaved rounds of `figures` (a label ->
    a run's name, or "tuned"). The fastest of many noisy timings is biased low, so the figures
    are the second rounds'. Returns (the kept candidate, the selection's times, the figures'
    times by label)."""
    import statistics

    chosen = interleaved_kernel_ms({c: runs[c] for c in candidates}, select, calls)
    tuned = min(candidates, key=lambda c: statistics.median(chosen[c]))
    final = {label: runs[tuned if name == "tuned" else name] for label, name in figures.items()}
    return tuned, chosen, interleaved_kernel_ms(final, rounds, calls, on_device=on_device)


def chosen_id(data: dict) -> int:
    """The candidate the tuning chose: its winner, or the baseline when none beat the default
    beyond the noise (then "tuned" is the default again)."""
    if data["best"] is not None:
        return data["best"]
    return next(c["candidate_id"] for c in data["candidates"] if c["is_baseline"])


def default_tuned_torch(data: dict, manifest, work: Path, torch_fn: Callable[[], object], rounds: int) -> dict[str, float]:
    """Median ms of the baseline's and the winner's dispatch alone (as the tuner times them) and
    of `torch_fn`, over rotating interleaved rounds: whatever runs first after a pause can see
    lower clocks, so no one always goes first."""
    from tuner.evaluation.runtime_tools import ModuleRun, benchmark

    built = {b.result.candidate_id: b for b in manifest.built}
    chosen = {"default": next(b for b in manifest.built if b.result.is_baseline), "tuned": built[chosen_id(data)]}
    settings = ModuleRun(device="cuda", entry=manifest.workload.entry, inputs=manifest.inputs(work),
                         repetitions=3, min_time_s=0.2)
    samples: dict[str, list[float]] = {"default": [], "tuned": [], "torch": []}
    order = ["default", "tuned", "torch"]
    for round_ in range(rounds):
        for label in order[round_ % 3:] + order[: round_ % 3]:
            if label == "torch":
                samples["torch"] += time_cuda(torch_fn, 20)
                continue
            timing, run = benchmark(chosen[label].vmfb, settings, chosen[label].dispatch_benchmark)
            if timing is None:
                raise SystemExit(f"{work}: timing {label} failed: {run.first_error()}")
            samples[label] += timing.times_ms
    return {key: statistics.median(v) for key, v in samples.items()}


def arguments(doc: str, out: str, candidates: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--candidates", type=int, default=candidates)
    parser.add_argument("--target", default="cuda:sm_80")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repetitions", type=int, default=3)
    return parser


def checked_iree_runs(out: Path, modules: dict[str, dict], function: str, host_args: list, reference, scale: float,
                      runs: dict, errors: dict) -> None:
    """Each module of `modules` (name -> {"vmfb": path under `out`}) loaded on the GPU, run 5
    times on `host_args` and its error against the torch tensor `reference` (relative to
    `scale`) put in `errors` (infinite where the outputs differ from run to run: a race), its
    call put in `runs` for interleaved_kernel_ms."""
    import numpy as np
    import torch

    import iree.runtime as rt

    config = rt.Config("cuda")
    for name, module in modules.items():
        ctx = rt.SystemContext(config=config)
        ctx.add_vm_module(rt.VmModule.mmap(ctx.instance, str(out / module["vmfb"])))
        fn = ctx.modules.module[function]
        args = [rt.asdevicearray(config.device, x) for x in host_args]
        outputs = [np.asarray(fn(*args).to_host()).astype(np.float32) for _ in range(5)]
        errors[name] = max(float((torch.from_numpy(o).cuda() - reference).abs().max()) / scale for o in outputs)
        if any(not np.array_equal(outputs[0], o) for o in outputs[1:]):
            errors[name] = float("inf")  # differs from run to run: a race
        runs[name] = (lambda fn=fn, args=args: fn(*args))


def report_shape(title: str, mnk: tuple[int, int, int], times: dict[str, list[float]], errors: dict[str, float],
                 rounds: int) -> dict:
    """Print each run's median kernel time, TFLOP/s, speedup over "default" and error; return them."""
    import numpy as np

    m, n, k = mnk
    flops = 2.0 * m * n * k
    base = float(np.median(times["default"]))
    print(f"\n{title}: median CUPTI kernel ms of {rounds} rounds")
    report = {}
    for name, t in times.items():
        med = float(np.median(t))
        report[name] = {"ms": med, "all_ms": t, "error": errors[name], "tflops": flops / med / 1e9, "vs_default": base / med}
        print(f"  {name:22s} {med:8.4f} ms  {flops / med / 1e9:6.1f} TFLOP/s  {base / med:5.2f}x default  "
              f"max err {errors[name]:.1e} of max|C|")
    return report


def compile_or_measure(doc: str, default_out: str, compile_all: Callable[..., None], measure: Callable[[Path, int], None],
                       sets: Optional[dict[str, object]] = None) -> None:
    """The command line of a two-step GPU benchmark: `compile --out DIR [--set NAME]` here
    (`compile_all(out)`, or `compile_all(out, sets[NAME])`), `measure --out DIR --rounds N` on the
    GPU."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("--out", type=Path, default=Path(default_out))
    if sets:
        parser.add_argument("--set", choices=list(sets), default=next(iter(sets)))
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.step == "measure":
        measure(args.out, args.rounds)
    elif sets:
        compile_all(args.out, sets[args.set])
    else:
        compile_all(args.out)
