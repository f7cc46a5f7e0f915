"""The cuda target and the LLVMGPU TileAndFuse pipeline, on the CPU machine: the problem, typed
attributes read back, and every emitted candidate compiled for sm_80 carrying its config."""

from dataclasses import replace

import pytest
import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from constraints import enumerate_solutions
from pipelines import pipeline_for
from pipelines.llvmgpu_tile_and_fuse import MAX_ACCUMULATOR_REGISTERS, LLVMGPUTileAndFuse, compatible_intrinsics
from tuner.candidates import generate_candidates
from tuner.discovery import discover
from tuner.errors import TargetError
from tuner.compile_stage import EvalSettings, compile_all
from tuner.spec import TRANSFORM_MAIN
from tuner.targets import parse_target
from tests.conftest import SAMPLES, rebuild_from_spec

GPU_SAMPLE = SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir"
PIPE = LLVMGPUTileAndFuse()


@pytest.fixture(scope="module")
def cuda():
    return parse_target("cuda:sm_80")


@pytest.fixture(scope="module")
def gpu_dispatch(cuda):
    [d] = discover(GPU_SAMPLE, cuda, ir.Context())
    return d


def test_cuda_targets():
    t = parse_target("cuda")
    assert "--iree-cuda-target=sm_80" in t.compile_flags and t.device == "cuda"
    assert t.spec_flag == "--iree-preprocessing-transform-spec-filename" and t.spec_entry == TRANSFORM_MAIN
    with pytest.raises(TargetError, match="unknown cuda arch"):
        parse_target("cuda:sm_90")


def test_discovery_reads_the_gpu_target(gpu_dispatch):
    t = gpu_dispatch.target
    assert (t.backend, t.arch) == ("cuda", "sm_80")
    assert t.subgroup_sizes == (32,) and t.max_threads_per_workgroup == 1024
    assert t.max_workgroup_memory_bytes == 166912
    names = {i.name for i in t.mma_intrinsics}
    assert "NV_MMA_SYNC_F32_16x8x16_F16" in names
    assert "TileAndFuse" in gpu_dispatch.default.pipeline
    # WMMA is listed by the target but does not lower through TileAndFuse in 3.13.
    assert [i.name for i in compatible_intrinsics(gpu_dispatch)] == ["NV_MMA_SYNC_F32_16x8x16_F16"]
    assert pipeline_for(gpu_dispatch).name == "llvmgpu_tile_and_fuse"


def test_register_budget_rules_out_the_spilling_config(gpu_dispatch):
    p = PIPE.build_problem(gpu_dispatch)
    s = z3.Solver()
    s.add(*p.constraints)
    assert s.check() == z3.sat
    # The 20.6 ms config: 256x128 workgroup, 8x8 MMA tiles per subgroup (256 accumulators).
    s.add(p.knob("subgroup_m").var == 8, p.knob("subgroup_n").var == 8)
    assert s.check() == z3.unsat


def test_solutions_respect_the_target_limits(gpu_dispatch):
    t = gpu_dispatch.target
    for sol in enumerate_solutions(PIPE.build_problem(gpu_dispatch), 60):
        mma = compatible_intrinsics(gpu_dispatch)[sol["mma_kind"]]
        threads = sol["subgroups_m"] * sol["subgroups_n"] * 32
        wg_m = sol["subgroups_m"] * sol["subgroup_m"] * mma.m
        wg_n = sol["subgroups_n"] * sol["subgroup_n"] * mma.n
        k_tile = sol["reduction_k"] * mma.k
        stages = max(1, sol["prefetch_num_stages"])
        assert threads <= t.max_threads_per_workgroup
        assert (wg_m + wg_n) * k_tile * 2 * stages <= t.max_workgroup_memory_bytes
        assert sol["subgroup_m"] * sol["subgroup_n"] * mma.m * mma.n // 32 <= MAX_ACCUMULATOR_REGISTERS


def test_candidates_compile_to_distinct_executables(cuda, gpu_dispatch, ctx, tmp_path):
    """No two candidates may differ only in options the compiler ignores on this target."""
    candidates = generate_candidates(gpu_dispatch, PIPE, 12, ctx, cuda.spec_entry)
    built = compile_all(candidates, GPU_SAMPLE, cuda, tmp_path, EvalSettings(), ctx)
    hashes = [b.result.binary_hash for b in built]
    assert all(hashes) and len(set(hashes)) == len(hashes)


def test_solution_becomes_typed_attributes(gpu_dispatch, ctx):
    sol = {"mma_kind": 0, "subgroup_m": 4, "subgroup_n": 8, "subgroups_m": 2, "subgroups_n": 2,
           "reduction_k": 4, "prefetch_num_stages": 3, "reorder_workgroups": 1}
    config = PIPE.to_config(gpu_dispatch, sol, ctx)
    with ctx:
        info = ir.Attribute.parse(config.compilation_info)
        lowering = iree_gpu.LoweringConfigAttr(info.lowering_config)
        assert list(lowering.workgroup_tile_sizes) == [128, 128, 0]
        assert list(lowering.reduction_tile_sizes) == [0, 0, 4]
        assert str(lowering.mma_kind) == "#iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_F16>"
        translation = iree_codegen.TranslationInfoAttr(info.translation_info)
        assert list(translation.workgroup_size) == [128, 1, 1] and translation.subgroup_size == 32
        options = iree_gpu.PipelineOptionsAttr(translation.configuration["gpu_pipeline_options"])
        assert options.prefetch_num_stages == 3
        assert "Transpose" in str(options.reorder_workgroups_strategy)
    # The compiler's own unit flags (convert_acc_gemm) are kept.
    assert "convert_acc_gemm" in config.expect_lowering_config


def test_unaligned_tiles_get_padding(gpu_dispatch, ctx):
    d = replace(gpu_dispatch, loop_bounds=(1000, 3000, 2000))
    sol = next(iter(enumerate_solutions(PIPE.build_problem(d), 1)))
    config = PIPE.to_config(d, sol, ctx)
    assert "padding = [" in config.expect_lowering_config  # 1000 has no multiple-of-16 divisor


def test_candidates_compile_for_sm80_and_carry_their_config(cuda, gpu_dispatch, ctx, tmp_path):
    candidates = generate_candidates(gpu_dispatch, PIPE, 8, ctx, cuda.spec_entry)
    assert len(candidates) == 9
    built = compile_all(candidates, GPU_SAMPLE, cuda, tmp_path, EvalSettings(), ctx)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    # GPU candidates are timed dispatch-only: each has its dispatch benchmark module.
    for b in built:
        assert b.dispatch_vmfb.stat().st_size > 0
        assert b.dispatch_function.endswith(gpu_dispatch.name)


def test_unaligned_candidates_compile_for_sm80(cuda, ctx, tmp_path):
    src = tmp_path / "un.mlir"
    src.write_text(GPU_SAMPLE.read_text().replace("4096x4096xf16>, %rhs", "1000x2000xf16>, %rhs")
                   .replace("%rhs: tensor<4096x4096xf16>", "%rhs: tensor<2000x3000xf16>")
                   .replace("4096x4096xf32", "1000x3000xf32")
                   .replace("tensor<4096x4096xf16>, tensor<4096x4096xf16>", "tensor<1000x2000xf16>, tensor<2000x3000xf16>"))
    [d] = discover(src, cuda, ctx)
    assert d.loop_bounds == (1000, 3000, 2000)
    built = compile_all(generate_candidates(d, PIPE, 5, ctx, cuda.spec_entry), src, cuda, tmp_path / "c", EvalSettings(), ctx)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}


def test_preprocessing_spec_rebuilds_the_candidate_with_plain_iree_compile(cuda, gpu_dispatch, ctx, tmp_path):
    tiled = generate_candidates(gpu_dispatch, PIPE, 1, ctx, cuda.spec_entry)[1]
    assert "@__transform_main" in tiled.spec
    configured = rebuild_from_spec(GPU_SAMPLE, tiled, cuda, tmp_path, ctx)
    assert configured.lowering_config == tiled.config.expect_lowering_config
    assert configured.translation_info == tiled.config.expect_translation_info
