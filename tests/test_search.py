"""Searches over the valid space: budgets, validity, seeds, learning, replay of recorded spaces."""

import json
import math
import statistics
from pathlib import Path

import pytest

from constraints import IntKnob, Problem, tiling
from constraints.fast_enumerate import compile_check, enumerate_space
from tuner.search import SEARCHES, Budget, Outcome, SearchSpace, Seed, evaluations_to_reach, knob_features, make_search, run_search
from tuner.search.heuristics import SeedContext, collect_seeds, read_seed_file
from tuner.search.replay import load_recording, replay

FIXTURES = Path(__file__).parent / "fixtures" / "spaces"


def _problem() -> Problem:
    """Tiles of a 512x512 problem: a workgroup tile, a register tile dividing it, a K step."""
    p = Problem()
    wm = p.add_knob(IntKnob.of("wg_m", tiling.powers_of_two(16, 256)))
    wn = p.add_knob(IntKnob.of("wg_n", tiling.powers_of_two(16, 256)))
    vm = p.add_knob(IntKnob.of("vec_m", tiling.powers_of_two(1, 16)))
    vn = p.add_knob(IntKnob.of("vec_n", tiling.powers_of_two(1, 16)))
    p.add_knob(IntKnob.of("k", [1, 2, 4, 8]))
    p.require(wm.var % vm.var == 0, wn.var % vn.var == 0, tiling.within(vm.var * vn.var, 128),
              tiling.within(wm.var * wn.var, 65536))
    p.prefer("square_register_tile", vm.var == vn.var)
    p.prefer("big_workgroup", wm.var * wn.var >= 4096)
    p.diversify("vec_m", "vec_n")
    return p


def _space(problem: Problem) -> SearchSpace:
    order = [k.name for k in problem.knobs]
    names = {n: f"v[{i}]" for i, n in enumerate(order)}
    prefs = []
    for pref in problem.preferences:
        check = compile_check(pref.condition, names)
        prefs.append((pref.name, lambda knobs, check=check: check([knobs[n] for n in order])))
    return SearchSpace.of(list(enumerate_space(problem)), knob_features, prefs, problem.diversity)


def _score(knobs) -> float:
    """A made-up speedup with one peak (wg 128x64, vec 8x16, k 4) and smooth slopes around it."""
    d = (abs(math.log2(knobs["wg_m"] / 128)) + abs(math.log2(knobs["wg_n"] / 64))
         + abs(math.log2(knobs["vec_m"] / 8)) + abs(math.log2(knobs["vec_n"] / 16)) + abs(math.log2(knobs["k"] / 4)))
    return 2.0 * 0.8 ** d


def _scores(space: SearchSpace):
    return lambda batch: [Outcome(_score(space.points[p.index])) for p in batch]


@pytest.mark.parametrize("name", sorted(SEARCHES))
def test_each_search_keeps_to_its_budget_and_proposes_only_valid_distinct_configs(name):
    problem = _problem()
    space = _space(problem)
    search = make_search(name, space, seed=3)
    steps = run_search(search, _scores(space), Budget(37), batch_size=8)
    assert len(steps) == 37  # the last batch is cut to the budget, not run whole
    indices = [s.index for s in steps]
    assert len(set(indices)) == len(indices)
    for i in indices[:12]:  # a sample, each checked by Z3 itself
        assert problem.admits(space.points[i])


def test_a_search_stops_when_the_space_is_spent():
    space = _space(_problem())
    steps = run_search(make_search("random", space, seed=1), _scores(space), Budget(10 ** 6), batch_size=64)
    assert sorted(s.index for s in steps) == list(range(len(space)))


def test_the_time_budget_stops_between_batches():
    space = _space(_problem())
    now = [0.0]

    def slow(batch):
        now[0] += 10.0  # each batch takes 10 s on the clock
        return _scores(space)(batch)

    steps = run_search(make_search("random", space), slow, Budget(1000, seconds=25.0), batch_size=4,
                       clock=lambda: now[0])
    assert len(steps) == 12  # batches started at 0, 10 and 20 s; none at 30 s


def test_failed_and_duplicate_points_count_against_the_budget():
    space = _space(_problem())
    calls = []

    def failing(batch):
        calls.extend(batch)
        return [Outcome(None, "compile_failed") for _ in batch]

    steps = run_search(make_search("model", space), failing, Budget(20), batch_size=8)
    assert len(steps) == len(calls) == 20
    assert all(s.score is None for s in steps)


def test_random_search_is_reproducible_by_its_seed_and_differs_across_seeds():
    space = _space(_problem())
    first = [p.index for p in make_search("random", space, seed=5).propose(10)]
    again = [p.index for p in make_search("random", space, seed=5).propose(10)]
    other = [p.index for p in make_search("random", space, seed=6).propose(10)]
    assert first == again != other


def test_preference_search_takes_the_tiers_in_order():
    space = _space(_problem())
    order = [p.index for p in make_search("preference", space).propose(len(space))]
    tiers = [tuple(not t for t in space.tiers[i]) for i in order]
    assert tiers == sorted(tiers)  # every point meeting both preferences first, and so on
    first = space.points[order[0]]
    assert first["vec_m"] == first["vec_n"] and first["wg_m"] * first["wg_n"] >= 4096
    # Within the first tier the register tiles vary before any repeats.
    head = [(space.points[i]["vec_m"], space.points[i]["vec_n"]) for i in order[:4]]
    assert len(set(head)) == 4


def test_seeds_go_first_and_invalid_seeds_are_dropped():
    space = _space(_problem())
    valid = {"wg_m": 64, "wg_n": 64, "vec_m": 4, "vec_n": 4, "k": 2}
    invalid = {"wg_m": 8, "wg_n": 8, "vec_m": 16, "vec_n": 16, "k": 1}  # register tile larger than the workgroup
    search = make_search("model", space, seeds=[Seed(valid, "user:a"), Seed(invalid, "user:b")])
    batch = search.propose(4)
    assert space.points[batch[0].index] == valid and batch[0].source == "user:a"
    assert all(p.source == "model" for p in batch[1:])
    assert [s.source for s in search.dropped_seeds] == ["user:b"]


def test_json_seed_entries_match_their_pipeline_and_shape(tmp_path):
    space = _space(_problem())
    knobs = {"wg_m": 64, "wg_n": 64, "vec_m": 4, "vec_n": 4, "k": 2}
    path = tmp_path / "seeds.json"
    path.write_text(json.dumps([
        {"name": "fits", "pipeline": "p", "backend": "llvm-cpu", "knobs": knobs, "found_on": "m8_n8_k8"},
        {"name": "other_pipeline", "pipeline": "q", "backend": "llvm-cpu", "knobs": knobs},
        {"name": "other_shape", "pipeline": "p", "backend": "llvm-cpu", "shape": "m1_n1_k1", "knobs": knobs}]))
    entries = read_seed_file(path)
    ctx = SeedContext("p", "llvm-cpu", "x86_64", "contraction", "m512_n512_k512", space)
    seeds = collect_seeds(ctx, extra=entries, builtin_file=False)
    assert seeds[0] == Seed(knobs, "fits")
    assert {s.source for s in seeds} == {"fits", "preference_head"}
    # A replay of the shape an entry was found on leaves the entry out.
    assert all(s.source != "fits" for s in collect_seeds(ctx, extra=entries, exclude_found_on="m8_n8_k8",
                                                         builtin_file=False))


def test_a_seed_file_that_is_not_a_list_of_entries_is_one_clear_error(tmp_path):
    from tuner.errors import InputError

    path = tmp_path / "seeds.json"
    path.write_text(json.dumps([{"name": "x", "pipeline": "p", "knobs": {}}]))
    with pytest.raises(InputError, match="entry 0 needs name, pipeline, backend"):
        read_seed_file(path)


def test_the_model_search_learns_a_peak_faster_than_random():
    space = _space(_problem())
    best = max(_score(p) for p in space.points)
    needed = {}
    for name in ("model", "random"):
        runs = []
        for seed in range(5):
            steps = run_search(make_search(name, space, seed=seed), _scores(space), Budget(len(space)), batch_size=8,
                               stop_at=best * 0.97)
            runs.append(evaluations_to_reach(steps, best * 0.97))
        needed[name] = statistics.median(runs)
    assert needed["model"] <= 0.1 * len(space)
    assert needed["model"] * 3 <= needed["random"]


def _small_fixture(tmp_path: Path) -> Path:
    """A recorded space as benchmarks/record_space.py writes one, from the made-up scores."""
    space = _space(_problem())
    points = []
    for i, knobs in enumerate(space.points):
        failed = knobs["k"] == 8 and knobs["vec_m"] == 16  # some points fail to compile
        points.append({"knobs": knobs, "status": "compile_failed" if failed else "ok",
                       "speedup": None if failed else round(_score(knobs), 4), "features": list(space.features[i]),
                       "tiers": [bool(t) for t in space.tiers[i]]})
    path = tmp_path / "space.json"
    path.write_text(json.dumps({"shape": "m512_n512_k512", "target": "llvm-cpu", "pipeline": "p",
                                "space_size": len(points), "feature_names": list(space.feature_names),
                                "preference_names": list(space.preference_names), "diversity": list(space.diversity),
                                "points": points}))
    return path


def test_replay_of_a_recorded_space_finds_its_known_best_and_evaluates_no_point_twice(tmp_path):
    recording = load_recording(_small_fixture(tmp_path))
    assert recording.best == pytest.approx(2.0)
    for name in SEARCHES:
        # A budget of the whole space: a search that proposed a point twice would run out of it
        # before it met the best, or show the repeat among its steps.
        steps = replay(recording, name, seed=0, budget=Budget(len(recording.space)), stop_at=recording.best)
        reached = evaluations_to_reach(steps, recording.best)
        assert reached is not None and len(steps) - reached < 8, name  # it stopped with the batch that met it
        assert len({s.index for s in steps}) == len(steps), name
    # The model search gets there well before the end of the space.
    steps = replay(recording, "model", seed=0, budget=Budget(len(recording.space)), stop_at=recording.best)
    assert evaluations_to_reach(steps, recording.best) <= len(recording.space) // 4


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_each_recorded_fixture_replays_every_point_once_with_its_recorded_score(fixture):
    # Checked against the fixture's JSON as written, point by point (by knobs, not by position).
    raw = json.loads(fixture.read_text())
    recorded = {json.dumps(p["knobs"], sort_keys=True): (p["speedup"], p["status"]) for p in raw["points"]}
    assert len(recorded) >= 90 and raw.get("command")
    recording = load_recording(fixture)
    steps = replay(recording, "exhaustive", seed=0, budget=Budget(len(recording.space)))
    assert sorted(s.index for s in steps) == list(range(len(raw["points"])))  # each point once
    for step in steps:
        knobs = json.dumps(recording.space.points[step.index], sort_keys=True)
        assert (step.score, step.status) == recorded[knobs]


def test_seed_entries_for_another_pipeline_or_target_are_said_not_dropped_silently(tmp_path):
    import io

    from rich.console import Console

    from pipelines import pipeline_for
    from tests.conftest import synthetic_cpu_dispatch
    from tuner.cli.say import say_search
    from tuner.search.live import plan_search
    from tuner.core.settings import SearchSettings

    d = synthetic_cpu_dispatch(256, 256, 256)
    pipeline = pipeline_for(d)
    path = tmp_path / "seeds.json"
    path.write_text(json.dumps([
        {"name": "gpu_one", "pipeline": "llvmgpu_tile_and_fuse", "backend": "cuda", "knobs": {"x": 1}},
        {"name": "rocm_one", "pipeline": pipeline.name, "backend": "rocm", "knobs": {"x": 1}}]))
    plan = plan_search(d, pipeline, SearchSettings(name="preference", budget=4, seeds_file=path))
    summary = plan.summary()
    assert summary["ignored_seeds"] == ["user:gpu_one (for llvmgpu_tile_and_fuse on cuda)",
                                        f"user:rocm_one (for {pipeline.name} on rocm)"]
    out = io.StringIO()
    say_search(Console(file=out, width=400))(summary)
    assert "2 --seeds entries are for another pipeline, target, kind or shape and were not used" in out.getvalue()
