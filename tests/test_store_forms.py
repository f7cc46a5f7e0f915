"""The result store's two forms, an SQLite file (what a run keeps) and an in-memory database
(ResultStore.in_memory: what the in-memory evaluations of tests/test_evaluator_fakes.py use),
held to the same behaviour: every operation of the store checked on both, on designed results
(issue 61: the store had no in-memory form)."""

from dataclasses import replace

import pytest

from tuner.core.results import Result, Status
from tuner.store import ResultStore

GPU = dict(device_id="cuda: NVIDIA H200", timing="cuda: entry function")


def _r(i, ms, status=Status.OK, first=None, ratios=(), baseline=False, **kw):
    return Result(candidate_id=i, key=f"k{i}", label=f"c{i}", is_baseline=baseline, knobs={}, flags=[],
                  status=status, times_ms=[ms] if ms else [], median_ms=ms, first_pass_speedup=first,
                  round_ratios=list(ratios), **kw)


@pytest.fixture(params=["file", "memory"])
def opened(request, tmp_path):
    """A way to open a store of one version pair ("c", "r" unless named), in the form the test
    is run with: each call on a file opens the same file again; in memory, the one database."""
    if request.param == "file":
        def open_file(compiler: str = "c", runtime: str = "r") -> ResultStore:
            return ResultStore(tmp_path / "r.sqlite", compiler, runtime)
        yield open_file
        return
    memory = ResultStore.in_memory("c", "r")

    def open_memory(compiler: str = "c", runtime: str = "r") -> ResultStore:
        memory.compiler, memory.runtime = compiler, runtime  # one database, seen as that version pair
        return memory
    yield open_memory
    memory.close()


def test_the_latest_result_per_key_is_kept_and_timeouts_are_not_reused(opened):
    store = opened()
    store.put(_r(1, 5.0, **GPU))
    store.put(_r(1, 4.0, **GPU))
    store.put(_r(2, None, Status.RUN_TIMEOUT, **GPU))
    store.put(_r(3, None, Status.COMPILE_FAILED))
    assert store.get("k1", **GPU).median_ms == 4.0
    assert set(store.reusable(["k1", "k2", "k3", "k4"], **GPU)) == {"k1", "k3"}
    assert [row["key"] for row in store.rows()] == ["k1", "k2", "k3"]


def test_a_time_holds_on_its_device_and_timing_a_build_failure_everywhere(opened):
    store = opened()
    store.put(_r(1, 2.0, **GPU))
    store.put(_r(2, None, Status.COMPILE_FAILED, **GPU))
    assert set(store.reusable(["k1", "k2"], "cuda: NVIDIA A100", GPU["timing"])) == {"k2"}
    assert set(store.reusable(["k1", "k2"], GPU["device_id"], "cuda: dispatch alone")) == {"k2"}
    assert store.get("k2", "cpu: another", "local-task: entry function").status == Status.COMPILE_FAILED


def test_another_compiler_or_runtime_version_sees_nothing_but_latest_reads_across_runtimes(opened):
    opened().put(_r(1, 3.0, first=1.5, **GPU))
    assert opened("c2", "r").get("k1", **GPU) is None and opened("c", "r2").get("k1", **GPU) is None
    # what a replayed search was told: any device, any runtime of this compiler
    assert opened("c", "r2").latest("k1").median_ms == 3.0 and opened("c2", "r").latest("k1") is None


def test_a_confirmation_is_reused_only_where_its_machine_was_quiet(opened):
    store = opened()
    rounds = [_r(0, 10.0, baseline=True, **GPU), _r(1, 8.0, ratios=(1.2, 1.3, 1.25, 1.2), **GPU)]
    store.put_confirmation(rounds, 4, GPU["device_id"], GPU["timing"], loaded=False)
    found, _ = store.confirmation("k0", ["k1"], 4, GPU["device_id"], GPU["timing"])
    assert [r.key for r in found] == ["k0", "k1"] and found[1].round_ratios == [1.2, 1.3, 1.25, 1.2]
    assert store.confirmation("k0", ["k1"], 2, GPU["device_id"], GPU["timing"]) is None  # other rounds
    store.put_confirmation([rounds[0], replace(rounds[1], key="k2")], 4, GPU["device_id"], GPU["timing"], loaded=True)
    assert store.confirmation("k0", ["k2"], 4, GPU["device_id"], GPU["timing"]) is None  # under load: kept, not reused


def test_features_of_other_dispatches_measured_here_are_what_a_search_learns_from(opened):
    store = opened()
    store.put(replace(_r(1, 2.0, first=1.4, **GPU), dispatch="a"))
    store.put(replace(_r(2, 2.0, first=0.9, **GPU), dispatch="b"))
    store.put(replace(_r(3, 2.0, first=2.0, device_id="cuda: NVIDIA A100", timing=GPU["timing"]), dispatch="b"))
    for key, dispatch in (("k1", "a"), ("k2", "b"), ("k3", "b")):
        store.put_features(key, "llvmgpu_mma_sync", dispatch, {"tile_m": 64.0}, {"fills_a_wave": True})
    # dispatch a's search learns from b's config timed on this device (not the A100's), and not
    # from its own
    assert store.measured_elsewhere("llvmgpu_mma_sync", "a", **GPU) == [
        ({"tile_m": 64.0}, {"fills_a_wave": True}, 0.9, "b")]
    assert store.measured_elsewhere("llvmgpu_tile_and_fuse", "a", **GPU) == []
