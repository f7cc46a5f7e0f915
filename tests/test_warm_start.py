"""Learning across runs (`--warm-start`): what the store keeps of each measured config for later
searches, which of its measurements a search of another dispatch may learn from, and that a
model search does learn from them."""

import json
import math
import sqlite3
import statistics

import pytest

from conftest import run_cli, write_matmul
from test_search import _problem, _score, _scores, _space

from tuner.core.results import Result, Status
from tuner.search import Budget, evaluations_to_reach, make_search, run_search
from tuner.search.prior import MIN_PRIOR_POINTS, Prior, PriorPoint, prior_of_spaces
from tuner.store import SCHEMA_VERSION, ResultStore

H100 = ("cuda: NVIDIA H100 80GB HBM3", "cuda: dispatch alone, 50 per batch")


def _ok(key: str, dispatch: str, speedup: float, device=H100) -> Result:
    return Result(candidate_id=1, key=key, label=key, is_baseline=False, knobs={}, flags=[], status=Status.OK,
                  times_ms=[1.0], median_ms=1.0, first_pass_speedup=speedup, dispatch=dispatch,
                  device_id=device[0], timing=device[1])


@pytest.mark.parametrize("version,dropped", [(2, ("features", "confirmations")), (3, ("confirmations",))])
def test_a_store_of_a_previous_schema_gains_the_newer_tables_and_keeps_its_results(tmp_path, version, dropped):
    path = tmp_path / "r.sqlite"
    with ResultStore(path, "c", "r") as store:
        store.put(_ok("k1", "a", 1.5))
    with sqlite3.connect(path) as db:  # as that version left it
        for table in dropped:
            db.execute(f"DROP TABLE {table}")
        db.execute(f"PRAGMA user_version={version}")
    with ResultStore(path, "c", "r") as store:
        assert store.get("k1", *H100).first_pass_speedup == 1.5
        store.put_features("k1", "p", "a", {"x": 1.0}, {"pref": True})
        assert store.confirmation("b", ["k1"], 4, *H100) is None
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION  # upgraded to the current one


def test_a_search_learns_only_from_other_dispatches_of_its_pipeline_timed_the_same_way(tmp_path):
    with ResultStore(tmp_path / "r.sqlite", "c", "r") as store:
        rows = [("k1", "other", 1.5, "p", H100), ("k2", "this", 1.2, "p", H100),  # this dispatch: its own search's
                ("k3", "other", 1.1, "q", H100),  # another pipeline
                ("k4", "other", 1.3, "p", ("cuda: NVIDIA A100", H100[1])),  # another GPU
                ("k5", "other", 0.9, "p", (H100[0], "cuda: entry function"))]  # timed another way
        for key, dispatch, speedup, pipeline, device in rows:
            store.put(_ok(key, dispatch, speedup, device))
            store.put_features(key, pipeline, dispatch, {"wg": float(len(key))}, {"whole": True})
        store.put(Result(candidate_id=6, key="k6", label="k6", is_baseline=False, knobs={}, flags=[],
                         status=Status.COMPILE_FAILED, dispatch="other"))
        store.put_features("k6", "p", "other", {"wg": 2.0}, {})
        found = store.measured_elsewhere("p", "this", *H100)
    assert found == [({"wg": 2.0}, {"whole": True}, 1.5, "other")]


@pytest.mark.slow
def test_a_model_search_learns_from_a_dispatch_like_its_own():
    """Another dispatch measured over the same landscape (every point but the best two) brings
    the model search to within 3% of the best in fewer evaluations, median over seeds; a prior
    too small to say anything is refused."""
    space = _space(_problem())
    peak = max(range(len(space)), key=lambda i: _score(space.points[i]))
    scores = [None if abs(_score(p) - _score(space.points[peak])) < 1e-9 or i % 7 == 0 else _score(p) * 1.1
              for i, p in enumerate(space.points)]
    prior = prior_of_spaces([("another dispatch", space, scores)])
    assert not make_search("model", space).warm_start(Prior(prior.points[:MIN_PRIOR_POINTS - 1]))

    def needed(seed: int, warm: bool) -> int:
        search = make_search("model", space, seed=seed)
        if warm:
            assert search.warm_start(prior)
        steps = run_search(search, _scores(space), Budget(len(space)), 8, stop_at=_score(space.points[peak]) * 0.97)
        return evaluations_to_reach(steps, _score(space.points[peak]) * 0.97)

    cold = [needed(s, False) for s in range(5)]
    warm = [needed(s, True) for s in range(5)]
    assert statistics.median(warm) < statistics.median(cold), (warm, cold)


def test_a_prior_lines_up_with_a_space_by_feature_name():
    space = _space(_problem())
    name = space.feature_names[0]
    prior = Prior((PriorPoint({name: 3.0, "not in this space": 9.0}, {space.preference_names[0]: True}, 2.0, "d"),))
    x, y = prior.matrix(space)
    assert x.shape == (1, len(space.feature_names) + len(space.preference_names))
    assert x[0, 0] == 3.0 and x[0, 1:len(space.feature_names)].sum() == 0.0 and x[0, len(space.feature_names)] == 1.0
    assert math.isclose(y[0], math.log(2.0))


@pytest.mark.slow
def test_tune_with_warm_start_says_what_it_learned_from(tmp_path, timed_tools):
    """A first tuning fills the store (features of every config it measured, whatever its
    search); a model search of another dispatch with --warm-start says it learned from it."""
    timed_tools({i: 10.0 - 0.1 * i for i in range(40)})
    store = tmp_path / "shared.sqlite"
    first = run_cli("tune", write_matmul(tmp_path / "a.mlir", 64, 64, 32), "--budget", "16", "--repetitions", "1",
                    "--confirm-rounds", "1", "--store", store, "--output", tmp_path / "a")
    assert first.exit_code == 0, first.output
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT COUNT(*) FROM features").fetchone()[0] == 16
    out = tmp_path / "b"
    second = run_cli("tune", write_matmul(tmp_path / "b.mlir", 64, 128, 32), "--search", "model", "--warm-start",
                     "--budget", "8", "--repetitions", "1", "--confirm-rounds", "1", "--store", store, "--output", out)
    assert second.exit_code == 0, second.output
    said = " ".join(second.output.split())
    warm = json.loads((out / "results.json").read_text())["search"]["warm_started_from"]
    assert warm["points"] >= MIN_PRIOR_POINTS and len(warm["dispatches"]) == 1 and "64x64x32" in warm["dispatches"][0]
    assert f"warm start from {warm['points']} measurements of 1 other dispatches" in said
