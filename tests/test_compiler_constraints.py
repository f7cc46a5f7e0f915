"""The compiler's own constraints (IREE's emitted smt.constraints ops): read through the bindings,
checked against this tuner's, used as a source of configs (`--constraints compiler|both`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from conftest import assert_one_error_line, run_cli
from constraints.fast_enumerate import enumerate_space
from pipelines import pipeline_for
from tuner.driver import read_program
from tuner.problem.compiler import emitted_problems, problem_for
from tuner.problem.crosscheck import NATIVE_ONLY, compiler_assignment
from tuner.targets import parse_target
from tuner.tools import find_tool, run_tool

SAMPLES = Path(__file__).resolve().parent.parent / "sample_dispatches"
MATMUL_TB = SAMPLES / "matmul_transpose_b_2048x4096x1024_f16f16f32.mlir"
BUGS = Path(__file__).resolve().parent / "fixtures" / "compiler_bugs"


def _emitted(sample: Path, target: str, pipeline_name: str):
    target_ = parse_target(target)
    _, _, _, ctx, program = read_program(sample, target_, None)
    dispatch = program.dispatches[0]
    pipeline = pipeline_for(dispatch, pipeline_name)
    problem = problem_for(emitted_problems(sample, target_, ctx), dispatch.name, pipeline.compiler_pipeline, target_)
    return dispatch, pipeline, problem, ctx


def test_a_broken_compiler_assertion_is_reported_with_its_message_and_values():
    dispatch, pipeline, problem, _ = _emitted(MATMUL_TB, "cuda:sm_80", "llvmgpu_tile_and_fuse")
    good = next(iter(enumerate_space(pipeline.build_problem(dispatch))))
    mapped = compiler_assignment(pipeline, dispatch, good, problem, problem.intrinsic_indices())
    bad = dict(mapped, wg_0=48)  # 2048 is not a multiple of 48
    said = problem.violations(bad)
    assert any(s.startswith("dim_0 must be divisible by wg_0") and "wg_0=48" in s for s in said), said
    assert problem.violations(dict(mapped, wg_0=mapped["wg_0"])) == problem.violations(mapped)


@pytest.mark.parametrize("target, pipeline_name", [
    ("cuda:sm_80", "llvmgpu_tile_and_fuse"), ("rocm:gfx942", "llvmgpu_tile_and_fuse"),
    ("cuda:sm_80", "llvmgpu_vector_distribute"), ("rocm:gfx942", "llvmgpu_vector_distribute"),
])
@pytest.mark.slow
def test_a_native_config_the_compiler_accepts_materializes_to_the_same_tiles(target, pipeline_name):
    """The mapping of native knobs to the compiler's is checked against the compiler itself: its
    materializer, given the mapped values, builds the tiles, intrinsic and workgroup size that
    this tuner's own lowering builds from the native knobs."""
    dispatch, pipeline, problem, ctx = _emitted(MATMUL_TB, target, pipeline_name)
    accepted = [k for k in enumerate_space(pipeline.build_problem(dispatch))
                if problem.admits(compiler_assignment(pipeline, dispatch, k, problem, problem.intrinsic_indices()))]
    assert accepted
    for knobs in accepted[:: max(1, len(accepted) // 8)]:
        # A knob the native config does not set (VectorDistribute's prefetch stages) takes a
        # value the compiler admits.
        mapped = problem.completed(compiler_assignment(pipeline, dispatch, knobs, problem, problem.intrinsic_indices()))
        theirs = iree_codegen.CompilationInfoAttr(problem.materialize(mapped))
        with ctx:
            ours = iree_codegen.CompilationInfoAttr(ir.Attribute.parse(pipeline.to_config(dispatch, knobs, ctx)
                                                                       .compilation_info))
            a, b = (iree_gpu.LoweringConfigAttr(x.lowering_config) for x in (theirs, ours))
            assert list(a.workgroup_tile_sizes) == list(b.workgroup_tile_sizes), knobs
            assert list(a.reduction_tile_sizes) == list(b.reduction_tile_sizes), knobs
            assert str(a.mma_kind) == str(b.mma_kind)
            assert list(theirs.translation_info.workgroup_size) == list(ours.translation_info.workgroup_size)
            if "subgroup" in b.attributes:
                assert str(a.attributes["subgroup"]) == str(b.attributes["subgroup"])


@pytest.mark.slow
def test_crosscheck_names_each_difference_and_settles_it_by_compiling(tmp_path):
    out = tmp_path / "xc"
    result = run_cli("crosscheck", MATMUL_TB, "--target", "cuda:sm_80", "--pipeline", "llvmgpu_tile_and_fuse",
                     "--limit", "150", "--compile", "1", "--output", out)
    assert result.exit_code == 0, result.output
    [check] = json.loads((out / "crosscheck.json").read_text())
    assert check["native"] > 0 and check["compiler"] == 150 and not check["compiler_complete"]
    native_only = sum(c["count"] for c in check["classes"] if c["side"] == NATIVE_ONLY)
    assert check["both"] + native_only == check["native"]
    for c in check["classes"]:
        assert c["reason"] and c["count"] >= len(c["examples"]) >= 1
        # One example of each class was compiled for real and read back.
        assert len(c["compiled"]) == 1 and c["compiled"][0] in ("ok", "compile_failed", "config_not_applied")


def test_llvm_cpu_has_no_compiler_constraints(tmp_path, small_matmul):
    assert_one_error_line(run_cli("candidates", small_matmul, "--constraints", "compiler"), 2,
                          "IREE 3.13 emits no constraints for llvmcpu_double_tiling")
    native = run_cli("candidates", small_matmul, "--num-candidates", "3")
    both = run_cli("candidates", small_matmul, "--num-candidates", "3", "--constraints", "both")
    assert native.exit_code == both.exit_code == 0
    # the same candidates and table; only the progress lines' elapsed seconds may differ (a busy machine)
    assert _untimed(native.output) == _untimed(both.output)


def _untimed(output: str) -> str:
    return re.sub(r"done, \d+ s", "done, N s", output)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cuda:sm_80", "rocm:gfx942"])
@pytest.mark.parametrize("source", ["compiler", "both"])
def test_candidates_from_the_compiler_constraints_compile_and_carry_their_config(tmp_path, target, source):
    out = tmp_path / "run"
    result = run_cli("tune", MATMUL_TB, "--target", target, "--constraints", source, "--search", "random",
                     "--budget", "3", "--compile-only", "--output", out)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["meta"]["constraints"] == source
    statuses = [c["result"]["status"] for c in manifest["candidates"]]
    # The baseline and up to 3 configs: a duplicate counts against the budget, and the compiler's
    # space is solved for at most 30 s, so on a loaded machine the sample (and its duplicates)
    # differ (3 of 4 once in the full suite on 2 cores).
    assert 3 <= len(statuses) <= 4 and set(statuses) == {"ok"}  # the compiled module carried each config


def test_known_compiler_bug_batch_matmul_crashes_when_emitting_constraints():
    """docs/pipelines.md names this IREE 3.13 bug with this reproducer; when a new IREE fixes it, this fails
    and its table should be measured again."""
    path = BUGS / "batch_matmul_emit_constraints_crash.mlir"
    flags = list(parse_target("cuda:sm_80").compile_flags) + ["--compile-to=executable-configurations", "-o", "-"]
    assert run_tool([find_tool("iree-compile"), str(path), *flags], 300).ok
    crashed = run_tool([find_tool("iree-compile"), str(path), *flags, "--iree-codegen-emit-pipeline-constraints"], 300)
    assert not crashed.ok and "emitTileAndFuseConstraints" in crashed.stderr


@pytest.mark.slow
def test_a_candidate_that_fails_to_build_is_reported_with_the_compiler_constraint_it_breaks(tmp_path, faulty_tools):
    """Candidate 1 is a seed with 16 subgroups (512 threads), which IREE's TileAndFuse
    constraints reject ("sg_num <= 10"); its compile is made to fail."""
    seeds = tmp_path / "seeds.json"
    seeds.write_text(json.dumps([{"name": "sixteen_subgroups", "pipeline": "llvmgpu_tile_and_fuse", "backend": "cuda",
                                  "knobs": {
        "mma_kind": 0, "subgroup_m": 1, "subgroup_n": 1, "subgroups_m": 4, "subgroups_n": 4, "reduction_k": 2,
        "prefetch_num_stages": 2, "reorder_workgroups": 0}}]))
    faulty_tools("iree-compile", "/0001/", "fail")
    result = run_cli("tune", MATMUL_TB, "--target", "cuda:sm_80", "--seeds", seeds, "--budget", "2",
                     "--compile-only", "--output", tmp_path / "run")
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    # Why it failed first (the compiler's error), then what IREE's constraints say of it.
    assert "candidate 1 (" in said and ") compile_failed: " in said
    assert "; IREE's constraints for it: " in said and "sg_num <= 10" in said


GPU_SAMPLES = sorted(p.name for p in SAMPLES.glob("*.mlir") if not p.stem.endswith("_f32"))
# What IREE 3.13 does not emit, and why (docs/pipelines.md, "The compiler's constraints").
NO_CONSTRAINTS = {"attention": "emits no constraints for llvmgpu_vector_distribute_attention",
                  "batch_matmul": "IREE failed emitting its constraints"}  # the crash kept in fixtures/compiler_bugs


@pytest.mark.slow
@pytest.mark.parametrize("target", ["cuda:sm_80", "rocm:gfx942"])
@pytest.mark.parametrize("sample", GPU_SAMPLES)
def test_crosscheck_over_every_gpu_sample(tmp_path, sample, target):
    out = tmp_path / "xc"
    result = run_cli("crosscheck", SAMPLES / sample, "--target", target, "--limit", "50", "--compile", "0",
                     "--output", out)
    expected = next((why for prefix, why in NO_CONSTRAINTS.items() if sample.startswith(prefix)), None)
    if expected:
        assert_one_error_line(result, 2, expected)
        return
    assert result.exit_code == 0, result.output
    checks = json.loads((out / "crosscheck.json").read_text())
    assert checks and all(c["native"] > 0 and c["compiler"] > 0 for c in checks)
    for c in checks:
        if c["both"] is None:  # implicit-GEMM convolutions: the knobs index different loops
            assert sample.startswith(("conv_2d_nhwc", "conv_2d_nchw")) and c["classes"] == []
            continue
        native_only = sum(k["count"] for k in c["classes"] if k["side"] == NATIVE_ONLY)
        assert c["both"] + native_only == c["native"]


def _answering_pipeline():
    """A pipeline whose every hook answers "HOOK of the wrapped pipeline"."""
    import inspect

    from pipelines.base import Pipeline
    from tuner.problem.sources import HOOKS

    class Answering(Pipeline):
        pass

    for hook in HOOKS:
        if hook in ("name", "underlying"):
            continue
        if callable(inspect.getattr_static(Pipeline, hook)):
            setattr(Answering, hook, lambda self, *a, _h=hook, **k: f"{_h} of the wrapped pipeline")
        else:
            setattr(Answering, hook, f"{hook} of the wrapped pipeline")
    return Answering()


def _answer(source, hook: str):
    import inspect

    value = getattr(source, hook)
    if not callable(value):
        return value
    arity = len([p for p in inspect.signature(value).parameters.values() if p.kind == p.POSITIONAL_OR_KEYWORD])
    return value(*["dispatch", {}][:arity]) if arity <= 2 else value("dispatch", {})


# What each source answers itself (its knobs are its own); every other hook is the wrapped one's.
OWN = {"BothSource": {"constraints", "filters_configs", "admits"},
       "CompilerSource": {"constraints", "filters_configs", "admits", "flag_knobs", "optional_knobs", "families",
                          "space_points", "build_problem", "to_config", "features", "maps_to_compiler",
                          "compiler_knobs"}}


@pytest.mark.parametrize("source", ["BothSource", "CompilerSource"])
def test_every_constraint_source_answers_each_pipeline_hook_itself_or_as_the_pipeline_it_wraps(source):
    # (BothSource once forwarded 11 hooks by hand and missed optional_knobs, declines and aliases;
    # CompilerSource forwarded none, so its callers asked `.native` (now `.underlying`) for untimed_alone and the
    # matchers' ops-after rule)
    import tuner.problem.sources as sources

    wrapper = getattr(sources, source)(_answering_pipeline(), problem=None)
    forwarded = [h for h in sources.HOOKS if h not in OWN[source] | {"name", "underlying"}]
    for hook in forwarded:
        assert _answer(wrapper, hook) == f"{hook} of the wrapped pipeline", hook
    for hook in OWN[source] - {"space_points", "build_problem", "to_config", "compiler_knobs", "admits"}:
        assert _answer(wrapper, hook) != f"{hook} of the wrapped pipeline", hook
    assert {"optional_knobs", "declines", "model_flags_for", "untimed_alone", "matches_ops_after",
            "supports"} <= set(sources.HOOKS)
    assert wrapper.name == wrapper.base.name and wrapper.underlying is wrapper.base
