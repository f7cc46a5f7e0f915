"""Replays each search against the recorded spaces (tests/fixtures/spaces/*.json, written by
benchmarks/record_space.py) many times with different seeds: no compiling, no timing. For each
search and space: evaluations needed to come within 3% (and 1%) of the best recorded point, the
median and the worst over seeds, and as a share of the space.

    python benchmarks/search_replay.py [--seeds 20] [--batch-size 8] [FIXTURE ...]
    python benchmarks/search_replay.py --budget 30 [FIXTURE ...]   # the best found within 30

`model-warm` is the model search started from the other recordings of the same pipeline on the
same device (learning across runs: as live, where the store holds other dispatches' results).


A run that never gets there within the whole space counts as the space's size (it cannot happen
for exhaustive searches; a model search stops only when the space is spent)."""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.search import Budget, evaluations_to_reach  # noqa: E402
from tuner.search.replay import load_recording, prior_for, replay  # noqa: E402

WARM = "model-warm"
SEARCHES = ("random", "preference", "model", WARM)


def run(recording, search: str, seed: int, budget, batch_size: int, others, stop_at=None):
    """`model-warm`: the model search started from the other recordings of its pipeline and
    device (learning across runs); any other name, the search as it is."""
    prior = prior_for(recording, others) if search == WARM else None
    return replay(recording, "model" if search == WARM else search, seed, budget, batch_size, stop_at=stop_at,
                  prior=prior)


def needed(recording, search: str, seed: int, batch_size: int, within: tuple[float, ...], others) -> list[int]:
    steps = run(recording, search, seed, Budget(len(recording.space)), batch_size, others,
                stop_at=recording.best * (1 - min(within)))
    n = len(recording.space)
    return [evaluations_to_reach(steps, recording.best * (1 - w)) or n for w in within]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("fixtures", nargs="*", type=Path)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--searches", default=",".join(SEARCHES))
    parser.add_argument("--budget", type=int, default=None,
                        help="Instead: the best figure each search finds within this many evaluations.")
    args = parser.parse_args()
    fixtures = args.fixtures or sorted((REPO / "tests" / "fixtures" / "spaces").glob("*.json"))
    # Every recording is a possible prior for the others (model-warm), whichever are replayed.
    args.others = [load_recording(p) for p in sorted((REPO / "tests" / "fixtures" / "spaces").glob("*.json"))]
    if args.budget:
        return within_budget(fixtures, args)
    within = (0.03, 0.01)
    print("| space (target) | points | best | search | to 3%: median | worst | median share | to 1%: median | worst |")
    print("|---|---|---|---|---|---|---|---|---|")
    for path in fixtures:
        rec = load_recording(path)
        n = len(rec.space)
        for search in args.searches.split(","):
            seeds = [0] if search == "preference" else range(args.seeds)  # preference ignores the seed
            runs = [needed(rec, search, s, args.batch_size, within, args.others) for s in seeds]
            to3 = [r[0] for r in runs]
            to1 = [r[1] for r in runs]
            size = f"{n}" + ("" if rec.space.complete else f" of {rec.space.size}")
            print(f"| {rec.name} | {size} | {rec.best:.2f}x | {search} | {statistics.median(to3):g} | {max(to3)} | "
                  f"{100 * statistics.median(to3) / n:.0f}% | {statistics.median(to1):g} | {max(to1)} |", flush=True)


def within_budget(fixtures: list[Path], args: argparse.Namespace) -> None:
    """Per search and space: the best recorded figure found within the budget, median and worst
    over seeds, beside the best of the whole recording."""
    print(f"| space (target) | points | recorded best | search | best within {args.budget}: median | worst "
          f"| median as share of the best |")
    print("|---|---|---|---|---|---|---|")
    for path in fixtures:
        rec = load_recording(path)
        for search in args.searches.split(","):
            seeds = [0] if search == "preference" else range(args.seeds)
            found = [max((s.score or 0.0) for s in run(rec, search, seed, Budget(args.budget), args.batch_size,
                                                       args.others)) for seed in seeds]
            med = statistics.median(found)
            size = f"{len(rec.space)}" + ("" if rec.space.complete else f" of {rec.space.size}")
            print(f"| {rec.name} | {size} | {rec.best:.2f}x | {search} | {med:.2f}x | {min(found):.2f}x "
                  f"| {100 * med / rec.best:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
