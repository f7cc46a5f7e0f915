"""The host's result as a second reference (tuner.stages.host_reference): where the reference
build's own result is off the host's (as IREE 3.13's default CUDA ResNet-50 is), every build is
checked against the host's and that is said; where it agrees, nothing changes. The modules here
are real CPU builds whose results are designed (x times a constant); timings are designed."""

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import iree_compile
from tuner.evaluation.runner import RunSettings, Timing
from tuner.stages.model_timing import compare
from tuner.targets import parse_target

SCALE = """
func.func @f(%x: tensor<64xf32>) -> tensor<64xf32> {
  %c = arith.constant dense<FACTOR> : tensor<64xf32>
  %y = arith.mulf %x, %c : tensor<64xf32>
  return %y : tensor<64xf32>
}
"""


@pytest.fixture(scope="module")
def scaled(tmp_path_factory) -> dict[str, Path]:
    """Modules computing x, x again, and 2x (a right build and a wrong one, depending on the reference)."""
    out = tmp_path_factory.mktemp("scaled")
    modules = {}
    for name, factor in (("default", "1.0"), ("same", "1.0"), ("double", "2.0")):
        source = out / f"{name}.mlir"
        source.write_text(SCALE.replace("FACTOR", factor))
        iree_compile(str(source), *parse_target("llvm-cpu").compile_flags, "-o", str(out / f"{name}.vmfb"))
        modules[name] = out / f"{name}.vmfb"
    x = out / "x.npy"
    np.save(x, np.linspace(-1, 1, 64, dtype=np.float32))
    modules["input"] = x
    return modules


def _compare(scaled, tmp_path, host):
    settings = RunSettings("local-task", "f", (scaled["input"],), checked_type="f32")
    return compare(("default", scaled["default"]), [("same", scaled["same"]), ("double", scaled["double"])], settings,
                   1, tmp_path, timer=lambda vmfb, s: Timing((1.0,)), host=host)


@pytest.mark.slow
def test_a_reference_off_the_hosts_result_is_said_and_builds_are_checked_against_the_host(scaled, tmp_path):
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    cmp = _compare(scaled, tmp_path, host=2 * x)  # the host computes 2x: the default's x is off
    assert "the result of default is off llvm-cpu's on this host (relative error 0.5)" in cmp.reference_check
    assert cmp.failed == {"same": "a different result (relative error 0.5)"}
    assert "double" in cmp.paired and cmp.errors["double"] == 0.0


@pytest.mark.slow
def test_a_reference_that_agrees_with_the_host_is_the_reference_as_before(scaled, tmp_path):
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    for host in (x, None):
        cmp = _compare(scaled, tmp_path, host=host)
        assert cmp.reference_check == ""
        assert set(cmp.failed) == {"double"} and "same" in cmp.paired


@pytest.mark.slow
def test_a_gpu_targets_model_is_built_and_run_on_the_host_once_and_a_cpu_target_needs_no_second_reference(tmp_path, ctx):
    from tests.test_tune_model import MLP
    from tuner.discovery.program import discover_program
    from tuner.stages.base import StageEnv
    from tuner.stages.host_reference import HOST_REFERENCE, host_output
    from tuner.stages.model_client import model_entry

    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    outputs = {}
    for name in ("cuda", "llvm-cpu"):
        target = parse_target(name)
        program = discover_program(model, target, ctx)
        env = StageEnv(model, target, tmp_path / name, ctx, program, model_entry(program, None))
        outputs[name] = host_output(env)
        assert host_output(env) is outputs[name]  # once per run
    assert outputs["llvm-cpu"] is None and not (tmp_path / "llvm-cpu" / HOST_REFERENCE).exists()
    out = outputs["cuda"]
    assert out is not None and np.all(np.isfinite(out)) and (tmp_path / "cuda" / HOST_REFERENCE / "model.vmfb").is_file()
    # It is the model's own result on its inputs, as a plain llvm-cpu build computes it.
    iree_compile(str(model), *parse_target("llvm-cpu").compile_flags, "-o", str(tmp_path / "plain.vmfb"))
    from tuner.evaluation.runner import RunSettings, run_once

    inputs = tuple(sorted((tmp_path / "cuda" / "model-inputs").glob("*.npy")))
    entry = model_entry(discover_program(model, parse_target("cuda"), ctx), None).entry
    assert run_once(tmp_path / "plain.vmfb", RunSettings("local-task", entry, inputs), tmp_path / "plain").ok
    np.testing.assert_array_equal(np.load(next((tmp_path).glob("plain*.npy"))), out)
