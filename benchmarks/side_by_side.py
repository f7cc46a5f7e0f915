"""Modules timed side by side: interleaved rounds, the order alternating each round, so that a
drift or a load that comes and goes falls on all of them alike (the benchmark scripts' check)."""

from __future__ import annotations

from pathlib import Path

from tuner.evaluation.runner import RunSettings, benchmark


def interleaved(modules: dict[str, Path], settings: RunSettings, rounds: int) -> dict[str, list[float]]:
    """Each module's median time (ms) in each of `rounds` rounds; round r runs them in the given
    order when r is even, reversed when odd."""
    names = list(modules)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            timing, run = benchmark(modules[name], settings)
            if timing is None:
                raise SystemExit(f"iree-benchmark-module failed on {modules[name]}: {run.stderr}")
            times[name].append(timing.median_ms)
    return times
