"""Timing whole-model builds against a reference in interleaved rounds, with the numerics
compared at the model's output. Runtime-only (numpy and IREE's runtime tools), so the machine
that has the device runs it too.

How a build is timed is injected (`ModelBenchmark`): on a CUDA device where CUPTI loads, its
kernel time per call with the module loaded into this process once (`model_timer`); elsewhere
IREE's `iree-benchmark-module` on the entry function; a client may bring its own command."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

import numpy as np

from tuner.core.comparison import Paired, interleaved_rounds
from tuner.evaluation.devices import distinct_gpus
from tuner.evaluation.in_model import TOOL_TIMED, time_model, times_in_model
from tuner.evaluation.measure import HOST_SLACK
from tuner.errors import ToolError
from tuner.core.running import ModuleRun, Timing
from tuner.core.settings import usable_cores
from tuner.evaluation.runtime_tools import benchmark, read_output, relative_error, run_once, tolerance
from tuner.run_dir import real_directory


class ModelBenchmark(Protocol):
    """How a compiled model is timed: one timing (several repetitions) of one call."""

    def __call__(self, vmfb: Path, settings: ModuleRun) -> Optional[Timing]: ...


def iree_benchmark(vmfb: Path, settings: ModuleRun) -> Optional[Timing]:
    """iree-benchmark-module on the entry function (a process per timing): the wall time per call."""
    return benchmark(vmfb, settings)[0]


def model_timer(device: str, gpu_timing: str) -> ModelBenchmark:
    """How the whole model is timed where the client brings no timer: on a CUDA device where
    CUPTI loads (and `gpu_timing`, EvalSettings', is not "alone"), its kernels in this process
    (tuner.evaluation.in_model.time_model); else iree_benchmark."""
    return time_model if times_in_model(gpu_timing, device) else iree_benchmark


def timing_method(timer: ModelBenchmark, inputs: Callable[[], tuple[Path, ...]] = tuple) -> str:
    """What a whole-model timing of the model with `inputs()` measures, in words (results.json,
    the model line); the inputs are asked for only where the timer is time_model."""
    if timer is iree_benchmark:
        return "wall time per call (iree-benchmark-module)"
    if timer is time_model:
        if inputs() in TOOL_TIMED:  # they could not be uploaded in-process: every timing was the tool's
            return "wall time per call (iree-benchmark-module: inputs of a kind the tuner's process cannot upload)"
        return "kernel time per call (CUPTI, the module loaded once)"
    return "the client's timer"  # (any callable: a client's may not be hashable)


@dataclass(frozen=True)
class Comparison:
    """Variants against a reference, timed in interleaved rounds (R v1 R v2 R ...), each round's
    ratio taken against the two reference timings that bracket it."""

    reference_ms: tuple[float, ...]
    paired: dict[str, Paired]  # variant name -> ratios (reference / variant; >1: faster)
    variant_ms: dict[str, tuple[float, ...]]
    errors: dict[str, float] = field(default_factory=dict)  # numerics: relative error at the output
    failed: dict[str, str] = field(default_factory=dict)  # variant name -> why it could not be timed
    numerics: str = ""  # why the outputs were not compared ("": they were, or none is checked)
    # Where the reference's own result is off the host's (tuner.stages.host_reference): what was
    # found, the builds then checked against the host's result ("": it agrees, or no host result).
    reference_check: str = ""

    def to_json(self) -> dict:
        return {"reference_ms": list(self.reference_ms), "ratios": {n: list(p.ratios) for n, p in self.paired.items()},
                "variant_ms": {n: list(t) for n, t in self.variant_ms.items()}, "errors": self.errors,
                "failed": self.failed, "numerics": self.numerics, "reference_check": self.reference_check}

    @classmethod
    def joined(cls, chains: Sequence["Comparison"]) -> "Comparison":
        """Comparisons of disjoint variants, each on a device of its own, as one: the reference's
        times are the first's (the load check reads one device's, never mixed)."""
        return cls(chains[0].reference_ms, {n: p for c in chains for n, p in c.paired.items()},
                   {n: t for c in chains for n, t in c.variant_ms.items()},
                   {n: e for c in chains for n, e in c.errors.items()},
                   {n: f for c in chains for n, f in c.failed.items()},
                   next((c.numerics for c in chains if c.numerics), ""),
                   next((c.reference_check for c in chains if c.reference_check), ""))

    @classmethod
    def pooled(cls, chains: Sequence["Comparison"]) -> "Comparison":
        """Comparisons of the same variants, each on a device of its own for a share of the rounds,
        as one: each variant's rounds one after the other (every ratio still of two timings on one
        device); the times, errors and reference's the first device's (absolute times never mixed
        across devices); a variant that failed on any device failed."""
        failed = {n: f for c in chains for n, f in c.failed.items()}
        paired = {}
        for name in chains[0].paired:
            if name not in failed and all(name in c.paired for c in chains):
                paired[name] = chains[0].paired[name]
                for later in chains[1:]:
                    paired[name] = paired[name].then(later.paired[name])
        first = chains[0]
        return cls(first.reference_ms, paired, {n: t for n, t in first.variant_ms.items() if n in paired},
                   dict(first.errors), failed, next((c.numerics for c in chains if c.numerics), ""),
                   next((c.reference_check for c in chains if c.reference_check), ""))

    @classmethod
    def from_json(cls, data: dict) -> "Comparison":
        return cls(tuple(data["reference_ms"]), {n: Paired(tuple(r)) for n, r in data["ratios"].items()},
                   {n: tuple(t) for n, t in data["variant_ms"].items()}, dict(data.get("errors", {})),
                   dict(data.get("failed", {})), data.get("numerics", ""), data.get("reference_check", ""))


CHECKED_ON_HOST = ": every build is checked against llvm-cpu's"  # what follows from a reference_check


def off_host(reference_check: str) -> str:
    """A Comparison.reference_check's finding without what follows from it: "the result of
    default is off llvm-cpu's on this host (relative error 1.1)"."""
    return reference_check.removesuffix(CHECKED_ON_HOST)


def compare(reference: tuple[str, Path], variants: Sequence[tuple[str, Path]], settings: ModuleRun, rounds: int,
            directory: Path, timer: ModelBenchmark = iree_benchmark,
            progress: Optional[Callable[[str, int, int], None]] = None,
            host: Optional[np.ndarray] = None) -> Comparison:
    """`compare_on_device` on `settings.device`; with several `settings.spread_over` (GPUs, not
    the host's own cores, which timings would share), each device timing against the reference in
    a chain of its own, side by side, so that a ratio is always of two timings on one device
    (issue 62): at least as many variants as GPUs, the variants dealt over them; fewer (a merge's
    step, a verdict's confirmation), the rounds dealt over them, each timing every variant
    (`Comparison.pooled`)."""
    devices = settings.spread_over
    gpus = distinct_gpus(devices)
    if len(gpus) != len(set(devices)):  # the host's own cores among them: one chain
        gpus = []
    if variants and len(gpus) > len(variants) and rounds >= 2:
        gpus = gpus[:rounds]
        shares = [rounds // len(gpus) + (1 if i < rounds % len(gpus) else 0) for i in range(len(gpus))]
        return Comparison.pooled(_side_by_side([(d, variants, share) for d, share in zip(gpus, shares)],
                                               reference, settings, directory, timer, progress, host))
    spread = gpus[:len(variants)]
    if len(spread) < 2:
        return compare_on_device(reference, variants, settings, rounds, directory, timer, progress, host)
    return Comparison.joined(_side_by_side([(d, variants[i::len(spread)], rounds) for i, d in enumerate(spread)],
                                           reference, settings, directory, timer, progress, host))


def _side_by_side(chains: Sequence[tuple[str, Sequence[tuple[str, Path]], int]], reference: tuple[str, Path],
                  settings: ModuleRun, directory: Path, timer: ModelBenchmark,
                  progress: Optional[Callable[[str, int, int], None]],
                  host: Optional[np.ndarray]) -> list[Comparison]:
    """`compare_on_device` for each (device, variants, rounds) at once, each in `directory /
    device-I`, their progress told as one."""
    counts: dict[int, tuple[int, int]] = {}
    lock = threading.Lock()

    def chain_progress(i: int) -> Optional[Callable[[str, int, int], None]]:
        def said(phase: str, done: int, steps: int) -> None:
            with lock:
                counts[i] = (done, steps)
                progress(phase, sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values()))
        return said if progress else None

    with ThreadPoolExecutor(len(chains)) as pool:
        running = [pool.submit(compare_on_device, reference, mine, replace(settings, device=d), rounds,
                               directory / f"device-{i}", timer, chain_progress(i), host)
                   for i, (d, mine, rounds) in enumerate(chains)]
        return [r.result() for r in running]


def compare_on_device(reference: tuple[str, Path], variants: Sequence[tuple[str, Path]], settings: ModuleRun,
                      rounds: int, directory: Path, timer: ModelBenchmark = iree_benchmark,
                      progress: Optional[Callable[[str, int, int], None]] = None,
                      host: Optional[np.ndarray] = None) -> Comparison:
    """Run each build (name, module) once to compare its output with the reference's (numerics),
    then time them in `rounds` interleaved rounds, each run and timing under `settings` (the
    model's entry, inputs and device: EvalSettings.module_run). One that fails to run or
    computes a different result is left out of the timing and named in `failed`. `host`: the
    same program's result on the host (llvm-cpu); where the reference's is off it (or not
    finite), every build is checked against the host's instead."""
    checked = settings.checked
    real_directory(directory)
    failed: dict[str, str] = {}
    errors: dict[str, float] = {}
    unchecked = reference_check = ""
    ref_out = None
    runs = _numerics_runs([("reference", reference[1]), *variants], settings, directory) if checked is not None else {}
    if checked is not None:
        run = runs["reference"]
        if not run.ok:
            raise ToolError(f"the model ({reference[0]}) did not run: {run.first_error()}",
                            list(run.command), run.stderr)
        ref_out = read_output(directory / "reference", settings)
        if ref_out is not None and host is not None:
            off = relative_error(ref_out, host) if np.all(np.isfinite(ref_out)) else float("inf")
            if not off <= tolerance(settings.checked_type) * HOST_SLACK:
                reference_check = (f"the result of {reference[0]} is off llvm-cpu's on this host (relative error "
                                   f"{off:.2g}){CHECKED_ON_HOST}")
                ref_out = host
        if ref_out is not None and not np.all(np.isfinite(ref_out)):
            # Nothing can be compared with a NaN or an infinity (a NaN error would pass any
            # tolerance): the builds are timed, their numerics said to be unchecked.
            unchecked = f"not checked: the output of {reference[0]} is not finite for these inputs"
            ref_out = None
    timed = []
    for name, vmfb in variants:
        if ref_out is not None:
            out = directory / name
            run = runs[name]
            if not run.ok:
                failed[name] = f"did not run: {run.first_error()}"
                continue
            errors[name] = relative_error(read_output(out, settings), ref_out)
            if errors[name] > tolerance(settings.checked_type) * HOST_SLACK:
                failed[name] = f"a different result (relative error {errors[name]:.2g})"
                continue
        timed.append((name, vmfb))
    # One chain R v1 R v2 R ... across the rounds: a round opens with the reference timing that
    # closed the one before (each variant still sits between two reference timings), so a merge
    # step of 3 rounds starts 7 timing runs, not 9 (on the H100 each is a process that loads the
    # whole model: ResNet-50's merge took 345 s for 13 winners).
    steps, done = (1 + 2 * len(timed) * rounds if timed else rounds) if rounds else 0, 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress and timed:
            progress("model", done, steps)

    taken = interleaved_rounds(lambda: _time(reference[1], settings, timer),
                               {name: (lambda vmfb=vmfb: _time(vmfb, settings, timer)) for name, vmfb in timed},
                               rounds, carry_over=True, tick=tick)
    ref_ms = [t or 0.0 for ts in taken.reference for t in ts]
    var_ms = {name: [ms for ms in taken.times[name] if ms] for name, _ in timed}
    ratios = {name: [around / ms for ms, around in zip(taken.times[name], taken.around[name]) if ms and around]
              for name, _ in timed}
    return Comparison(tuple(ref_ms), {n: Paired(tuple(r)) for n, r in ratios.items()},
                      {n: tuple(t) for n, t in var_ms.items()}, errors, failed, unchecked, reference_check)


# Numerics runs made at once on a GPU (each a process that loads the module, its PTX compiled by
# the driver on the host's cores, and runs it once): DenseNet-121's flag stage on the H200 spent
# about 105 of its 122 s of model timings in such runs, one after another, about 5 s each.
CHECKS_AT_ONCE = 4


def _numerics_runs(builds: Sequence[tuple[str, Path]], settings: ModuleRun, directory: Path) -> dict:
    """Each build (name, module) run once, its checked result saved under `directory / name`:
    on a GPU up to CHECKS_AT_ONCE at a time (one per four host cores), each that fails beside
    the others run again alone (a model that needs most of the device's memory); on the host's
    own cores one at a time (they would share the cores the runs compute on)."""
    at_once = min(CHECKS_AT_ONCE, usable_cores() // 4, len(builds))
    if settings.device.startswith("local") or at_once < 2:
        return {name: run_once(vmfb, settings, directory / name) for name, vmfb in builds}
    with ThreadPoolExecutor(at_once, "numerics") as pool:
        runs = dict(zip([name for name, _ in builds],
                        pool.map(lambda b: run_once(b[1], settings, directory / b[0]), builds)))
    return {name: runs[name] if runs[name].ok else run_once(vmfb, settings, directory / name) for name, vmfb in builds}


def _time(vmfb: Path, settings: ModuleRun, timer: ModelBenchmark) -> Optional[float]:
    timing = timer(vmfb, settings)
    time.sleep(0)  # let a Ctrl-C between timings land
    return timing.median_ms if timing is not None else None
