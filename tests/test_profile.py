"""The profile's figures: a dispatch time that cannot be what the dispatch takes in its function
is said and left out; on the CPU, a model whose dispatches read embedded weights gets dispatch
times that add up to the time its command buffers executed."""

from types import SimpleNamespace

import pytest

import tuner.profiling.profile as profiling
from tests.conftest import onnx_examples
from tuner.discovery.program import discover_program
from tuner.input.models import program_source
from tuner.profiling.profile import profile
from tuner.profiling.timing import DispatchTime, Profile, implausible
from tuner.targets import parse_target


def test_a_dispatch_time_longer_than_its_whole_call_is_not_trusted():
    times = {"a": DispatchTime("a", 0.4, 2, "main"),  # 0.8 ms of a 1.0 ms call: plausible
             "b": DispatchTime("b", 161.0, 1, "main"),  # the kind of figure a broken benchmark gives
             "c": DispatchTime("c", 0.6, 1, "other")}  # its entry was not timed: nothing to say
    found = implausible(times, {"main": 1.0})
    assert set(found) == {"b"} and "exceeds the whole call of @main (1.000 ms)" in found["b"]


@pytest.mark.slow
def test_dispatches_reading_embedded_weights_add_up_to_the_model_on_the_cpu(tmp_path, ctx):
    pytest.importorskip("onnx")
    import onnx

    onnx.save(onnx_examples().bert_layer(), tmp_path / "bert.onnx")  # weights are initializers: embedded
    cpu = parse_target("llvm-cpu")
    program = program_source(tmp_path / "bert.onnx", tmp_path, cpu)
    found = discover_program(program, cpu, ctx)
    measured = profile(program, cpu, found, tmp_path / "profile", ctx)
    timed = [d.name for d in found.dispatches if d.name in measured.times]
    assert len(timed) == len(found.dispatches) and measured.untrusted == {}
    # The command buffers' execution is the dispatches and the hand-offs between them. On a busy
    # machine the hand-offs stretch (0.848 at load 4-10, issue 63): most of it, not nearly all.
    assert 0.75 <= measured.busy_coverage("bert_layer") <= 1.1, (measured.busy_ms, measured.times)


def test_a_rerun_reuses_the_profile_of_the_same_program_and_measures_another_again(tmp_path, monkeypatch):
    """A resumed tune-model must choose the dispatches it chose before: the profile is kept beside
    its directory and read back while the program, flags and dispatches are the same."""
    timed = []

    def measure(input_path, target, program, workdir, *args):
        timed.append(input_path.name)  # each call's figures differ, as a device's do
        return Profile({"d0": DispatchTime("d0", 1.0 + len(timed), 1, "main")}, {"main": 9.0}, {}, "designed")

    monkeypatch.setattr(profiling, "profile", measure)
    program = SimpleNamespace(dispatches=[SimpleNamespace(name="d0")], entries={"d0": "main(1024x1024xf32)"})
    source, other = tmp_path / "model.mlir", tmp_path / "other.mlir"
    source.write_text("module {}")
    other.write_text("module { }")
    cpu, said = parse_target("llvm-cpu"), []
    first = profiling.kept_profile(source, cpu, program, tmp_path / "profile", None)
    again = profiling.kept_profile(source, cpu, program, tmp_path / "profile", None, say=said.append)
    assert timed == ["model.mlir"] and again == first and "reusing" in said[0]
    # Another program, other flags or other dispatches are measured again.
    profiling.kept_profile(other, cpu, program, tmp_path / "profile", None)
    profiling.kept_profile(other, parse_target("llvm-cpu"), SimpleNamespace(dispatches=[], entries={}), tmp_path / "profile", None)
    flagged = SimpleNamespace(**{**cpu.__dict__, "compile_flags": (*cpu.compile_flags, "--iree-opt-level=O3")})
    profiling.kept_profile(other, flagged, SimpleNamespace(dispatches=[], entries={}), tmp_path / "profile", None)
    assert timed == ["model.mlir", "other.mlir", "other.mlir", "other.mlir"]
    # The same dispatches called with other sizes (--dynamic-size) are measured again.
    resized = SimpleNamespace(dispatches=program.dispatches, entries={"d0": "main(7x1024xf32)"})
    profiling.kept_profile(source, cpu, program, tmp_path / "sized", None)
    profiling.kept_profile(source, cpu, resized, tmp_path / "sized", None)
    assert timed[-2:] == ["model.mlir", "model.mlir"]
    del timed[-2:]
    # A damaged file is measured again, not a traceback.
    (tmp_path / "profile.json").write_text("{not json")
    profiling.kept_profile(other, flagged, SimpleNamespace(dispatches=[], entries={}), tmp_path / "profile", None)
    assert len(timed) == 5
