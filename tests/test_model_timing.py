"""Whole-model timing (tuner.stages.model_timing): the builds of a model timed against a reference
in one interleaved chain per device, each ratio taken against the reference timings that
bracket it on the variant's own device."""

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from tuner.core.running import ModuleRun, Timing
from tuner.stages.model_timing import compare


def test_whole_model_rounds_chain_each_variant_between_two_reference_timings(tmp_path):
    """tune-model's interleaved rounds (the flag stage, each merge step, the verdict) time one
    chain R v R v R v R: each variant between the reference timings just before and after it,
    the reference timing that closes a round opening the next. Three rounds of one variant are
    7 timing runs, not 9 (each a process that loads the whole model on a GPU). The load rises
    steadily here (the reference 10, 12, 14, 16 ms) and the variant at half the midpoint of its
    brackets (5.5, 6.5, 7.5 ms): each ratio is about 2, where against the timing before it alone it
    would be 1.82-1.87 and against the one after 2.13-2.18."""
    reference_ms = iter([10.0, 12.0, 14.0, 16.0])
    calls: list[str] = []
    last = {}

    def timer(vmfb, settings):
        calls.append(vmfb.name)
        if vmfb.name == "reference.vmfb":
            last["ref"] = next(reference_ms)
            return Timing((last["ref"],))
        return Timing(((last["ref"] + 1.0) / 2,))

    settings = ModuleRun("local-task", "f", (), checked=None)
    cmp = compare(("ref", tmp_path / "reference.vmfb"), [("v", tmp_path / "variant.vmfb")], settings, 3,
                  tmp_path / "runs", timer=timer)
    assert calls == ["reference.vmfb", "variant.vmfb"] * 3 + ["reference.vmfb"]
    assert cmp.reference_ms == (10.0, 12.0, 14.0, 16.0)
    assert cmp.paired["v"].ratios == pytest.approx((2.0, 2.0, 2.0), rel=0.01)
    # Two variants: rotated each round, still one chain (1 + 2 x 2 x 2 = 9 runs for two rounds).
    reference_ms = iter([10.0, 12.0, 14.0, 16.0, 18.0])
    calls.clear()

    def flat(vmfb, settings):
        calls.append(vmfb.name)
        return Timing((next(reference_ms),)) if vmfb.name == "reference.vmfb" else Timing((5.0,))

    cmp = compare(("ref", tmp_path / "reference.vmfb"), [("a", tmp_path / "a.vmfb"), ("b", tmp_path / "b.vmfb")],
                  settings, 2, tmp_path / "runs2", timer=flat)
    assert calls == ["reference.vmfb", "a.vmfb", "reference.vmfb", "b.vmfb", "reference.vmfb",
                     "b.vmfb", "reference.vmfb", "a.vmfb", "reference.vmfb"]
    assert len(cmp.paired["a"].ratios) == len(cmp.paired["b"].ratios) == 2


def test_whole_model_variants_on_several_gpus_are_each_paired_with_the_reference_on_their_own_device(tmp_path):
    """Designed times: on cuda://0 every build runs in 1.0 ms (the reference) or 0.5 ms (a
    variant), on cuda://1 in 4.0 or 2.0 ms. Dealt over both devices, each variant is timed on one
    of them, side by side, and its ratios are of timings on its own device: 2.0 in every round. A
    ratio across devices would read 0.5 or 8.0."""
    scale = {"cuda://0": 1.0, "cuda://1": 4.0}
    timed: list[tuple[str, str, str]] = []
    busy: dict[str, int] = {}
    overlapped = threading.Event()
    lock = threading.Lock()

    def timer(vmfb: Path, settings: ModuleRun) -> Timing:
        with lock:
            busy[settings.device] = busy.get(settings.device, 0) + 1
            if len([d for d, n in busy.items() if n]) > 1:
                overlapped.set()
            timed.append((settings.device, vmfb.name, threading.current_thread().name))
        overlapped.wait(0.05)  # long enough for the other device's chain to be timing too
        with lock:
            busy[settings.device] -= 1
        return Timing(((0.5 if vmfb.name.startswith("v") else 1.0) * scale[settings.device],))

    variants = [(f"v{i}", tmp_path / f"v{i}.vmfb") for i in range(4)]
    settings = ModuleRun("cuda://0", "main", (), checked=None, spread_over=("cuda://0", "cuda://1"))
    cmp = compare(("default", tmp_path / "ref.vmfb"), variants, settings, 3, tmp_path / "cmp", timer)
    assert set(cmp.paired) == {name for name, _ in variants}
    assert all(p.ratios == (2.0, 2.0, 2.0) for p in cmp.paired.values()), cmp.paired
    on = {name: {d for d, v, _ in timed if v == f"{name}.vmfb"} for name, _ in variants}
    assert all(len(devices) == 1 for devices in on.values()) and set.union(*on.values()) == set(scale)
    assert overlapped.is_set()  # the two devices timed side by side
    assert cmp.reference_ms == (1.0,) * 7  # one device's chain: 1 + 2 variants x 3 rounds
    # One device, or the host's own cores: one chain, as before.
    timed.clear()
    cpu = replace(settings, device="local-task", spread_over=("local-task", "local-sync"))
    single = compare(("default", tmp_path / "ref.vmfb"), variants, cpu, 1, tmp_path / "cpu", lambda vmfb, s: Timing((1.0,)))
    assert set(single.paired) == {name for name, _ in variants} and len(single.reference_ms) == 5


def test_one_variant_on_several_gpus_has_its_rounds_dealt_over_them_each_ratio_of_one_device(tmp_path):
    """A merge's step or a verdict: one variant, two GPUs, 5 rounds. Each device times the
    reference and the variant in a chain of its own, side by side, for its share of the rounds
    (3 and 2), and the ratios are pooled: on cuda://0 the variant is 2.0x (1.0 against 0.5 ms),
    on cuda://1 1.25x (5.0 against 4.0 ms); a ratio across devices would read 0.25 or 10. The
    times reported are one device's. A variant that fails its numerics on one device fails."""
    ms = {("cuda://0", "ref"): 1.0, ("cuda://0", "v"): 0.5, ("cuda://1", "ref"): 5.0, ("cuda://1", "v"): 4.0}
    timed: list[tuple[str, str]] = []
    lock = threading.Lock()

    def timer(vmfb: Path, settings: ModuleRun) -> Timing:
        with lock:
            timed.append((settings.device, vmfb.stem))
        return Timing((ms[settings.device, vmfb.stem],))

    settings = ModuleRun("cuda://0", "main", (), checked=None, spread_over=("cuda://0", "cuda://1"))
    cmp = compare(("default", tmp_path / "ref.vmfb"), [("v", tmp_path / "v.vmfb")], settings, 5, tmp_path / "cmp", timer)
    assert sorted(cmp.paired["v"].ratios) == [1.25, 1.25, 2.0, 2.0, 2.0]
    assert [d for d, v in timed if v == "v"].count("cuda://0") == 3 and [d for d, v in timed if v == "v"].count("cuda://1") == 2
    assert set(cmp.reference_ms) == {1.0} and set(cmp.variant_ms["v"]) == {0.5}  # cuda://0's alone
    # a single round is not split (each device would have none)
    one = compare(("default", tmp_path / "ref.vmfb"), [("v", tmp_path / "v.vmfb")], settings, 1, tmp_path / "one", timer)
    assert one.paired["v"].ratios == (2.0,)
    from tuner.stages.model_timing import Comparison
    from tuner.core.comparison import Paired
    left = Comparison((1.0,), {"v": Paired((2.0,)), "w": Paired((1.1,))}, {"v": (0.5,), "w": (0.9,)})
    right = Comparison((5.0,), {"v": Paired((1.25,))}, {"v": (4.0,)}, failed={"w": "a different result (relative error 0.3)"})
    pooled = Comparison.pooled([left, right])
    assert set(pooled.paired) == {"v"} and pooled.paired["v"].ratios == (2.0, 1.25) and "w" in pooled.failed


class _Driver:
    def __init__(self, count: int):
        self.count = count

    def query_available_devices(self):
        return [{"device_id": i, "path": f"GPU-{i}", "name": "NVIDIA H200"} for i in range(self.count)]


def test_a_gpu_driver_named_without_an_index_means_every_device_the_host_has(monkeypatch):
    import iree.runtime as rt

    from tuner.evaluation.device_identity import host_devices

    monkeypatch.setattr(rt, "get_driver", lambda name: _Driver(3))
    assert host_devices("cuda") == ("cuda://0", "cuda://1", "cuda://2")
    assert host_devices("cuda://1") == ("cuda://1",)  # one named: that one
    assert host_devices("local-task") == ("local-task",)
    monkeypatch.setattr(rt, "get_driver", lambda name: _Driver(1))
    assert host_devices("cuda") == ("cuda",)  # one device (CUDA_VISIBLE_DEVICES=1): as it was

    def missing(name):
        raise ValueError(f"no driver {name}")

    monkeypatch.setattr(rt, "get_driver", missing)
    assert host_devices("cuda") == ("cuda",)  # none here: the run fails on it with the runtime's error


def test_a_run_times_on_every_gpu_unless_devices_are_named_or_it_does_not_time_here(monkeypatch):
    """`--device cuda` (a driver without an index, as users type it) is every GPU of the host,
    as no --device is; `--device cuda://1` is that GPU alone."""
    from tuner.core.settings import RunOptions
    from tuner.evaluation import devices

    monkeypatch.setattr(devices, "host_devices", lambda d: ("cuda://0", "cuda://1") if d == "cuda" else (d,))
    assert devices.on_every_gpu(RunOptions(), "cuda").devices == ("cuda://0", "cuda://1")
    assert devices.on_every_gpu(RunOptions(devices=("cuda",)), "cuda").devices == ("cuda://0", "cuda://1")
    assert devices.on_every_gpu(RunOptions(), "local-task").devices == ()
    assert devices.on_every_gpu(RunOptions(devices=("cuda://1",)), "cuda").devices == ("cuda://1",)
    assert devices.on_every_gpu(RunOptions(devices=("cuda://0", "cuda://1")), "cuda").devices == ("cuda://0", "cuda://1")
    assert devices.on_every_gpu(RunOptions(compile_only=True), "cuda").devices == ()
    assert devices.on_every_gpu(RunOptions(strategy="ray"), "cuda").devices == ()


def test_tune_model_says_it_times_on_every_gpu_of_the_host_and_tune_passes_them_on(monkeypatch, tmp_path):
    """The default reaches both entry points: tune-model says which devices it times on before
    it reads the model, and tune's evaluation gets them (both stopped there: no GPU here)."""
    from tuner import api
    from tuner.core.settings import Listeners
    from tuner.evaluation import devices
    from tuner.stages import model_client

    class Reached(Exception):
        pass

    monkeypatch.setattr(devices, "host_devices", lambda d: ("cuda://0", "cuda://1"))
    said = []

    def stop(*args, **kwargs):
        raise Reached()

    monkeypatch.setattr(model_client, "read_program", stop)
    (tmp_path / "m.mlir").write_text("module {}\n")
    with pytest.raises(Reached):
        model_client.tune_model(tmp_path / "m.mlir", "cuda:sm_80", tmp_path / "o", listen=Listeners(say=said.append))
    assert any("timing on 2 devices: cuda://0, cuda://1" in s for s in said), said
    class Picked(Exception):
        pass

    monkeypatch.setattr(api, "open_session", lambda *a, **k: None)

    def pick(session, pipeline_name, run, progress):
        raise Picked(run.devices)

    monkeypatch.setattr(api, "_pick_by_time", pick)
    with pytest.raises(Picked) as picked:
        api.tune(tmp_path / "m.mlir", "cuda:sm_80", tmp_path / "t")
    assert picked.value.args[0] == ("cuda://0", "cuda://1")


def test_numerics_runs_on_a_gpu_go_at_once_and_one_that_fails_beside_others_runs_again_alone(tmp_path, monkeypatch):
    """Each build's numerics run (a process that loads the module) on cuda: several at a time
    (most seen running together is above one), each output compared with the reference's; a run
    that fails only while others run (here: build b, as a model too large to load beside others
    would) is run again alone and then counted right. On the host's own cores, one at a time."""
    import numpy as np

    import tuner.stages.model_timing as mt
    from tuner.tools import ToolRun

    running, most, lock = [0], [0], threading.Lock()
    alone_runs: list[str] = []

    def fake_run_once(vmfb, settings, output):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            crowded = running[0] > 1
        try:
            threading.Event().wait(0.05)
            if vmfb.stem == "b" and crowded:
                return ToolRun(("iree-run-module",), 1, "", "out of memory", 0.05)
            if not crowded:
                alone_runs.append(vmfb.stem)
            np.save(Path(str(output) + ".npy"), np.ones(4, dtype=np.float32))
            return ToolRun(("iree-run-module",), 0, "", "", 0.05)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(mt, "run_once", fake_run_once)
    monkeypatch.setattr(mt, "read_output", lambda out, settings: np.load(Path(str(out) + ".npy")))
    monkeypatch.setattr(mt, "usable_cores", lambda: 16)
    builds = [(n, tmp_path / f"{n}.vmfb") for n in ("a", "b", "c", "d")]
    settings = ModuleRun("cuda", "f", (), checked=0)
    cmp = compare(("ref", tmp_path / "reference.vmfb"), builds, settings, 0, tmp_path / "gpu")
    assert most[0] > 1 and "b" in alone_runs
    assert not cmp.failed and set(cmp.errors) == {"a", "b", "c", "d"} and max(cmp.errors.values()) == 0.0
    most[0] = 0
    compare(("ref", tmp_path / "reference.vmfb"), builds, replace(settings, device="local-task"), 0, tmp_path / "cpu")
    assert most[0] == 1


def test_a_run_pinned_to_some_cores_sizes_its_pools_by_those_not_the_hosts(monkeypatch):
    """`taskset -c 0-15 tune-model ...` on a 64-core host of four GPUs: its compiles and checks
    share 16 cores, not 64 (issue 62: one run a GPU, the host's cores dealt among them)."""
    import os

    from tuner.core.settings import usable_cores

    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert usable_cores() == 16
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)  # a platform without affinity: the host's count
    assert usable_cores() == 64
