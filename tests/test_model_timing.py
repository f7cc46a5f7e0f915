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
