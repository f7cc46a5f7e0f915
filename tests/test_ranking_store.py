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


def test_store_keeps_the_latest_per_key_and_version(tmp_path):
    path = tmp_path / "r.sqlite"
    with ResultStore(path, "3.13.0", "3.13.0") as store:
        store.put(_r(1, 5.0))
        store.put(_r(1, 4.0))
        store.put(_r(2, None, Status.RUN_TIMEOUT))
        store.put(_r(3, None, Status.COMPILE_FAILED))
    with ResultStore(path, "3.13.0", "3.13.0") as store:  # reopened: everything committed
        assert store.get("k1").median_ms == 4.0
        assert store.get("k2").status == Status.RUN_TIMEOUT
        # Timeouts are tried again; a compile failure is as good as a measurement.
        assert set(store.reusable(["k1", "k2", "k3", "k4"])) == {"k1", "k3"}
        assert len(store.rows()) == 3
    # Another compiler or runtime version sees none of it.
    with ResultStore(path, "3.14.0", "3.13.0") as other:
        assert other.get("k1") is None and other.reusable(["k1"]) == {}
    with ResultStore(path, "3.13.0", "3.12.0") as other:
        assert other.get("k1") is None


def test_store_columns_name_what_the_key_stands_for(tmp_path):
    from dataclasses import replace

    result = replace(_r(1, 2.0), dispatch="mm_dispatch_0", target="llvm-cpu:x86_64",
                     compilation_info="#iree_codegen.compilation_info<...>", config_flags=["--iree-opt-data-tiling"])
    with ResultStore(tmp_path / "r.sqlite", "c", "r") as store:
        store.put(result)
        [row] = store.rows()
    assert row["dispatch"] == "mm_dispatch_0" and row["target"] == "llvm-cpu:x86_64"
    assert row["config"].startswith("#iree_codegen") and row["flags"] == "--iree-opt-data-tiling"
    assert (row["compiler"], row["runtime"], row["status"], row["median_ms"]) == ("c", "r", "ok", 2.0)


def test_a_file_that_is_not_a_store_is_one_clear_error(tmp_path):
    import pytest

    from tuner.errors import OutputError

    bad = tmp_path / "r.sqlite"
    bad.write_text("not a database, just text " * 100)
    with pytest.raises(OutputError, match="cannot open the result store"):
        ResultStore(bad, "c", "r")
