"""Where a run's time goes (tuner.stages.ledger): seconds and counts by kind of work, a kind's own
seconds without the work of another kind timed inside it, a stage's part of them, said in words."""

import time

from tuner.stages.ledger import BUILDS, HOST, TIMINGS, Ledger, part_text


def test_work_timed_inside_other_work_is_counted_once_in_its_own_kind():
    ledger = Ledger()
    with ledger.timed(TIMINGS, 3):
        time.sleep(0.02)
        with ledger.timed(HOST):
            time.sleep(0.05)
    assert ledger.counts == {TIMINGS: 3, HOST: 1}
    assert 0.05 <= ledger.seconds[HOST] < 0.2
    # the comparison's own seconds: the 0.02 s before the host reference, not the 0.07 s in all
    assert 0.02 <= ledger.seconds[TIMINGS] < 0.05


def test_a_stages_part_is_what_was_counted_since_its_mark_and_a_failed_block_still_counts():
    ledger = Ledger()
    with ledger.timed(BUILDS):
        pass
    mark = ledger.mark()
    try:
        with ledger.timed(BUILDS, 2):
            raise RuntimeError("a build that fails is still time spent")
    except RuntimeError:
        pass
    with ledger.timed(TIMINGS):
        pass
    part = ledger.since(mark)
    assert list(part) == [BUILDS, TIMINGS] and part[BUILDS][0] == 2 and part[TIMINGS][0] == 1
    assert ledger.counts[BUILDS] == 3


def test_a_part_is_said_with_the_seconds_no_kind_holds():
    text = part_text({BUILDS: (12, 40.2), TIMINGS: (9, 150.0)}, 231.0)
    assert text == "12 whole-model build(s) 40 s; 9 model timing(s) 150 s; the rest 41 s"
    assert part_text({}, 5.0) == ""


def test_threads_keep_their_own_nesting_and_their_seconds_add_up():
    from concurrent.futures import ThreadPoolExecutor

    ledger = Ledger()

    def search(_):
        with ledger.timed(TIMINGS):
            time.sleep(0.03)
            with ledger.timed(HOST):
                time.sleep(0.01)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(search, range(4)))
    assert ledger.counts == {TIMINGS: 4, HOST: 4}
    # each thread's comparison without its own host reference: 4 x 0.03 s, not less
    assert 0.12 <= ledger.seconds[TIMINGS] < 0.3 and 0.04 <= ledger.seconds[HOST] < 0.2
