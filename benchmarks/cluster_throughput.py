"""Throughput of `--strategy ray` on a local Ray cluster with 1 and 2 compile workers, beside this
machine's own evaluators, on the same candidates: candidates per minute over the first pass
(compile + numerics + timing; no confirmation rounds), each configuration on a fresh store.

    python benchmarks/cluster_throughput.py [INPUT] [--budget 16] [--workers 1,2] [--out DIR]

Each cluster run starts its own local cluster (`iree_compile` = the worker count) and stops it.
On a CPU target the cluster's benchmark worker is pinned to half the cores and the compiles to the
rest, so on a 2-core machine both compile workers share one core: say so beside the figure."""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner import api  # noqa: E402
from tuner.evaluation.device_identity import cpu_identity  # noqa: E402
from tuner.core.settings import EvalSettings, RunOptions, SearchSettings  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "sample_dispatches" / "matmul_1024x1024x1024_f32.mlir"


def run(input_path: Path, out: Path, strategy: str, workers: int, budget: int) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    settings = EvalSettings(repetitions=3, confirm_rounds=0, compile_workers=workers)
    start = time.perf_counter()
    tuning = api.tune(input_path, "llvm-cpu", out, search=replace(SearchSettings(), budget=budget, name="random"), run=RunOptions(settings, strategy=strategy))
    wall = time.perf_counter() - start
    if strategy == "ray":
        from tuner.cluster.connect import shutdown

        shutdown()  # the next configuration starts a cluster of its own
    stats = tuning.stats
    done = stats.candidates
    return {"strategy": strategy, "workers": workers, "candidates": done, "first_pass_s": stats.wall_s,
            "per_min": 60.0 * done / stats.wall_s, "whole_s": wall,
            "failed": sum(not r.ok for r in tuning.results)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", nargs="?", type=Path, default=SAMPLE)
    parser.add_argument("--budget", type=int, default=16)
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--out", type=Path, default=Path("bench-cluster"))
    args = parser.parse_args()
    rows = []
    for strategy, workers in [("sequential", 1), ("overlapped", 2),
                              *(("ray", int(w)) for w in args.workers.split(","))]:
        row = run(args.input, args.out / f"{strategy}-{workers}", strategy, workers, args.budget)
        rows.append(row)
        print(row, flush=True)
    print(f"\n{args.input.name}, {args.budget} random configs + the baseline; {cpu_identity()}; "
          f"{platform.machine()}, Python {platform.python_version()}, {os.cpu_count()} CPUs\n")
    print("| evaluator | compile workers | candidates | first pass s | candidates / min | failed |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['strategy']} | {r['workers']} | {r['candidates']} | {r['first_pass_s']:.1f} | "
              f"{r['per_min']:.1f} | {r['failed']} |")


if __name__ == "__main__":
    main()
