"""Record a dispatch's valid space once, for replaying searches against it with no compiling or
timing (benchmarks/search_replay.py, tests/test_search.py).

    # every valid config, or a uniform sample of --sample where the space holds more (seeded;
    # never the preference order's head), each compiled, verified and timed against the
    # baseline: a median of --repetitions, the baseline timed again every 5 candidates
    python benchmarks/record_space.py record sample_dispatches/X.mlir --target llvm-cpu --output rec-X
    # on a GPU box: --compile-only here, `iree-tuner benchmark rec-X --confirm-rounds 0` there
    # then, where the compiler is, turn the run's results.json into a fixture:
    python benchmarks/record_space.py fixture rec-X tests/fixtures/spaces/X.json
    # the top points by first pass, timed again side by side with the baseline in interleaved
    # rounds: their paired figure replaces the first pass's (a noisy first pass makes a false
    # best); on a GPU, --compile-only here and `gpu_record.py DIR --confirm-top K` there, then
    # `confirm FIXTURE --from DIR`
    python benchmarks/record_space.py confirm tests/fixtures/spaces/X.json --top 10 --output conf-X

A point's figure is its first-pass speedup (the baseline timing nearest to it on the same
device over its own median): figures taken at different times are only compared through the
baseline timed beside each. A candidate that compiled to the same executable as another
(`duplicate`) gets that one's figure: it is the same program. A failure is a point with no
figure (searches must count it).
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _space(input_path: Path, target: str, pipeline_name: str | None, dispatch_name: str | None):
    """The dispatch, its pipeline and its whole valid space (tuner.search.live.build_space)."""
    from tuner.api import select_dispatch
    from tuner.driver import read_program
    from tuner.search.live import build_space
    from pipelines import pipeline_for

    path, target_, _, ctx, program = read_program(input_path, target, None)
    dispatch = select_dispatch(list(program.dispatches), dispatch_name, path, pipeline_name, program.skipped)
    pipeline = pipeline_for(dispatch, pipeline_name)
    space = build_space(dispatch, pipeline)
    if not space.complete:
        raise SystemExit(f"{dispatch.name}: the space is not enumerated whole ({space.size}); record needs it whole")
    return dispatch, pipeline, space


def record(args: argparse.Namespace) -> None:
    from tuner.api import benchmark_configs
    from tuner.core.settings import EvalSettings, Listeners, RunOptions

    dispatch, pipeline, space = _space(args.input, args.target, args.pipeline, args.dispatch)
    points = list(space.points)
    sample = points if len(points) <= args.sample else random.Random(args.seed).sample(points, args.sample)
    print(f"{dispatch.name}: {len(space)} valid configs, recording {len(sample)}", flush=True)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "space.json").write_text(json.dumps({
        "space_size": len(space), "sampled": len(sample), "seed": args.seed, "pipeline": pipeline.name,
        "input": str(args.input), "target": args.target, "dispatch": dispatch.name, "shape": dispatch.shape_name,
        "kind": dispatch.kind.value, "pipeline_name": args.pipeline, "dispatch_name": args.dispatch,
        "command": " ".join(sys.argv)}, indent=1))
    settings = EvalSettings(repetitions=args.repetitions, confirm_rounds=0, baseline_every=5,
                            compile_workers=args.jobs or EvalSettings().compile_workers)
    tuning = benchmark_configs(args.input, sample, args.target, args.output, args.dispatch, args.pipeline,
                               RunOptions(settings, args.strategy, compile_only=args.compile_only),
                               Listeners(_progress()))
    if tuning.manifest is not None:
        print(f"compiled into {args.output}; time it with: iree-tuner benchmark {args.output} --confirm-rounds 0")


def _progress():
    last = {}

    def on(phase: str, done: int, total: int) -> None:
        if done != last.get(phase) and (done % 25 == 0 or done == total):
            print(f"  {phase}: {done}/{total}", flush=True)
        last[phase] = done
    return on


def fixture(args: argparse.Namespace) -> None:
    """results.json (+ space.json) -> a fixture: the points, their figures, how they were taken,
    and each point's features and preference tiers (from the dispatch's space, rebuilt here)."""
    meta = json.loads((args.run / "space.json").read_text())
    if args.store is not None:  # a benchmark run cut off before it wrote results.json
        _results_from_store(args.store, args.run / "results.json")
    _, _, space = _space(Path(meta["input"]), meta["target"], meta.get("pipeline_name"), meta.get("dispatch_name"))
    results = json.loads((args.run / "results.json").read_text())
    candidates = [c for c in results["candidates"] if not c["is_baseline"]]
    by_hash = {c["binary_hash"]: c for c in candidates if c["status"] == "ok" and c["binary_hash"]}
    baseline = next(c for c in results["candidates"] if c["is_baseline"])
    # A point timed in a benchmark run that was cut off has a time but no first-pass figure (the
    # figure is made when the pass ends, from the baseline timings around it, which died with
    # the run): its figure is then against this run's baseline median, and counted.
    late = 0
    for c in candidates:
        if c["status"] == "ok" and not c.get("first_pass_speedup") and c.get("median_ms"):
            c["first_pass_speedup"] = baseline["median_ms"] / c["median_ms"]
            late += 1
    points = []
    for c in candidates:
        same = by_hash.get(c["binary_hash"]) if c["status"] == "duplicate" else c
        ok = same is not None and same["status"] == "ok" and same.get("first_pass_speedup")
        i = space.index(c["knobs"])
        if i is None:
            raise SystemExit(f"{c['knobs']} is not in the space as it is built today: record again")
        points.append({"knobs": c["knobs"], "status": c["status"],
                       "speedup": round(same["first_pass_speedup"], 4) if ok else None,
                       "median_ms": round(same["median_ms"], 5) if ok else None,
                       "compile_s": round(c.get("compile_s") or 0.0, 2), "benchmark_s": round(c.get("benchmark_s") or 0.0, 2),
                       "features": [round(float(v), 4) for v in space.features[i]],
                       "tiers": [bool(v) for v in space.tiers[i]]})
    out = {**meta, "device": results.get("devices", []), "device_id": baseline.get("device_id", ""),
           "recorded": datetime.date.today().isoformat(), "recorded_on": f"{platform.machine()}, {baseline.get('device_id', '')}",
           "repetitions": len(baseline.get("times_ms") or []) or None, "baseline_ms": baseline.get("median_ms"),
           "drifts": results.get("evaluation", {}).get("drifts", []), "against_run_baseline": late,
           "feature_names": list(space.feature_names), "preference_names": list(space.preference_names),
           "diversity": list(space.diversity), "points": points}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=None, separators=(",", ":")) + "\n")
    ok = [p for p in points if p["speedup"]]
    best = max(ok, key=lambda p: p["speedup"]) if ok else None
    print(f"{args.out}: {len(points)} points, {len(ok)} timed, best {best['speedup'] if best else '-'}x")


def confirm(args: argparse.Namespace) -> None:
    """Time the fixture's `top` points again in interleaved rounds with the baseline (or read such
    a run from --from), and keep their paired figures in the fixture."""
    from tuner.api import benchmark_configs
    from tuner.core.settings import EvalSettings, Listeners, RunOptions

    data = json.loads(args.fixture.read_text())
    points = data["points"]
    top = sorted((p for p in points if p.get("speedup")), key=lambda p: -(p.get("first_pass") or p["speedup"]))[:args.top]
    if args.source is None:
        settings = EvalSettings(confirm_top=len(top), confirm_rounds=args.rounds, repetitions=args.repetitions)
        tuning = benchmark_configs(Path(data["input"]), [p["knobs"] for p in top], data["target"], args.output,
                                   data.get("dispatch_name"), data.get("pipeline_name"),
                                   RunOptions(settings, force=True, compile_only=args.compile_only),
                                   Listeners(_progress()))
        if tuning.manifest is not None:
            print(f"compiled into {args.output}; on the device: python3 benchmarks/gpu_record.py {args.output} "
                  f"--confirm-top {len(top)}; then: record_space.py confirm {args.fixture} --from {args.output}")
            return
        source = args.output
    else:
        source = args.source
    results = json.loads((source / "results.json").read_text())
    by_knobs = {json.dumps(c["knobs"], sort_keys=True): c for c in results["candidates"] if c.get("speedup")}
    changed = 0
    for p in top:
        c = by_knobs.get(json.dumps(p["knobs"], sort_keys=True))
        if c is None:
            continue
        p.setdefault("first_pass", p["speedup"])
        p["speedup"] = round(c["speedup"], 4)
        p["confirmed_rounds"] = len(c["round_ratios"])
        changed += 1
    data["confirmed"] = {"top": len(top), "confirmed": changed, "rounds": args.rounds,
                         "command": " ".join(sys.argv)}
    args.fixture.write_text(json.dumps(data, indent=None, separators=(",", ":")) + "\n")
    for p in sorted(top, key=lambda p: -p["speedup"]):
        print(f"  first pass {p.get('first_pass')}x -> paired {p['speedup']}x  {p['knobs']}")
    print(f"{args.fixture}: {changed} of the top {len(top)} confirmed")


def _results_from_store(store: Path, out: Path) -> None:
    """A results.json holding every result a store has (the newest per candidate), for a run that
    was cut off before it wrote one: its points have times but no first-pass figures."""
    import sqlite3

    db = sqlite3.connect(store)
    latest: dict[str, dict] = {}
    for key, blob in db.execute("SELECT key, result FROM results ORDER BY written_at"):
        latest[key] = json.loads(blob)
    candidates = sorted(latest.values(), key=lambda c: c["candidate_id"])
    if not any(c["is_baseline"] for c in candidates):
        raise SystemExit(f"{store}: no baseline timing in it")
    out.write_text(json.dumps({"candidates": candidates, "devices": sorted({c["device"] for c in candidates}),
                               "from_store": str(store)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="compile and time every config (or a uniform sample) of a dispatch")
    r.add_argument("input", type=Path)
    r.add_argument("--target", default="llvm-cpu")
    r.add_argument("--pipeline", default=None)
    r.add_argument("--dispatch", default=None)
    r.add_argument("--sample", type=int, default=300, help="Configs to record where the space holds more.")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--repetitions", type=int, default=5)
    r.add_argument("--strategy", default="auto")
    r.add_argument("--jobs", type=int, default=0, help="Compile workers (default: one per core).")
    r.add_argument("--compile-only", action="store_true")
    r.add_argument("--output", type=Path, required=True)
    f = sub.add_parser("fixture", help="turn a recorded run's results.json into a fixture")
    f.add_argument("run", type=Path)
    f.add_argument("out", type=Path)
    f.add_argument("--store", type=Path, default=None,
                   help="Build the run's results.json from this result store first (a run cut off before writing it).")
    c = sub.add_parser("confirm", help="time a fixture's top points again, paired with the baseline")
    c.add_argument("fixture", type=Path)
    c.add_argument("--top", type=int, default=10)
    c.add_argument("--rounds", type=int, default=4)
    c.add_argument("--repetitions", type=int, default=5)
    c.add_argument("--output", type=Path, default=Path("confirm-run"))
    c.add_argument("--compile-only", action="store_true")
    c.add_argument("--from", dest="source", type=Path, default=None, help="a run that confirmed them already")
    args = parser.parse_args()
    {"record": record, "fixture": fixture, "confirm": confirm}[args.command](args)


if __name__ == "__main__":
    main()
