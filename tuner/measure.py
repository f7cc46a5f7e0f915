"""Measuring built candidates: numerics against the baseline, timing, and a confirmation round.
Runtime-only (numpy and IREE's runtime tools; no compiler, no z3), so it also runs on a machine
that only received the compiled candidates."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from tuner.errors import ToolError
from tuner.results import Result, Status
from tuner.runner import DispatchBenchmark, RunSettings, Timing, benchmark, relative_error, run_once, tolerance
from tuner.settings import EvalSettings
from tuner.store import ResultStore

# phase ("compile", "benchmark", "confirm"), done, total
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Built:
    """A compiled (or failed) candidate, ready to measure: plain data that can be written into a
    manifest on one machine and measured on another."""

    result: Result  # status so far: OK means it compiled and its config was read back
    vmfb: Optional[Path]
    out_type: str  # element type of the result, for the numerics tolerance
    spec: Optional[Path]  # the candidate's tuning spec file (an empty spec for flag-only configs)
    spec_flag: Optional[str]  # the flag that passes the spec to iree-compile, if it needs one
    base_flags: tuple[str, ...]  # every other flag that builds it
    # Where the target times dispatches alone (GPUs): the dispatch benchmark module to time.
    dispatch_vmfb: Optional[Path] = None
    dispatch_function: Optional[str] = None

    @property
    def dispatch_benchmark(self) -> Optional[DispatchBenchmark]:
        if self.dispatch_vmfb is None or self.dispatch_function is None:
            return None
        return DispatchBenchmark(self.dispatch_vmfb, self.dispatch_function)

    def rebuild_flags(self, spec_path: Path) -> list[str]:
        """iree-compile flags that rebuild this candidate with its spec at `spec_path`."""
        extra = [f"{self.spec_flag}={spec_path.resolve()}"] if self.spec_flag and self.spec else []
        return [*self.base_flags, *extra]

    def to_json(self, root: Path) -> dict:
        rel = lambda p: str(p.relative_to(root)) if p else None  # noqa: E731
        return {"result": self.result.to_json(), "vmfb": rel(self.vmfb), "out_type": self.out_type,
                "spec": rel(self.spec), "spec_flag": self.spec_flag, "base_flags": list(self.base_flags),
                "dispatch_vmfb": rel(self.dispatch_vmfb), "dispatch_function": self.dispatch_function}

    @classmethod
    def from_json(cls, data: dict, root: Path) -> "Built":
        path = lambda p: root / p if p else None  # noqa: E731
        return cls(Result.from_json(data["result"]), path(data["vmfb"]), data["out_type"], path(data["spec"]),
                   data["spec_flag"], tuple(data["base_flags"]), path(data.get("dispatch_vmfb")),
                   data.get("dispatch_function"))


def _measure(b: Built, settings: RunSettings, reference: Optional[np.ndarray]) -> tuple[Result, Optional[np.ndarray]]:
    """Run once for the output, check it against the reference, then time it."""
    assert b.vmfb is not None
    out_path = b.vmfb.parent / "output.npy"
    run = run_once(b.vmfb, settings, out_path)
    if not run.ok:
        status = Status.RUN_TIMEOUT if run.timed_out else Status.RUN_FAILED
        return replace(b.result, status=status, error=run.first_error(), stderr=run.stderr[-4000:]), None
    output = np.load(out_path)
    err = 0.0 if reference is None else relative_error(output, reference)
    if err > tolerance(b.out_type):
        return replace(b.result, status=Status.WRONG_NUMERICS, relative_error=err,
                       error=f"relative error {err:.2e} against the baseline exceeds {tolerance(b.out_type):.0e}"), output
    timing, brun = benchmark(b.vmfb, settings, b.dispatch_benchmark)
    if timing is None:
        status = Status.RUN_TIMEOUT if brun.timed_out else Status.RUN_FAILED
        return replace(b.result, status=status, relative_error=err, error=brun.first_error(),
                       stderr=brun.stderr[-4000:]), output
    return replace(b.result, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                   spread_pct=timing.spread_pct, relative_error=err), output


def measure_all(built: list[Built], run_settings: RunSettings, settings: EvalSettings, store: ResultStore,
                progress: Optional[Progress] = None) -> list[Result]:
    """Measure one at a time, baseline first (every other output is checked against its), storing
    each result as it arrives; then confirm the fastest few. A failing baseline stops the run."""
    results: list[Result] = []
    reference: Optional[np.ndarray] = None
    measured_binaries: dict[str, int] = {}  # executable hash -> the candidate measured for it
    ordered = sorted(built, key=lambda b: (not b.result.is_baseline, b.result.candidate_id))
    for i, b in enumerate(ordered, 1):
        result = b.result
        twin = measured_binaries.get(result.binary_hash) if result.binary_hash else None
        if result.ok and twin is not None:
            # Same executable as one already measured: timing it again would only measure noise.
            result = replace(result, status=Status.DUPLICATE, error=f"same executable as candidate {twin}")
        elif result.ok:
            result, output = _measure(b, run_settings, reference)
            if result.binary_hash:
                measured_binaries[result.binary_hash] = result.candidate_id
            if b.result.is_baseline and output is not None:
                reference = output
        store.append(result)
        if b.result.is_baseline and not result.ok:
            raise ToolError(f"the baseline (the compiler's default) failed: {result.error}", result.command, result.stderr)
        results.append(result)
        if progress:
            progress("benchmark", i, len(ordered))
    runnable = {b.result.key: b for b in built if b.vmfb is not None}
    return confirm(results, runnable, run_settings, settings, store, progress)


def confirm(results: list[Result], runnable: dict[str, Built], run_settings: RunSettings, settings: EvalSettings,
            store: ResultStore, progress: Optional[Progress] = None) -> list[Result]:
    """Time the baseline and the `confirm_top` fastest again, round-robin, and pool the times."""
    ok = sorted((r for r in results if r.ok and r.median_ms is not None and r.key in runnable), key=lambda r: r.median_ms)
    chosen = [r for r in ok if r.is_baseline] + [r for r in ok if not r.is_baseline][: settings.confirm_top]
    if len(chosen) < 2 or settings.confirm_rounds < 1:
        return results
    pooled = {r.key: list(r.times_ms) for r in chosen}
    total, done = settings.confirm_rounds * len(chosen), 0
    for round_ in range(settings.confirm_rounds):
        # Rotate the order each round so that no candidate always runs first or last.
        order = chosen[round_ % len(chosen):] + chosen[: round_ % len(chosen)]
        for r in order:
            b = runnable[r.key]
            timing, _ = benchmark(b.vmfb, run_settings, b.dispatch_benchmark)
            if timing is not None:
                pooled[r.key] += timing.times_ms
            done += 1
            if progress:
                progress("confirm", done, total)
    updated = {}
    for r in chosen:
        timing = Timing(tuple(pooled[r.key]))
        updated[r.key] = replace(r, times_ms=list(timing.times_ms), median_ms=timing.median_ms,
                                 spread_pct=timing.spread_pct)
        store.append(updated[r.key])
    return [updated.get(r.key, r) for r in results]
