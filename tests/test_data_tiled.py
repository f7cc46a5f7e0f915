"""Data-tiled contractions on llvm-cpu: the linalg.mmt4d that data tiling makes of a matmul is
discovered (its maps, its inner tiles), its configs go on it under early materialization and are
read back from the compiled mmt4d dispatch, and a data-tiled candidate whose flags do not make
its config take is reported as not applied, never timed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipelines import pipeline_for, why_untunable
from pipelines.llvmcpu_double_tiling import MMT4D_TILES, MMT4D_CODEGEN, LLVMCPUDoubleTiling
from pipelines.llvmcpu_mmt4d import CODEGEN_FLAG, LLVMCPUMmt4d
from pipelines.model_flags import DATA_TILING_FLAG, EARLY_MATERIALIZATION
from tests.conftest import write_matmul
from tuner.build.builder import LocalBuilder, build_all
from tuner.discovery.data_tiled import with_data_tiled
from tuner.discovery.program import discover, discover_program
from tuner.discovery.read_back import read_configured
from tuner.core.results import Status
from tuner.specs.candidates import generate_candidates


@pytest.fixture
def matmul(tmp_path):
    # 200 rows: not a multiple of the inner tile, so the outer count is rounded up.
    return write_matmul(tmp_path / "mm.mlir", 200, 256, 64)


def test_the_mmt4d_data_tiling_forms_is_read_with_its_roles_and_inner_tiles(matmul, cpu, ctx):
    [mmt4d] = [d for d in discover(matmul, cpu, ctx, EARLY_MATERIALIZATION) if d.op_name == "linalg.mmt4d"]
    assert (mmt4d.m_dims, mmt4d.n_dims, mmt4d.k_dims) == ((0, 3), (1, 4), (2, 5))
    m1, n1, k1, m0, n0, k0 = mmt4d.loop_bounds
    # Whatever inner tiles the target picks, the outer ones cover the matmul with less than a tile to spare.
    assert (m1 - 1) * m0 < 200 <= m1 * m0 and (n1 - 1) * n0 < 256 <= n1 * n0 and (k1 - 1) * k0 < 64 <= k1 * k0
    assert mmt4d.default.pipeline_id == "iree_cpu.Mmt4dTilingExpert"
    assert isinstance(pipeline_for(mmt4d), LLVMCPUMmt4d)
    # The contraction finds the same op as its data-tiled form.
    [contraction] = discover(matmul, cpu, ctx)
    assert with_data_tiled(contraction, EARLY_MATERIALIZATION, matmul, cpu, ctx).data_tiled == mmt4d


def test_under_late_materialization_the_mmt4d_is_declined_with_why(matmul, cpu, ctx):
    [mmt4d] = [d for d in discover(matmul, cpu, ctx, (DATA_TILING_FLAG,)) if d.op_name == "linalg.mmt4d"]
    assert pipeline_for(mmt4d) is None
    assert "--iree-global-opt-enable-early-materialization" in why_untunable(mmt4d)


def _data_tiled_candidates(matmul, cpu, ctx, count=6):
    """The contraction's flag-alone, generated-code and mmt4d-tiles candidates, as `tune` makes them."""
    [contraction] = discover(matmul, cpu, ctx)
    pipeline = pipeline_for(contraction)
    dispatch = with_data_tiled(contraction, pipeline.data_tiling_flags, matmul, cpu, ctx)
    candidates = generate_candidates(dispatch, pipeline, count, ctx)
    data_tiled = [c for c in candidates if c.config.knobs.get("data_tiling")]
    flag_alone = next(c for c in data_tiled if not c.config.knobs[MMT4D_TILES] and not c.config.knobs[MMT4D_CODEGEN])
    codegen = next(c for c in data_tiled if c.config.knobs[MMT4D_CODEGEN])
    tiled = [c for c in data_tiled if c.config.knobs[MMT4D_TILES]]
    return flag_alone, codegen, tiled


@pytest.mark.slow
def test_a_data_tiled_candidates_config_is_read_back_from_the_compiled_mmt4d(matmul, cpu, ctx, tmp_path):
    _, codegen, tiled = _data_tiled_candidates(matmul, cpu, ctx)
    assert tiled, "the contraction's space offers data-tiled configs beside its own tiles"
    candidate = tiled[0]
    assert set(EARLY_MATERIALIZATION) <= set(candidate.config.flags)
    built = build_all(LocalBuilder.of(matmul, cpu, tmp_path, ctx), [candidate, codegen])
    assert [b.result.status for b in built] == [Status.OK, Status.OK], [b.result.error for b in built]
    # Independently of the tuner's own check: the compiled module's mmt4d carries these outer tiles.
    configured = read_configured((p.read_text() for p in (tmp_path / f"{candidate.id:04d}" / "configs").glob("*.mlir")),
                                 ctx)
    [mmt4d] = [c for c in configured if c.op_name == "linalg.mmt4d"]
    k = candidate.config.knobs
    assert (f"distribution = [{k['mmt4d_distribution_m1']}, {k['mmt4d_distribution_n1']}, 0, 0, 0, 0]"
            in mmt4d.lowering_config)
    assert "Mmt4dTilingExpert" in mmt4d.translation_info and mmt4d.ukernels == ""
    # The generated-code candidate's executable names no microkernel.
    generated = read_configured((p.read_text() for p in (tmp_path / f"{codegen.id:04d}" / "configs").glob("*.mlir")),
                                ctx)
    assert {c.ukernels for c in generated if c.op_name == "linalg.mmt4d"} == {"none"}


@pytest.mark.slow
@pytest.mark.parametrize("route", ["late materialization", "no data tiling", "no codegen flag"])
def test_a_flag_candidate_whose_flags_do_not_take_is_not_applied_and_not_timed(route, matmul, cpu, ctx, tmp_path):
    """Under --iree-opt-data-tiling a spec runs before the mmt4d exists (the config is dropped);
    without the data-tiling flag there is no mmt4d at all; without its ukernels flag the
    generated-code candidate's executable keeps the compiler's default (the microkernel). Each is caught by the read-back."""
    from tuner.evaluation.evaluator import Sequential
    from tuner.core.settings import EvalSettings as Settings
    from tuner.store import ResultStore
    from tuner.versions import compiler_version, runtime_version

    flag_alone, codegen, tiled = _data_tiled_candidates(matmul, cpu, ctx)
    if route == "late materialization":
        wrong = replace(tiled[0], config=replace(tiled[0].config, flags=(DATA_TILING_FLAG,)))
        expected = "lowering_config is"
    elif route == "no data tiling":
        wrong = replace(flag_alone, config=replace(flag_alone.config, flags=()))
        expected = "root op is linalg.matmul, expected linalg.mmt4d"
    else:
        assert CODEGEN_FLAG in codegen.config.flags
        wrong = replace(codegen, config=replace(codegen.config, flags=(DATA_TILING_FLAG,)))
        expected = "the executable's ukernels are unset (the default), expected none"
    program = discover_program(matmul, cpu, ctx)
    store = ResultStore(tmp_path / "r.sqlite", compiler_version(), runtime_version())
    evaluator = Sequential(matmul, cpu, program.workload(program.dispatches[0], matmul), tmp_path / "c", store,
                           Settings(repetitions=1, min_time_s=0.01, confirm_rounds=0, quiet_wait_s=0.0), ctx=ctx)
    baseline = generate_candidates(program.dispatches[0], pipeline_for(program.dispatches[0]), 0, ctx)[0]
    by_id = {r.candidate_id: r for r in evaluator.evaluate([baseline, wrong]).results}
    assert by_id[0].ok
    result = by_id[wrong.id]
    assert result.status == Status.CONFIG_NOT_APPLIED and expected in result.error
    assert result.median_ms is None and not result.times_ms  # reported, never timed


def _result(cid, label, knobs, first_pass):
    from tuner.core.results import Result

    return Result(cid, str(cid), label, cid == 0, knobs, [], Status.OK, median_ms=1.0, first_pass_speedup=first_pass)


def test_tune_says_whether_data_tiling_or_the_contractions_own_tiles_won():
    from tuner.ranking import Ranking
    from tuner.report.outputs import family_verdict

    def data_tiling_verdict(ranking, results):
        return family_verdict(ranking, results, LLVMCPUDoubleTiling.families)

    results = [_result(0, "baseline", {}, None),
               _result(1, "data tiling (mmt4d)", {"data_tiling": True}, 1.9),
               _result(2, "mmt4d wg 2x2 vec 1x1", {"data_tiling": True, MMT4D_TILES: True}, 2.3),
               _result(3, "wg 64x64 vec 8x32 k1", {"data_tiling": False}, 1.4),
               _result(4, "wg 32x32 vec 8x32 k1", {"data_tiling": False}, 1.6)]
    won = Ranking(results[0], tuple(results[1:]), (), results[2], "")
    assert data_tiling_verdict(won, results) == ("data tiling or not: data tiling won (mmt4d wg 2x2 vec 1x1); the "
                                                 "best of its own tiles: wg 32x32 vec 8x32 k1, 1.60x in its first pass")
    lost = Ranking(results[0], tuple(results[1:]), (), results[3], "")
    assert data_tiling_verdict(lost, results).startswith("data tiling or not: its own tiles won (wg 64x64 vec 8x32 k1); "
                                                         "the best of data tiling: mmt4d wg 2x2 vec 1x1, 2.30x")
    neither = Ranking(results[0], tuple(results[1:]), (), None, "")
    assert data_tiling_verdict(neither, results) == ("data tiling or not: neither beat the default; best first passes: "
                                                     "data tiling: mmt4d wg 2x2 vec 1x1, 2.30x; its own tiles: "
                                                     "wg 32x32 vec 8x32 k1, 1.60x")
    # A space of one kind (a convolution, a GPU contraction) says nothing.
    assert data_tiling_verdict(won, [r for r in results if not r.knobs.get("data_tiling")]) == ""
