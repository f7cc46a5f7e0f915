"""The profile's figures: a dispatch time that cannot be what the dispatch takes in its function
is said and left out; on the CPU, a model whose dispatches read embedded weights gets dispatch
times that add up to the time its command buffers executed."""

import pytest

from tests.conftest import onnx_examples
from tuner.discovery.program import discover_program
from tuner.input.models import program_source
from tuner.profiling.profile import profile
from tuner.profiling.timing import DispatchTime, implausible
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
    # The command buffers' execution is the dispatches and the hand-offs between them.
    assert 0.85 <= measured.busy_coverage("bert_layer") <= 1.1, (measured.busy_ms, measured.times)
