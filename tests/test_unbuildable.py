"""A model IREE's defaults cannot build or run (tuner/stages/unbuildable.py): the dispatch the
compiler names, the model-wide choice the run starts from, and one line where none helps. The
failing defaults are designed with the faulty tools (tests/conftest.py) where the subject is
what tune-model does with a failure; the dispatch is read from a real compiler failure."""

import pytest

from tuner.core.settings import Listeners, RunOptions, SearchSettings
from tuner.stages import ModelOptions, tune_model
from tuner.stages.variants import failing_dispatch
from tests.conftest import assert_one_error_line, run_cli
from tests.test_tune_model import FAST, MLP

BAD_STRATEGY = """
func.func @mm(%a: tensor<128x64xf16>, %b: tensor<64x256xf16>) -> tensor<128x256xf32> {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x256xf32>
  %f = linalg.fill ins(%c0 : f32) outs(%e : tensor<128x256xf32>) -> tensor<128x256xf32>
  %m = linalg.matmul {compilation_info = #iree_codegen.compilation_info<
      lowering_config = #iree_codegen.lowering_config<tile_sizes = [[64, 64, 32]]>,
      translation_info = #iree_codegen.translation_info<pipeline = #iree_codegen.transform_dialect_codegen
                                                        codegen_spec = @nowhere>>}
      ins(%a, %b : tensor<128x64xf16>, tensor<64x256xf16>) outs(%f : tensor<128x256xf32>) -> tensor<128x256xf32>
  return %m : tensor<128x256xf32>
}
"""


@pytest.mark.slow
def test_a_dispatch_that_fails_in_codegen_is_named_from_the_compilers_diagnostics(tmp_path):
    """A real failure in the codegen stage (a transform strategy that is not there), on cuda."""
    from tuner.targets import parse_target
    from tuner.tools import find_tool, run_tool

    program = tmp_path / "bad.mlir"
    program.write_text(BAD_STRATEGY)
    run = run_tool([find_tool("iree-compile"), str(program), *parse_target("cuda:sm_80").compile_flags,
                    "-o", str(tmp_path / "bad.vmfb")], 300.0)
    assert not run.ok
    assert failing_dispatch(run.stderr) == "mm_dispatch_0_matmul_128x256x64_f16xf16xf32"
    assert failing_dispatch("error: failed to legalize operation") is None  # none named: none said


def _mlp(tmp_path):
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    return model


@pytest.mark.slow
def test_a_model_whose_default_does_not_build_starts_from_the_first_choice_that_builds_and_runs(tmp_path,
                                                                                                  faulty_tools):
    """The default's build fails (a designed compile error); the CPU's first model-wide choice
    (data tiling) builds and runs: the run starts from it, says so in its verdict, and
    model_flags.txt carries its flag."""
    faulty_tools("iree-compile", "variants/default", "fail")
    said = []
    tuning = tune_model(_mlp(tmp_path), "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
                        model=ModelOptions(rounds=1), listen=Listeners(say=said.append), stages=[])
    line = next(s for s in said if s.startswith("IREE's defaults do not build and run the model ("))
    assert "failed to legalize operation (simulated)" in line and "the run tunes from there" in line
    assert tuning.state.verdict.startswith(line)
    flag = line.split("; with ")[1].split(" it does")[0]
    flags_file = (tmp_path / "out" / "model_flags.txt").read_text()
    assert flag in ("data-tiling",) and "--iree-opt-data-tiling" in flags_file, (line, flags_file)


@pytest.mark.slow
def test_a_model_no_choice_makes_build_is_one_line_naming_the_compilers_message(tmp_path, faulty_tools):
    faulty_tools("iree-compile", "/variants/", "fail")
    result = run_cli("tune-model", _mlp(tmp_path), "--output", tmp_path / "out")
    assert_one_error_line(result, 5, "does not build and run with IREE's defaults (iree-compile failed: error: "
                                     "failed to legalize operation (simulated)), nor with any of the")
    # The choices tried, said one by one: the flag stage's, then no constants inlined into dispatches.
    assert "data-tiling: iree-compile failed" in result.output
    assert "no-inlined-constants: iree-compile failed" in result.output


@pytest.mark.slow
def test_a_model_that_builds_and_runs_nowhere_alike_blames_the_device_not_the_model(tmp_path, faulty_tools):
    """Every build compiles and none runs, with one error: the device is said to be the cause."""
    faulty_tools("iree-run-module", "load-check", "fail")
    result = run_cli("tune-model", _mlp(tmp_path), "--output", tmp_path / "out")
    assert_one_error_line(result, 5, "and so does every model-wide choice: the device, not the model")


@pytest.mark.slow
def test_a_default_that_builds_where_the_device_is_missing_says_so_without_trying_any_choice(tmp_path, faulty_tools,
                                                                                             monkeypatch):
    from tuner.stages import unbuildable

    faulty_tools("iree-run-module", "load-check", "fail")
    monkeypatch.setattr(unbuildable, "device_available", lambda device: False)
    result = run_cli("tune-model", _mlp(tmp_path), "--output", tmp_path / "out")
    assert_one_error_line(result, 5, "the runtime finds no local-task on this machine")
    assert "trying the model-wide choices" not in result.output  # no choice built


def test_a_device_is_available_by_what_its_driver_finds(monkeypatch):
    import iree.runtime as rt

    from tuner.evaluation.device_identity import device_available

    class Two:
        def query_available_devices(self):
            return [{"device_id": 1}, {"device_id": 2}]

    monkeypatch.setattr(rt, "get_driver", lambda name: Two())
    assert device_available("cuda") and device_available("cuda://1") and not device_available("cuda://2")
    assert device_available("local-task")

    def missing(name):
        raise ValueError(f"no driver {name}")

    monkeypatch.setattr(rt, "get_driver", missing)
    assert not device_available("cuda")


@pytest.mark.slow
def test_a_model_whose_default_fails_in_one_dispatch_is_built_with_a_config_for_it_in_every_build(tmp_path,
                                                                                                   faulty_tools):
    """The default fails in codegen in one dispatch (designed: every module build of the model
    without a spec fails there, as Swin-T's LayerNorm does under O3 on cuda); a config of the
    tuner's for that dispatch builds it, so the run starts from the default with that config
    pinned: the dispatch stage's candidates, the merge and the tuned model's spec carry it."""
    failing = "mlp_dispatch_0_matmul_128x192x256_f32"
    faulty_tools("iree-compile", "mlp.mlir", f"fail-in:{failing}")
    said = []
    tuning = tune_model(_mlp(tmp_path), "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=2),
                        run=RunOptions(FAST), model=ModelOptions(rounds=1, top=2), listen=Listeners(say=said.append))
    line = next(s for s in said if s.startswith("IREE's defaults do not build the model ("))
    assert failing in line and "every build of the run carries it" in line
    assert tuning.state.verdict.startswith(line)
    spec = (tmp_path / "out" / "model_spec.mlir").read_text()
    flags = (tmp_path / "out" / "model_flags.txt").read_text()
    # The rebuild carries the pinned config (the matcher of the failing dispatch's matmul).
    assert "model_spec.mlir" in flags and "compilation_info" in spec and "128" in spec and "192" in spec
    results = __import__("json").loads((tmp_path / "out" / "results.json").read_text())
    # The failing dispatch is configured in the spec: by its pin, or by its own tuning's winner.
    assert [p["dispatch"] for p in results.get("pinned", [])] + results["kept"].count(failing) * [failing] == [failing]
    # Where the run's time went, by stage.
    assert list(results["stage_seconds"]) == ["flags", "dispatches", "merge"]
    assert all(s >= 0 for s in results["stage_seconds"].values())
    # Both dispatches were tuned: their baselines, whole-model builds on the CPU (each fails
    # without the pin), built and were timed (the pinned dispatch's baseline is its pinned config).
    for o in tuning.state.dispatches:
        assert o.default_ms is not None and not o.status.startswith("not tuned"), o


def test_a_failing_dispatch_that_cannot_be_read_again_is_left_unrepaired_with_why(tmp_path, monkeypatch):
    """Where the dispatch the compiler names cannot be discovered again (here a designed tool
    error), the build stays failed (nothing pinned) and the run says why; nothing is raised."""
    from types import SimpleNamespace

    from tuner.errors import ToolError
    from tuner.stages import base, repair
    from tuner.stages.base import RunCache
    from tuner.stages.ledger import Ledger
    from tuner.stages.variants import BuiltVariant, Variant

    failed = BuiltVariant(Variant("o3"), None, None, (), "iree-compile failed: failed to distribute", failing="m_dispatch_2_x")
    monkeypatch.setattr(repair, "build_once", lambda env, variant: failed)

    def unreadable(*args, **kwargs):
        raise ToolError("iree-compile failed reading the program (designed)")

    monkeypatch.setattr(base, "discover_program", unreadable)
    said: list[str] = []
    env = SimpleNamespace(model=tmp_path / "m.mlir", target=None, ctx=None, cache=RunCache(), say=said.append, budget=None,
                          ledger=Ledger())
    assert repair.pins_for(env, Variant("o3", ("--iree-opt-level=O3",))) == ()
    assert said == ["  m_dispatch_2_x: not repaired (iree-compile failed reading the program (designed))"]


def test_a_build_that_fails_in_one_dispatch_after_another_is_repaired_dispatch_by_dispatch(tmp_path, monkeypatch):
    """Swin-T under O3 on the H200 failed in its first LayerNorm, and with that one pinned in the
    next stage's: each dispatch the build fails in next gets a config pinned in turn, the build
    that compiles carries all of them; where a dispatch's configs leave the build failing in the
    same dispatch, nothing is pinned and the run says which one. Designed builds: a build fails in
    the first of the failing dispatches that no pin covers (or compiles)."""
    from types import SimpleNamespace

    from tuner.stages import repair
    from tuner.stages.base import RunCache
    from tuner.stages.variants import BuiltVariant, Variant

    failing = ["m_dispatch_2_reduction", "m_dispatch_51_reduction", "m_dispatch_53_reduction"]
    unrepairable: set[str] = set()

    def build(env, variant):
        pinned = {p.dispatch.name for p in variant.pinned}
        left = [d for d in failing if d not in pinned or d in unrepairable]
        if not left:
            return BuiltVariant(variant, tmp_path / "m.vmfb", None, ())
        return BuiltVariant(variant, None, None, (), f"failed to distribute (in {left[0]})", failing=left[0])

    dispatches = [SimpleNamespace(name=n) for n in failing]
    config = SimpleNamespace(compilation_info="#config", flags=())
    candidates = [SimpleNamespace(config=config, label=f"c{i}", id=i) for i in range(4)]
    monkeypatch.setattr(repair, "build_once", build)
    monkeypatch.setattr(repair, "formed_dispatches", lambda env, program, flags: dispatches)
    monkeypatch.setattr(repair, "tuning_pipeline", lambda dispatch, pipeline: SimpleNamespace(name="reduction"))
    monkeypatch.setattr(repair, "generate_candidates", lambda *a, **k: candidates)
    said: list[str] = []
    env = SimpleNamespace(model=tmp_path / "m.mlir", target=SimpleNamespace(spec_entry="e", pinned=()), ctx=None,
                          cache=RunCache(), say=said.append, budget=None)
    pins = repair.pins_for(env, Variant("o3", ("--iree-opt-level=O3",)))
    assert [p.dispatch.name for p in pins] == failing
    assert len(said) == 1 and "pinned" in said[0] and all(d in said[0] for d in failing)
    # The flag stage's share of the time budget spent: one dispatch is repaired, then it stops.
    from tuner.stages.time_budget import TimeBudget

    ticks = iter([0.0] + [1000.0] * 100)
    spent = TimeBudget(100.0, clock=lambda: next(ticks))
    spent.begin_flag_stage()
    said.clear()
    assert repair.pins_for(SimpleNamespace(**{**vars(env), "budget": spent}), Variant("o3-late", ("--iree-opt-level=O3",))) == ()
    assert "the flag stage's share of the time budget is spent" in said[0] and failing[1] in said[0]
    # The second one's configs all fail in it again: not repaired, the reason names it.
    unrepairable.add(failing[1])
    said.clear()
    assert repair.pins_for(env, Variant("o3", ("--iree-opt-level=O3",))) == ()
    assert said[0].startswith(f"  {failing[0]}: not repaired (none of 3 reduction configs builds {failing[1]}")
