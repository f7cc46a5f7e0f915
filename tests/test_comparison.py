"""Comparisons under the same conditions, on hand-computed cases: paired ratios, the three-of-four
rule, drift beyond the baseline's own noise, and the nearest baseline timing."""

import pytest

from tuner.core.comparison import BaselineTiming, find_drifts, nearest_baseline, paired


def test_paired_ratios_are_per_round_and_skip_failed_rounds():
    p = paired([10.0, 30.0, 10.0, None, 20.0], [5.0, 15.0, None, 4.0, 8.0])
    # Rounds 1, 2 and 5 have both timings: 10/5, 30/15, 20/8. The load tripled in round 2 and the
    # ratio did not move: that is the point of pairing.
    assert p.ratios == (2.0, 2.0, 2.5)
    assert p.speedup == 2.0


@pytest.mark.parametrize("ratios, wins", [
    ((1.2, 1.1, 1.3, 0.9), True),     # faster in 3 of 4
    ((1.2, 0.99, 1.3, 0.9), False),   # 2 of 4
    ((1.01, 1.02, 1.03, 1.04), True),
    ((1.5, 1.5, 1.5, 1.5, 0.5), True),    # 4 of 5 reach 75%
    ((1.5, 1.5, 1.5, 0.5, 0.5), False),   # 3 of 5 do not
    ((), False),
])
def test_a_winner_is_faster_in_three_rounds_of_four(ratios, wins):
    from tuner.core.comparison import Paired

    assert Paired(ratios).beats_baseline is wins


def test_drift_is_a_change_beyond_the_baselines_own_spread():
    t = lambda at, ms, spread=2.0, device="d": BaselineTiming(device, at, ms, spread)  # noqa: E731
    # 10 -> 10.3 ms (3%) with 2% spreads each: within the noise (floor 10%). 10.3 -> 31 ms: drift.
    log = [t(1, 10.0), t(2, 10.3), t(3, 31.0), t(4, 30.5), t(5, 30.0, device="other")]
    [drift] = find_drifts(log)
    assert (drift.before.at, drift.after.at) == (2, 3) and drift.change == pytest.approx(31.0 / 10.3 - 1)
    assert drift.covers("d", 2.5) and not drift.covers("d", 2.0) and not drift.covers("other", 2.5)
    # A noisy baseline (30% spreads) hides a 40% change: 0.3 + 0.3 = 60% of noise.
    assert find_drifts([t(1, 10.0, 30.0), t(2, 14.0, 30.0)]) == []
    assert len(find_drifts([t(1, 10.0, 1.0), t(2, 11.5, 1.0)])) == 1  # 15% > max(10%, 2%)
    assert find_drifts([t(1, 10.0, 1.0), t(2, 10.8, 1.0)]) == []  # 8%: the call-to-call noise here


def test_nearest_baseline_is_on_the_same_device():
    log = [BaselineTiming("a", 1.0, 10.0, 0.0), BaselineTiming("a", 9.0, 30.0, 0.0), BaselineTiming("b", 5.0, 7.0, 0.0)]
    assert nearest_baseline(log, "a", 4.0).median_ms == 10.0
    assert nearest_baseline(log, "a", 6.0).median_ms == 30.0
    assert nearest_baseline(log, "b", 1.0).median_ms == 7.0
    assert nearest_baseline(log, "c", 1.0) is None


def test_a_candidate_is_compared_with_the_baseline_timings_that_bracket_it():
    from tuner.core.comparison import bracketing

    # The load rose steadily from 10 to 40 ms of baseline while the candidate ran: the reference
    # is their geometric mean, 20 ms, and a 10 ms candidate is 2x.
    assert bracketing(10.0, 40.0) == pytest.approx(20.0)
    assert bracketing(None, 12.0) == 12.0 and bracketing(12.0, None) == 12.0 and bracketing(None, None) is None


def test_a_load_change_between_the_first_pass_and_the_rounds_is_reported():
    from tuner.core.comparison import load_change, load_threshold

    calm = [BaselineTiming("d", i, ms, 1.0) for i, ms in enumerate([10.0, 10.4, 9.8, 10.1, 25.0, 26.0, 24.0, 25.5])]
    # The quieter part of the first pass (lower quartile of its timings: 10.0 ms) against the
    # rounds' median (25 ms): 150% slower.
    assert load_change(calm, [24.0, 25.0, 26.0]) == pytest.approx(1.5)
    assert load_change(calm, [10.5, 11.0, 10.8]) is None  # 8%: the same machine
    assert load_change(calm, []) is None and load_change([], [10.0]) is None
    # A dispatch of a few microseconds whose own repetitions spread 30% on a quiet machine: 28%
    # above its quiet level (9.8 us, the lower quartile) is its noise (the threshold is 20% beyond
    # that spread: 50%), not a load; 70% is a load.
    tiny = [BaselineTiming("d", i, ms, 30.0) for i, ms in enumerate([0.0100, 0.0102, 0.0098, 0.0101])]
    assert load_threshold(tiny) == pytest.approx(0.5)
    assert load_change(tiny, [0.0125, 0.0124, 0.0126]) is None
    assert load_change(tiny, [0.0167, 0.0166, 0.0168]) == pytest.approx(0.704, abs=0.001)


def test_a_claim_is_an_interval_from_the_order_statistics_of_its_rounds():
    from tuner.core.comparison import Paired

    # Eight fresh rounds: the 2nd smallest to the 2nd largest ratio covers the median with
    # probability 1 - 2 (1 + 8) / 256 = 0.930 (the 3rd to the 6th only 0.711, below 90%).
    eight = Paired((1.52, 1.38, 1.47, 1.61, 1.44, 1.49, 1.58, 1.30))
    interval = eight.interval()
    assert (interval.low, interval.high, interval.rounds) == (1.38, 1.58, 8)
    assert interval.coverage == pytest.approx(238 / 256)
    assert interval.text() == "1.38-1.58, a 93% interval from 8 rounds"
    # Four rounds: only the whole range reaches 87.5% (1 - 2/16); fewer than two: none.
    four = Paired((1.1, 0.9, 1.3, 1.2)).interval()
    assert (four.low, four.high, four.coverage) == (0.9, 1.3, pytest.approx(0.875))
    assert Paired((1.2,)).interval() is None


@pytest.mark.parametrize("carry_over, order", [
    (True, ["R", "a", "R", "b", "R", "b", "R", "a", "R"]),            # one chain: round 2 opens with round 1's last R
    (False, ["R", "a", "R", "b", "R", "R", "b", "R", "a", "R"]),      # each round opens with a fresh R
])
def test_the_paired_round_engine_puts_every_variant_between_two_reference_timings(carry_over, order):
    from tuner.core.comparison import interleaved_rounds

    taken, clock = [], iter(range(1, 100))

    def timer(name):
        def timed():
            taken.append(name)
            return float(next(clock))  # each timing a later, larger figure: the brackets can be told apart
        return timed

    ticks = []
    rounds = interleaved_rounds(timer("R"), {"a": timer("a"), "b": timer("b")}, 2, carry_over,
                                tick=lambda: ticks.append(1))
    assert taken == order and len(ticks) == len(order)
    # a's first timing is the 2nd taken, between the 1st and 3rd (references 1.0 and 3.0)
    assert rounds.times["a"][0] == 2.0 and rounds.around["a"][0] == pytest.approx((1.0 * 3.0) ** 0.5)
    assert [len(r) for r in rounds.reference] == ([3, 2] if carry_over else [3, 3])
