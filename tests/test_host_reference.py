"""The host's result as a second reference (tuner.stages.host_reference): where the reference
build's own result is off the host's (as IREE 3.13's default CUDA ResNet-50 is), every build is
checked against the host's and that is said; where it agrees, nothing changes. The modules here
are real CPU builds whose results are designed (x times a constant); timings are designed."""

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import iree_compile
from tuner.evaluation.runtime_tools import ModuleRun, Timing
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
    settings = ModuleRun("local-task", "f", (scaled["input"],), checked_type="f32")
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
    from tuner.evaluation.runtime_tools import ModuleRun, run_once

    inputs = tuple(sorted((tmp_path / "cuda" / "model-inputs").glob("*.npy")))
    entry = model_entry(discover_program(model, parse_target("cuda"), ctx), None).entry
    assert run_once(tmp_path / "plain.vmfb", ModuleRun("local-task", entry, inputs), tmp_path / "plain").ok
    np.testing.assert_array_equal(np.load(next((tmp_path).glob("plain*.npy"))), out)
    # The dispatch tunings take it as a pair of files: the inputs it ran on and its result.
    from tuner.stages.host_reference import host_reference

    env = StageEnv(model, parse_target("cuda"), tmp_path / "cuda", ctx, discover_program(model, parse_target("cuda"), ctx),
                   model_entry(discover_program(model, parse_target("cuda"), ctx), None))
    ref = host_reference(env)
    assert ref is not None and ref.inputs == tmp_path / "cuda" / "model-inputs"
    np.testing.assert_array_equal(np.load(ref.result), out)


class _Outputs:
    """A runner whose builds compute designed results (by candidate id) and time at 1 ms."""

    def __init__(self, outputs: dict[int, np.ndarray]) -> None:
        self.outputs = outputs

    def identity(self, device):
        return device

    def timing_identity(self, device, dispatch_only, batch):
        return "model"

    def benchmark(self, b, settings):
        from tuner.tools import ToolRun

        return Timing((1.0, 1.0, 1.0)), ToolRun(("bench",), 0, "", "", 0.0)

    def output(self, b, settings):
        from tuner.tools import ToolRun

        return ToolRun(("run",), 0, "", "", 0.0), self.outputs[b.result.candidate_id]


def _measure(outputs: dict[int, np.ndarray], host, out_type="f16", dispatch_type=None):
    """Each build's result under a Measurer given `host` (the baseline, id 0, first); the model's
    checked result is of `out_type`, the tuned dispatch's own result of `dispatch_type` (the same
    where None)."""
    from tuner.evaluation.measure import Built, Measurer
    from tuner.core.results import Result, Status

    measurer = Measurer(ModuleRun("cuda", "f", (), checked_type=out_type), runner=_Outputs(outputs), host=host)
    built = lambda i: Built(Result(i, f"k{i}", "c", i == 0, {}, [], Status.OK), Path(f"/m{i}.vmfb"),  # noqa: E731
                            dispatch_type or out_type,
                            None, (), ())
    return {i: measurer.measure(built(i), "cuda") for i in sorted(outputs)}


def test_a_dispatch_whose_default_is_off_the_host_gets_its_candidates_checked_against_the_host():
    # The default computes 2x where the host computes x (relative error ||x|| / ||x|| = 1): a
    # candidate computing 1.02x is right (within the host's slack of 10 x 1e-2 for f16), one
    # computing the default's 2x is wrong.
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    results = _measure({0: 2 * x, 1: x * 1.02, 2: 2 * x}, host=x)
    base = results[0]
    assert base.ok and base.median_ms == 1.0 and base.relative_error == pytest.approx(1.0)
    assert "off llvm-cpu's on this host (relative error 1)" in base.error
    assert results[1].ok and results[1].relative_error == pytest.approx(0.02, rel=1e-3)
    assert results[2].status.value == "wrong_numerics" and "against llvm-cpu's result exceeds 1e-01" in results[2].error


def test_a_models_f16_result_is_checked_at_f16s_tolerance_though_the_tuned_matmul_sums_in_f32():
    # A BERT-large-sized f16 layer on the H100: the default is 0.087 off llvm-cpu's (within f16's
    # 1e-2 x 10), and every candidate of its f16 x f16 -> f32 matmuls computed the same result.
    # Held to f32's 1e-4 x 10, the default was called off the host and every candidate wrong.
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    results = _measure({0: x * 1.087, 1: x * 1.087, 2: x * 1.087 * 1.02}, host=x, out_type="f16", dispatch_type="f32")
    assert results[0].ok and not results[0].error
    assert results[1].ok and results[1].relative_error == 0.0
    assert results[2].status.value == "wrong_numerics" and "against the baseline's result exceeds 1e-02" in results[2].error


def test_a_default_whose_result_is_not_finite_is_still_timed_where_the_host_gives_a_reference():
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    results = _measure({0: np.full_like(x, np.nan), 1: x}, host=x)
    assert results[0].ok and results[0].relative_error == float("inf") and results[1].ok


def test_a_default_that_agrees_with_the_host_stays_the_reference_with_the_usual_tolerance():
    # The default is 3% off the host: within the host's slack, so it is the reference, and a
    # candidate 3% off the default is wrong at f16's 1e-2 (the host would have let it pass).
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    results = _measure({0: x * 1.03, 1: x * 1.03 * 1.03, 2: x * 1.03}, host=x)
    assert results[0].ok and not results[0].error and results[0].relative_error is None
    assert results[1].status.value == "wrong_numerics" and "against the baseline's result exceeds 1e-02" in results[1].error
    assert results[2].ok and results[2].relative_error == 0.0


@pytest.mark.slow
def test_the_device_half_of_two_machines_checks_against_the_host_result_the_plan_carries(scaled, tmp_path):
    """`benchmark DIR` on a whole-model step: the plan names the compile machine's llvm-cpu
    result, and the default that is off it is said and the build that agrees with it is timed."""
    import json
    import shutil

    from tuner.core.settings import EvalSettings
    from tuner.discovery.workload import TensorSpec, Workload
    from tuner.errors import InputError
    from tuner.stages.plan import ModelPlan, run_plan

    for name in ("default", "double", "input"):
        shutil.copy(scaled[name], tmp_path / scaled[name].name)
    np.save(tmp_path / "host.npy", 2 * np.linspace(-1, 1, 64, dtype=np.float32))
    spec = TensorSpec((64,), "f32")
    plan = ModelPlan("validate", "local-task", Workload("f", (spec,), (spec,)).to_json(), ["x.npy"], rounds=1,
                     reference=["default", "default.vmfb"], variants=[["double", "double.vmfb"]], key="k",
                     host="host.npy", files=["x.npy", "default.vmfb", "double.vmfb", "host.npy"])
    plan.write(tmp_path)
    fast = EvalSettings(repetitions=1)
    run_plan(tmp_path, settings=fast)
    measured = json.loads((tmp_path / plan.measured).read_text())
    assert "the result of default is off llvm-cpu's on this host" in measured["reference_check"]
    assert measured["failed"] == {} and "double" in measured["ratios"]
    # A plan naming a host result that is not one is one clear error, never a traceback.
    (tmp_path / "host.npy").write_bytes(b"not npy")
    with pytest.raises(InputError, match="not the host's result"):
        run_plan(tmp_path, settings=fast)


@pytest.mark.slow
def test_the_compile_half_of_two_machines_carries_the_host_result_on_gpu_targets_only(tmp_path, ctx):
    from tests.test_tune_model import MLP
    from tuner.discovery.program import discover_program
    from tuner.stages.base import StageEnv
    from tuner.stages.builtin import build_once
    from tuner.stages.host_reference import host_reference
    from tuner.stages.model_client import model_entry
    from tuner.stages.two_machine import whole_model_plan
    from tuner.stages.variants import Variant

    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    for name in ("cuda", "llvm-cpu"):
        target = parse_target(name)
        program = discover_program(model, target, ctx)
        env = StageEnv(model, target, tmp_path / name, ctx, program, model_entry(program, None))
        default = build_once(env, Variant("default"))
        plan = whole_model_plan(env, "validate", default, default, 0)
        if name == "llvm-cpu":
            assert plan.host == "" and host_reference(env) is None
            continue
        assert plan.host == "host-reference/result.npy" and plan.host in plan.files
        np.testing.assert_array_equal(np.load(tmp_path / name / plan.host), np.load(host_reference(env).result))


@pytest.mark.parametrize("default_off_host", [True, False])
def test_a_right_tuned_model_slower_than_a_wrong_default_is_the_result(default_off_host):
    """Designed comparison: the tuned model 0.95x the default in each of 4 rounds. Where the
    default's result is off llvm-cpu's and the tuned model's is not (it was timed), the tuned
    model is the result and the verdict says why; where the default is right, the default is."""
    from tuner.core.comparison import Paired
    from tuner.stages.base import ModelState
    from tuner.stages.merge import conclude
    from tuner.stages.model_timing import Comparison

    check = ("the result of default is off llvm-cpu's on this host (relative error 1.1): every build is checked "
             "against llvm-cpu's") if default_off_host else ""
    final = Comparison((1.0,) * 5, {"tuned": Paired((0.95,) * 4)}, {"tuned": (1.05,) * 4}, {"tuned": 8e-4},
                       reference_check=check)
    state = conclude(ModelState(flags=("--x",), rewrites=("r",), source=Path("p.mlir")), final, "tuned")
    if default_off_host:
        assert state.flags == ("--x",) and state.rewrites == ("r",) and state.figure.speedup == pytest.approx(0.95)
        assert state.verdict.startswith("the result of default is off llvm-cpu's on this host (relative error 1.1), "
                                        "and the tuned model's is not: the tuned model is the result, though 0.95x")
    else:
        assert state.flags == () and state.rewrites == () and state.source is None
        assert "the default is the result" in state.verdict


class _Slow(_Outputs):
    """A runner whose tool runs take `seconds` by candidate id, recording the timeout each got."""

    def __init__(self, outputs, seconds):
        super().__init__(outputs)
        self.seconds, self.timeouts = seconds, {}

    def output(self, b, settings):
        from tuner.tools import ToolRun

        i = b.result.candidate_id
        self.timeouts[i] = settings.timeout_s
        hung = self.seconds[i] > settings.timeout_s
        return (ToolRun(("iree-run-module",), -9 if hung else 0, "", "", min(self.seconds[i], settings.timeout_s),
                        timed_out=hung), None if hung else self.outputs[i])


def test_a_candidate_runs_at_most_twenty_times_the_baselines_run_and_never_under_half_a_minute():
    # The held-out UNet block on the H100: a candidate's iree-run-module ran past the 120 s
    # timeout where the baseline's run took seconds. Baseline 2 s: candidates get 40 s; 0.1 s:
    # the 30 s floor; 10 s: the run's own 120 s timeout, which is lower than 200 s.
    from tuner.evaluation.measure import Built, Measurer
    from tuner.core.results import Result, Status

    x = np.linspace(-1, 1, 64, dtype=np.float32)
    for baseline_s, bound in ((2.0, 40.0), (0.1, 30.0), (10.0, 120.0)):
        runner = _Slow({0: x, 1: x, 2: x}, {0: baseline_s, 1: 1.0, 2: 500.0})
        measurer = Measurer(ModuleRun("cuda", "f", (), timeout_s=120.0, checked_type="f32"), runner=runner)
        built = lambda i: Built(Result(i, f"k{i}", "c", i == 0, {}, [], Status.OK), Path(f"/m{i}.vmfb"),  # noqa: E731
                                "f32", None, (), ())
        results = {i: measurer.measure(built(i), "cuda") for i in range(3)}
        assert runner.timeouts == {0: 120.0, 1: bound, 2: bound}
        assert results[1].ok and results[2].status == Status.RUN_TIMEOUT, results[2]


@pytest.mark.parametrize("tuned, choices, result", [(1.16, 1.46, "choices"), (1.6, 1.2, "tuned")])
def test_the_conclusion_keeps_the_fastest_of_the_default_the_choices_alone_and_the_tuned_model(tuned, choices, result):
    """Issue 60: the tuned model 1.16x the default and the model-wide choices alone 1.46x in the
    same 2 rounds (the dispatch configs 0.79x on top, slower in both) left the configs in the
    spec. The merge's own rule now applies to what it kept: the choices alone are the result, the
    configs dropped and said so; where the configs add to the choices, the tuned model stays."""
    from tuner.core.comparison import Paired
    from tuner.stages.base import DispatchOutcome, ModelState
    from tuner.stages.merge import conclude
    from tuner.stages.model_timing import Comparison

    final = Comparison((1.0,) * 3, {"tuned": Paired((tuned,) * 2), "flags": Paired((choices,) * 2)},
                       {"tuned": (1 / tuned,) * 2, "flags": (1 / choices,) * 2}, {"tuned": 1e-6, "flags": 1e-6})
    before = ModelState(flags=("--x",), rewrites=("r",), source=Path("p.mlir"), kept=("part",),
                        dispatches=(DispatchOutcome("d0", "m8", 0.5, "kept"),))
    state = conclude(before, final, "tuned", "flags")
    assert state.flags == ("--x",) and state.rewrites == ("r",)
    if result == "choices":
        assert state.kept == () and state.figure.speedup == pytest.approx(1.46)
        assert state.figure.configs_speedup == pytest.approx(1.16 / 1.46)
        assert state.verdict.startswith("the model-wide choices alone (the compiler's configs) are the result: 1.46x")
        assert "so none is kept" in state.verdict
        assert state.dispatches[0].status.startswith("dropped: the model-wide choices were faster without")
    else:
        assert state.kept == ("part",) and state.figure.speedup == pytest.approx(1.6)
        assert state.dispatches[0].status == "kept"


def test_when_the_default_is_the_result_no_dispatch_is_said_kept():
    # Issue 60 (minor): "dispatch configs: 1 of 1 tuned kept" beside an empty spec.
    from tuner.core.comparison import Paired
    from tuner.report.outputs import kept_line
    from tuner.stages.base import DispatchOutcome, ModelState
    from tuner.stages.merge import conclude
    from tuner.stages.model_timing import Comparison

    final = Comparison((1.0,) * 5, {"tuned": Paired((0.95,) * 4)}, {"tuned": (1.05,) * 4}, {"tuned": 1e-6})
    state = conclude(ModelState(kept=("part",), dispatches=(DispatchOutcome("d0", "m8", 0.5, "kept"),)), final, "tuned")
    assert state.kept == () and state.dispatches[0].status == "dropped: the tuned model was not faster than the default"
    line = kept_line({"dispatches": [{"name": o.name, "status": o.status} for o in state.dispatches]})
    assert "dispatch configs: 0 of 1 tuned kept" in line


@pytest.mark.parametrize("ratios, kept", [((1.4, 1.3, 1.02, 0.95), False), ((1.4, 1.3, 1.02, 1.05), True)])
def test_a_tuned_model_whose_interval_holds_one_is_no_gain_and_the_default_stays(ratios, kept):
    """Issue 63: a small CNN's "1.21x (0.98-1.49), faster in 3 of 4" was kept and claimed. From four
    rounds the interval is the smallest to the largest ratio: 0.95-1.40 holds 1.0, 1.02-1.40 does not."""
    from tuner.core.comparison import Paired
    from tuner.stages.base import DispatchOutcome, ModelState
    from tuner.stages.merge import conclude
    from tuner.stages.model_timing import Comparison

    final = Comparison((1.0,) * 5, {"tuned": Paired(ratios)}, {"tuned": tuple(1 / r for r in ratios)}, {"tuned": 1e-6})
    before = ModelState(flags=("--x",), rewrites=("r",), source=Path("p.mlir"), kept=("part",),
                        dispatches=(DispatchOutcome("d0", "m8", 0.5, "kept"),))
    state = conclude(before, final, "tuned")
    if kept:
        assert state.flags == ("--x",) and state.kept == ("part",) and "within the noise" not in state.verdict
    else:
        assert state.flags == () and state.rewrites == () and state.source is None and state.kept == ()
        assert state.verdict == ("the tuned model is 1.16x the default (0.95-1.40, a 88% interval from 4 rounds), an "
                                 "interval that holds 1.0: the gain is within the noise, so the default is the result")
        assert state.dispatches[0].status == "dropped: the tuned model's gain was within the noise"


def test_a_conclusion_timed_while_the_default_ran_far_slower_than_earlier_in_the_run_says_it_was_under_load():
    """Issue 63: the README's BERT-base layer claimed 1.61x on a loaded machine (the default at
    241.7 ms in the claim's rounds, 42-44 ms quiet) and results.json said nothing of the load."""
    from tuner.core.comparison import Paired
    from tuner.stages.base import ModelState
    from tuner.stages.merge import conclude
    from tuner.stages.model_timing import Comparison

    final = Comparison((241.7, 240.0, 243.0, 242.0, 241.0), {"tuned": Paired((1.5, 1.6, 1.62, 1.7))},
                       {"tuned": (160.0,) * 4}, {"tuned": 1e-6})
    earlier = [42.0, 44.0, 43.0, 60.0, 250.0, 42.5, 43.5, 44.0]  # the flag stage's and the merge's rounds
    state = conclude(ModelState(flags=("--x",)), final, "tuned", earlier_ms=earlier)
    assert state.flags == ("--x",) and state.figure.load_change == pytest.approx(241.7 / 42.5 - 1, rel=1e-3)
    assert state.verdict.endswith("; measured under load: the default ran 5.7x its quiet time in this run (241.700 ms "
                                  "against 42.500 ms), so the figure holds for that load only: time it again on a "
                                  "quiet machine")
    quiet = conclude(ModelState(flags=("--x",)), final, "tuned", earlier_ms=[230.0, 240.0, 250.0, 245.0])
    assert quiet.figure.load_change is None and "under load" not in quiet.verdict
    assert conclude(ModelState(flags=("--x",)), final, "tuned", earlier_ms=[42.0, 43.0]).figure.load_change is None
