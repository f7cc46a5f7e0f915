"""Ranking is a pure function of the results; the store survives torn writes and keeps the latest."""

from tuner.ranking import rank
from tuner.results import Result, Status
from tuner.store import ResultStore


def _r(i, ms, status=Status.OK, baseline=False):
    return Result(candidate_id=i, key=f"k{i}", label=f"c{i}", is_baseline=baseline, knobs={}, flags=[],
                  status=status, times_ms=[ms] if ms else [], median_ms=ms)


def test_rank_orders_ok_results_and_computes_speedups():
    results = [_r(0, 10.0, baseline=True), _r(1, 5.0), _r(2, None, Status.COMPILE_FAILED),
               _r(3, 1.0, Status.WRONG_NUMERICS), _r(4, 20.0)]
    ranking = rank(results)
    assert [r.candidate_id for r in ranking.ranked] == [1, 0, 4]
    assert ranking.best.candidate_id == 1
    assert ranking.speedup(ranking.best) == 2.0
    # Wrong numerics are never ranked, however fast.
    assert {r.candidate_id for r in ranking.failed} == {2, 3}


def test_within_noise_of_best():
    from dataclasses import replace

    best = replace(_r(1, 10.0), spread_pct=5.0)
    ranking = rank([_r(0, 20.0, baseline=True), best, _r(2, 10.4), _r(3, 11.0)])
    assert [r.candidate_id for r in ranking.within_noise_of_best()] == [2]


def test_rank_of_nothing():
    assert rank([]).best is None


def test_store_roundtrip_torn_line_and_last_wins(tmp_path):
    store = ResultStore(tmp_path / "r.jsonl")
    store.append(_r(1, 5.0))
    store.append(_r(1, 4.0))
    store.append(_r(2, None, Status.RUN_TIMEOUT))
    with (tmp_path / "r.jsonl").open("a") as f:
        f.write('{"candidate_id": 3, "key": "k3", "lab')  # killed mid-write
    loaded = store.load()
    assert set(loaded) == {"k1", "k2"}
    assert loaded["k1"].median_ms == 4.0
    assert loaded["k2"].status == Status.RUN_TIMEOUT
