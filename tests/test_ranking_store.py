"""Ranking is a pure function of the results: a winner only among candidates confirmed side by
side with the baseline and faster in three rounds of four; the store keeps the latest result per
key and conditions, and refuses files that are not its own."""

import sqlite3
from dataclasses import replace

import pytest

from tuner.errors import StoreError
from tuner.ranking import rank
from tuner.core.results import Result, Status
from tuner.store import ResultStore


def _r(i, ms, status=Status.OK, baseline=False, first=None, ratios=(), **kw):
    return Result(candidate_id=i, key=f"k{i}", label=f"c{i}", is_baseline=baseline, knobs={}, flags=[],
                  status=status, times_ms=[ms] if ms else [], median_ms=ms, first_pass_speedup=first,
                  round_ratios=list(ratios), **kw)


def test_only_confirmed_candidates_can_win_and_they_rank_by_paired_speedup():
    results = [_r(0, 10.0, baseline=True, first=1.0),
               _r(1, 5.0, first=2.0, ratios=(1.30, 1.25, 1.35, 1.28)),   # confirmed: 1.29x
               _r(2, None, Status.COMPILE_FAILED),
               _r(3, 1.0, Status.WRONG_NUMERICS),
               _r(4, 2.0, first=5.0),                                      # fastest first pass, never confirmed
               _r(5, 6.0, first=1.8, ratios=(1.5, 1.6, 1.4, 1.55))]      # confirmed: 1.525x
    ranking = rank(results)
    assert ranking.best.candidate_id == 5
    assert ranking.speedup(ranking.best) == pytest.approx(1.525)
    assert [r.candidate_id for r in ranking.ranked] == [5, 1, 0, 4]
    assert ranking.speedup(results[4]) is None and ranking.speedup(results[0]) == 1.0
    assert {r.candidate_id for r in ranking.failed} == {2, 3}  # wrong numerics never ranked, however fast
    assert "1.52x the default" in ranking.verdict and "faster in 4" in ranking.verdict


def test_a_candidate_faster_in_only_two_rounds_of_four_is_no_winner():
    # Median ratio 1.1, but slower than the baseline in two of four rounds: within the noise.
    ranking = rank([_r(0, 10.0, baseline=True, first=1.0), _r(1, 9.0, first=1.4, ratios=(1.4, 1.3, 0.9, 0.95))])
    assert ranking.best is None
    assert "no candidate beat the default beyond the noise" in ranking.verdict and "faster in 2 of 4" in ranking.verdict
    # Faster in three rounds of four, but the claim's interval (from four rounds: the smallest to the
    # largest ratio, 0.95-1.40) holds 1.0: no measured gain (issue 63's "1.21x (0.98-1.49)").
    three = rank([_r(0, 10.0, baseline=True), _r(1, 9.0, first=1.4, ratios=(1.4, 1.3, 1.02, 0.95))])
    assert three.best is None
    assert "candidate 1 was 1.16x (0.95-1.40, a 88% interval from 4 rounds), an interval that holds 1.0" in three.verdict
    four = rank([_r(0, 10.0, baseline=True), _r(1, 9.0, first=1.4, ratios=(1.4, 1.3, 1.02, 1.05))])
    assert four.best.candidate_id == 1


def test_without_confirmation_rounds_the_default_stays():
    ranking = rank([_r(0, 10.0, baseline=True, first=1.0), _r(1, 1.0, first=10.0)])
    assert ranking.best is None and "confirmation rounds off" in ranking.verdict


def test_within_noise_of_best():
    ranking = rank([_r(0, 20.0, baseline=True), _r(1, 10.0, ratios=(2.0, 1.9, 2.1, 1.95)),
                    _r(2, 10.4, ratios=(1.93, 1.9, 1.92, 1.94)), _r(3, 11.0, ratios=(1.5, 1.6, 1.5, 1.6))])
    # The best's lower ratio (reached in 3 of 4 rounds) is 1.95: candidate 2 (1.925) is below it.
    assert ranking.best.candidate_id == 1 and ranking.within_noise_of_best() == ()
    # Candidate 1's rounds spread (lower 1.8, median 1.95) and candidate 2's hold (lower 1.92): the
    # lead is the one whose rounds hold (the lower quantile first), and candidate 1 (median 1.95,
    # above 2's lower 1.92) cannot be told apart from it; candidate 3 (1.55) can.
    ranking = rank([_r(0, 20.0, baseline=True), _r(1, 10.0, ratios=(2.2, 1.6, 2.1, 1.8)),
                    _r(2, 10.4, ratios=(1.93, 1.9, 1.92, 1.94)), _r(3, 11.0, ratios=(1.5, 1.6, 1.5, 1.6))])
    assert ranking.best.candidate_id == 2
    assert [r.candidate_id for r in ranking.within_noise_of_best()] == [1]


def test_nothing_ranked_keeps_the_default_and_says_so():
    ranking = rank([])
    assert ranking.best is None and ranking.baseline is None and ranking.ranked == () and ranking.failed == ()
    assert ranking.verdict == "no candidate to try (the space holds no config for it): keeping the compiler's default"
    # The baseline alone (an empty space) is not "no candidate ran" (ResNet's stem said so).
    alone = rank([_r(0, 20.0, baseline=True)])
    assert alone.best is None and alone.verdict.startswith("no candidate to try")
    failed = rank([_r(0, 20.0, baseline=True), _r(1, None, Status.COMPILE_FAILED)])
    assert failed.verdict == "no candidate ran successfully: keeping the compiler's default"


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


def test_a_time_is_reused_only_on_the_same_device_and_timing_a_build_failure_everywhere(tmp_path):
    gpu_a = dict(device_id="cuda: NVIDIA H100 80GB HBM3", timing="cuda: dispatch alone, 50 per batch")
    with ResultStore(tmp_path / "r.sqlite", "c", "r") as store:
        store.put(_r(1, 2.0, **gpu_a))
        store.put(_r(2, None, Status.COMPILE_FAILED, **gpu_a))
        assert set(store.reusable(["k1", "k2"], gpu_a["device_id"], gpu_a["timing"])) == {"k1", "k2"}
        # Another GPU of the same target, or the same GPU timed another way: only the build failure holds.
        assert set(store.reusable(["k1", "k2"], "cuda: NVIDIA A100-SXM4-40GB", gpu_a["timing"])) == {"k2"}
        assert set(store.reusable(["k1", "k2"], gpu_a["device_id"], "cuda: entry function")) == {"k2"}
        # Stored rounds belong to the run that timed them: a later run must confirm again.
        store.put(_r(3, 2.0, ratios=(1.5, 1.5, 1.5, 1.5), **gpu_a))
        assert not store.reusable(["k3"], gpu_a["device_id"], gpu_a["timing"])["k3"].confirmed


def test_store_columns_name_what_the_key_stands_for(tmp_path):
    result = replace(_r(1, 2.0), dispatch="mm_dispatch_0", target="llvm-cpu:x86_64",
                     compilation_info="#iree_codegen.compilation_info<...>", config_flags=["--iree-opt-data-tiling"],
                     device_id="cpu: Xeon avx512, 2 cores", timing="local-task: entry function")
    with ResultStore(tmp_path / "r.sqlite", "c", "r") as store:
        store.put(result)
        [row] = store.rows()
    assert row["dispatch"] == "mm_dispatch_0" and row["target"] == "llvm-cpu:x86_64"
    assert row["config"].startswith("#iree_codegen") and row["flags"] == "--iree-opt-data-tiling"
    assert (row["compiler"], row["runtime"], row["status"], row["median_ms"]) == ("c", "r", "ok", 2.0)
    assert (row["device_id"], row["timing"]) == ("cpu: Xeon avx512, 2 cores", "local-task: entry function")


def test_a_file_that_is_not_a_store_is_one_clear_error(tmp_path):
    bad = tmp_path / "r.sqlite"
    bad.write_text("not a database, just text " * 100)
    with pytest.raises(StoreError, match="not a result store"):
        ResultStore(bad, "c", "r")


def test_another_programs_database_is_refused_untouched(tmp_path):
    theirs = tmp_path / "theirs.sqlite"
    with sqlite3.connect(theirs) as db:
        db.execute("CREATE TABLE accounts (id INTEGER, balance REAL)")
        db.execute("INSERT INTO accounts VALUES (1, 10.0)")
    before = theirs.read_bytes()
    with pytest.raises(StoreError, match="not a result store of this tuner"):
        ResultStore(theirs, "c", "r")
    assert theirs.read_bytes() == before and not (tmp_path / "theirs.sqlite-wal").exists()


def test_a_store_from_before_device_keys_is_refused_with_how_to_start_afresh(tmp_path):
    old = tmp_path / "old.sqlite"
    with sqlite3.connect(old) as db:  # schema 1: keyed by (key, compiler, runtime) only
        db.execute("CREATE TABLE results (key TEXT, compiler TEXT, runtime TEXT, result TEXT)")
        db.execute("PRAGMA user_version=1")
    with pytest.raises(StoreError, match="before results were keyed by device.*delete it or give --store"):
        ResultStore(old, "c", "r")


def test_the_lead_is_the_candidate_whose_rounds_hold_up_not_one_lucky_round():
    # Candidate 1: one round at 3x and three near 1.1x (median 1.15x); candidate 2: four rounds at
    # 1.3-1.4x (median 1.35x, lower 1.3x). Candidate 3 has the higher median of the two lucky ones
    # (1.78x) but its second-smallest round is 1.06x: the lead is candidate 2.
    from tuner.core.comparison import Paired

    rounds = {1: (3.0, 1.1, 1.12, 1.18), 2: (1.3, 1.35, 1.35, 1.4), 3: (2.9, 2.5, 1.05, 1.06)}
    ranking = rank([_r(0, 10.0, baseline=True, first=1.0),
                    *(_r(i, 5.0, first=r[0], ratios=r) for i, r in rounds.items())])
    assert ranking.best.candidate_id == 2
    assert Paired(rounds[3]).speedup > Paired(rounds[2]).speedup  # the median alone would pick 3


def test_a_flag_only_candidate_near_the_best_is_confirmed_beside_the_top_ones():
    """Issue 39: data tiling alone (2.19x in its first pass) was never timed beside the winner.
    A flag-only candidate within 85% of the best first-pass figure joins the confirmation rounds
    even below the top N; a config or a flag-only candidate further off does not."""
    from tuner.evaluation.passes import chosen_for_confirmation

    def result(i, figure, flags=(), info="cfg"):
        return Result(i, f"k{i}", f"c{i}", False, {}, [], Status.OK, times_ms=[1.0], median_ms=1.0,
                      first_pass_speedup=figure, compilation_info=info, config_flags=list(flags))

    tiled = [result(i, 2.5 - 0.01 * i) for i in range(1, 6)]  # 2.49 .. 2.45
    data_tiling = result(6, 2.19, ["--iree-opt-data-tiling"], info="")
    far_flag = result(7, 1.9, ["--other-flag"], info="")
    near_config = result(8, 2.3)
    chosen = chosen_for_confirmation([*tiled, data_tiling, far_flag, near_config], top=4)
    # 2.19 >= 0.85 x 2.49 = 2.1165; 1.9 is not; the config at 2.3 is a fifth config, not taken.
    assert [r.candidate_id for r in chosen] == [1, 2, 3, 4, 6]
    assert chosen_for_confirmation([data_tiling], top=4) == [data_tiling]
    assert chosen_for_confirmation([], top=4) == []


def test_a_config_no_faster_than_the_flag_alone_beyond_the_noise_gives_way_to_the_flag():
    """Issue 36: a data-tiled config was named over data tiling alone, which it did not beat side
    by side. Per round, the config's ratio over the flag's: faster in 2 of 4 rounds, within the
    noise, so the simpler flag alone is named and the verdict says why; faster in 4 of 4, the
    config stays."""
    base = _r(0, 10.0, baseline=True, first=1.0)
    config = _r(1, 4.0, first=2.5, ratios=(2.5, 2.4, 2.6, 2.5), compilation_info="cfg")
    flag = _r(2, 4.1, first=2.4, ratios=(2.45, 2.5, 2.4, 2.55), config_flags=["--iree-opt-data-tiling"])
    ranking = rank([base, config, flag])
    assert ranking.best.candidate_id == 2
    assert "candidate 1 (c1) was faster than it in only 2 of 4 rounds, within the noise" in ranking.verdict
    clear = replace(flag, round_ratios=[2.0, 2.1, 1.9, 2.0])
    assert rank([base, config, clear]).best.candidate_id == 1


def test_a_winner_whose_fresh_rounds_scatter_is_said_to_be_known_only_within_its_wide_interval():
    # 8 fresh rounds: sorted 1.1, 1.15, 1.5, 1.9, 2.0, 2.2, 4.1, 4.2: the median 1.95x, the 93%
    # interval the 2nd smallest to the 2nd largest, 1.15-4.10 (3.6 apart): wide. 8 rounds within
    # 2.3-2.6 (2.35-2.55, 1.09 apart) are not.
    base = _r(0, 10.0, baseline=True, first=1.0)
    scattered = replace(_r(1, 5.0, first=2.0, ratios=(2.0, 2.1, 1.9, 2.2)),
                        holdout_ratios=[1.1, 4.2, 1.5, 1.9, 2.0, 2.2, 4.1, 1.15])
    ranking = rank([base, scattered])
    assert ranking.best is scattered
    assert "1.95x the default (1.15-4.10" in ranking.verdict
    assert "a wide interval" in ranking.verdict and "known only to within 1.15-4.10x" in ranking.verdict
    steady = replace(scattered, holdout_ratios=[2.3, 2.35, 2.4, 2.45, 2.5, 2.5, 2.55, 2.6])
    assert "wide interval" not in rank([base, steady]).verdict
