"""Live, on a shape the tuner was not fitted to: `tune --search model` and `tune --search
preference` with the same budget, then their winners and the best point of the shape's recorded
space (benchmarks/record_space.py: the exhaustive best of a uniform sample) timed side by side
against the default in one interleaved run (`benchmark --configs`, all three confirmed in the
same rounds), so the three figures are taken under the same conditions.

    python benchmarks/search_live.py INPUT.mlir FIXTURE.json [--budget 30] [--rounds 6] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def winner(directory: Path) -> tuple[dict | None, dict]:
    """The knobs of a tuning's winner (None: it kept the default) and its results.json."""
    data = json.loads((directory / "results.json").read_text())
    best = next((c for c in data["candidates"] if c["candidate_id"] == data["best"]), None)
    return (best["knobs"] if best else None), data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", type=Path)
    parser.add_argument("fixture", type=Path)
    parser.add_argument("--budget", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", default="llvm-cpu")
    parser.add_argument("--out", type=Path, default=Path("search-live"))
    args = parser.parse_args()
    from tuner import api
    from tuner.search.replay import load_recording
    from tuner.core.settings import EvalSettings, RunOptions, SearchSettings

    recording = load_recording(args.fixture)
    best_i = max(range(len(recording.space)), key=lambda i: recording.scores[i] or 0.0)
    entries = {"recorded best": recording.space.points[best_i]}
    spent = {}
    for name in ("model", "preference"):
        t0 = time.perf_counter()
        api.tune(args.input, args.target, args.out / name, search=SearchSettings(name=name, budget=args.budget, seed=args.seed), run=RunOptions(EvalSettings(), force=True))
        spent[name] = time.perf_counter() - t0
        knobs, _ = winner(args.out / name)
        entries[f"{name} winner"] = knobs
        print(f"{name}: winner {knobs} in {spent[name]:.0f} s", flush=True)
    distinct = []
    for knobs in entries.values():
        if knobs is not None and knobs not in distinct:
            distinct.append(knobs)
    tuning = api.benchmark_configs(args.input, distinct, args.target, args.out / "side-by-side",
                                   run=RunOptions(EvalSettings(confirm_top=len(distinct), confirm_rounds=args.rounds),
                                                  force=True))
    by_knobs = {json.dumps(r.knobs, sort_keys=True): r for r in tuning.results if not r.is_baseline}
    print(f"\n{args.input.name}, {args.target}, budget {args.budget}, seed {args.seed}; "
          f"recorded space: {len(recording.space)} of {recording.space.size} configs, best recorded "
          f"{recording.best:.2f}x (as recorded)\n")
    print("| config | paired speedup vs default (median of rounds) | rounds faster | knobs |")
    print("|---|---|---|---|")
    for label, knobs in entries.items():
        if knobs is None:
            print(f"| {label} | 1.00x (kept the default) | - | - |")
            continue
        r = by_knobs.get(json.dumps(knobs, sort_keys=True))
        if r is None or r.speedup is None:
            print(f"| {label} | not confirmed ({r.status.value if r else 'missing'}) | - | {knobs} |")
            continue
        print(f"| {label} | {r.speedup:.2f}x | {sum(x > 1 for x in r.round_ratios)}/{len(r.round_ratios)} | {knobs} |")


if __name__ == "__main__":
    main()
