"""The dispatch stage on several GPUs of one host (issue 62): the dispatches dealt over the GPUs,
tuned at once, each lane on its own GPUs; on one GPU, one after another as before."""

import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

from iree.compiler import ir

from tuner.stages import builtin
from tuner.stages.base import DispatchOutcome, ModelState, StageEnv
from tuner.stages.builtin import DispatchStage, gpu_lanes


def _env(tmp_path: Path, devices) -> StageEnv:
    return StageEnv(model=tmp_path / "model.mlir", target=SimpleNamespace(device="cuda", pinned=()),
                    output_dir=tmp_path, ctx=ir.Context(), program=None, workload=None, devices=devices)


def test_gpus_are_dealt_one_lane_a_dispatch_and_a_lane_takes_several_where_dispatches_are_fewer(tmp_path):
    four = ("cuda://0", "cuda://1", "cuda://2", "cuda://3")
    assert gpu_lanes(_env(tmp_path, four), 3) == [("cuda://0", "cuda://3"), ("cuda://1",), ("cuda://2",)]
    assert gpu_lanes(_env(tmp_path, four), 9) == [(d,) for d in four]
    assert gpu_lanes(_env(tmp_path, four), 1) == []  # one dispatch: its search deals its first pass itself
    assert gpu_lanes(_env(tmp_path, ("cuda",)), 5) == []
    assert gpu_lanes(_env(tmp_path, ("local-task", "local-task")), 5) == []  # the CPU: one after another


def _run_stage(tmp_path, monkeypatch, devices, shares):
    """DispatchStage.run over designed dispatches (`shares`), each tuning 0.3 s: what each
    tuning was given (its devices, its MLIR context) and when it ran, and the progress phases said."""
    leads = [(SimpleNamespace(name=f"d{i}", shape_name="s"), DispatchOutcome(f"d{i}", "s", share, "chosen"))
             for i, share in enumerate(shares, 1)]
    monkeypatch.setattr(builtin, "select_dispatches", lambda *args: (leads, []))
    monkeypatch.setattr(builtin, "tuning_pipeline", lambda lead, name: None)
    ran, lock = [], threading.Lock()

    def tune_or_say(self, lead, outcome, program, target, env, source, seconds=None):
        start = time.monotonic()
        env.progress("compile", 1, 8)
        time.sleep(0.3)
        with lock:
            ran.append((lead.name, tuple(env.devices), env.ctx, start, time.monotonic()))
        return DispatchOutcome(lead.name, "s", outcome.share, "tuned")

    monkeypatch.setattr(DispatchStage, "tune_or_say", tune_or_say)
    phases = []
    env = replace(_env(tmp_path, devices), progress=lambda phase, done, total: phases.append(phase))
    state = DispatchStage(budget=8).run(ModelState(), env)
    return {name: (devs, ctx, start, end) for name, devs, ctx, start, end in ran}, state, env, phases


def test_on_two_gpus_the_dispatches_are_tuned_at_once_each_lane_on_its_own_gpu(tmp_path, monkeypatch):
    ran, state, env, phases = _run_stage(tmp_path, monkeypatch, ("cuda://0", "cuda://1"), (0.5, 0.3, 0.2))
    assert {name: devs for name, (devs, *_) in ran.items()} == {
        "d1": ("cuda://0",), "d2": ("cuda://1",), "d3": ("cuda://0",)}  # largest first, dealt in turn
    (_, ctx1, start1, end1), (_, ctx2, start2, end2) = ran["d1"], ran["d2"]
    assert start2 < end1 and start1 < end2  # d1 and d2 ran at the same time
    assert ran["d3"][2] >= end1  # d3 after d1, on the same GPU
    assert ctx1 is not ctx2 and env.ctx not in (ctx1, ctx2)  # a context a lane: none shared between threads
    assert sorted(o.name for o in state.dispatches) == ["d1", "d2", "d3"]
    assert all(o.status == "tuned" for o in state.dispatches)
    # Each lane's progress is its own (one bar a phase would show both lanes' counts in turn).
    assert sorted(phases) == ["compile cuda://0", "compile cuda://0", "compile cuda://1"]


def test_on_one_gpu_the_dispatches_are_tuned_one_after_another_on_it(tmp_path, monkeypatch):
    ran, state, env, phases = _run_stage(tmp_path, monkeypatch, ("cuda",), (0.5, 0.3, 0.2))
    order = sorted(ran, key=lambda n: ran[n][2])
    assert order == ["d1", "d2", "d3"]
    assert all(ran[a][3] <= ran[b][2] for a, b in zip(order, order[1:]))  # none overlapped
    assert all(devs == ("cuda",) and ctx is env.ctx for devs, ctx, *_ in ran.values())
    assert phases == ["compile"] * 3
