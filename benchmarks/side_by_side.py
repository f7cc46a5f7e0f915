"""Modules timed side by side: interleaved rounds, the order alternating each round, so that a
drift or a load that comes and goes falls on all of them alike (the benchmark scripts' check)."""

from __future__ import annotations

from pathlib import Path

from typing import Optional

from tuner.evaluation.runtime_tools import DispatchBenchmark, ModuleRun, benchmark


def interleaved(modules: dict[str, Path], settings: ModuleRun, rounds: int,
                dispatch_function: Optional[str] = None) -> dict[str, list[float]]:
    """Each module's median time (ms) in each of `rounds` rounds; round r runs them in the given
    order when r is even, reversed when odd. `dispatch_function`: the modules are IREE dispatch
    benchmarks, timed per dispatch by that function."""
    names = list(modules)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            alone = DispatchBenchmark(modules[name], dispatch_function) if dispatch_function else None
            timing, run = benchmark(modules[name], settings, alone)
            if timing is None:
                raise SystemExit(f"iree-benchmark-module failed on {modules[name]}: {run.stderr}")
            times[name].append(timing.median_ms)
    return times


def default_and_choice(program: Path, out: Path, target: str = "llvm-cpu") -> dict[str, Path]:
    """The default (the target's flags alone) and the tuner's choice (`@out/best_flags.txt`),
    each built by plain iree-compile into `out`: what a user would rebuild."""
    from tuner.targets import parse_target
    from tuner.tools import find_tool, run_tool

    modules = {}
    for name, flags in (("default", list(parse_target(target).compile_flags)),
                        ("choice", [f"@{out / 'best_flags.txt'}"])):
        modules[name] = out / f"independent-{name}.vmfb"
        built = run_tool([find_tool("iree-compile"), str(program), *flags, "-o", str(modules[name])], 600)
        if not built.ok:
            raise SystemExit(f"plain iree-compile of the {name} failed: {built.stderr}")
    return modules


def claimed(results: dict) -> float:
    """The speedup a tuning's results.json claims for what it wrote: the winner's, or 1.0 (it
    kept the default)."""
    if results["best"] is None:
        return 1.0
    return next(c for c in results["candidates"] if c["candidate_id"] == results["best"])["speedup"]


def claimed_interval(results: dict) -> tuple[float, float] | None:
    """The interval the tuning claims for the winner's speedup (None where it kept the default or
    gave none)."""
    if results["best"] is None:
        return None
    interval = next(c for c in results["candidates"] if c["candidate_id"] == results["best"]).get("speedup_interval")
    return (interval["low"], interval["high"]) if interval else None
