"""Sequential against overlapped evaluation of the same CPU candidates, side by side in one run.

    python benchmarks/evaluators.py [--candidates 32] [--rounds 2] [--out bench-evaluators]

Enumerates the candidates of one sample once, then evaluates that same batch with each strategy
(rounds alternate the order, each evaluation with a fresh result store, so nothing is reused),
and prints a Markdown table: wall time of the first pass, of the confirmation round, summed
compile time, the share of the first pass the benchmark device sat idle, the winner and its
speedup, and the median spread of the candidates' timings (on a CPU, compiles running beside the
timing add noise: the spread shows how much).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from iree.compiler import ir  # noqa: E402

from pipelines import pipeline_for  # noqa: E402
from tuner.specs.candidates import generate_candidates  # noqa: E402
from tuner.discovery.program import discover_program  # noqa: E402
from tuner.strategies import STRATEGIES  # noqa: E402
from tuner.ranking import rank  # noqa: E402
from tuner.core.settings import EvalSettings  # noqa: E402
from tuner.store import ResultStore  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.versions import compiler_version, runtime_version  # noqa: E402

SAMPLE = Path(__file__).resolve().parent.parent / "sample_dispatches" / "matmul_1024x1024x1024_f32.mlir"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", type=Path, default=SAMPLE)
    parser.add_argument("--candidates", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("bench-evaluators"))
    args = parser.parse_args()

    ctx = ir.Context()
    target = parse_target("llvm-cpu")
    program = discover_program(args.input, target, ctx)
    dispatch = program.dispatches[0]
    candidates = generate_candidates(dispatch, pipeline_for(dispatch), args.candidates, ctx)
    workload = program.workload(dispatch, args.input)
    settings = EvalSettings()
    print(f"{dispatch.name}: {len(candidates)} candidates (baseline included), "
          f"{settings.compile_workers} compile workers, {settings.repetitions} repetitions", flush=True)

    rows = []
    for round_ in range(args.rounds):
        order = list(STRATEGIES) if round_ % 2 == 0 else list(reversed(STRATEGIES))
        for name in order:
            root = args.out / f"{name}-{round_}"
            shutil.rmtree(root, ignore_errors=True)
            store = ResultStore(root / "results.sqlite", compiler_version(), runtime_version())
            evaluator = STRATEGIES[name](args.input, target, workload, root / "candidates", store, settings, ctx=ctx)
            evaluation = evaluator.evaluate(candidates)
            store.close()
            ranking = rank(evaluation.results)
            stats = evaluation.stats
            spreads = [r.spread_pct for r in evaluation.results if r.spread_pct is not None]
            row = (name, round_, stats.wall_s, stats.confirm_s, stats.compile_s, stats.idle_share,
                   ranking.best.candidate_id if ranking.best else None,
                   ranking.speedup(ranking.best) if ranking.best else None,
                   statistics.median(spreads) if spreads else float("nan"),
                   sum(r.ok for r in evaluation.results), len(evaluation.results))
            rows.append(row)
            print(f"{name} (round {round_}): first pass {stats.wall_s:.1f} s, confirm {stats.confirm_s:.1f} s, "
                  f"device idle {100 * stats.idle_share:.0f}%", flush=True)

    print()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores; IREE {compiler_version()}; "
          f"input {args.input.name}, {len(candidates)} candidates.")
    print()
    print("| strategy | round | first pass s | confirm s | compile s (summed) | device idle | winner | speedup "
          "| median spread % | ok |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, round_, wall, confirm_s, compile_s, idle, best, speedup, spread, ok, total in rows:
        print(f"| {name} | {round_} | {wall:.1f} | {confirm_s:.1f} | {compile_s:.1f} | {100 * idle:.0f}% | {best} "
              f"| {speedup:.2f}x | {spread:.1f} | {ok}/{total} |")
    for round_ in range(args.rounds):
        walls = {r[0]: r[2] for r in rows if r[1] == round_}
        print(f"round {round_}: overlapped / sequential wall time = {walls['overlapped'] / walls['sequential']:.2f}")


if __name__ == "__main__":
    main()
