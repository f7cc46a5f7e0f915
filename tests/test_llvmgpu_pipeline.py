"""The cuda target and the LLVMGPU TileAndFuse pipeline, on the CPU machine: the problem, typed
attributes read back, and every emitted candidate compiled for sm_80 carrying its config."""

from dataclasses import replace

import pytest
import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from constraints import enumerate_solutions
from pipelines import pipeline_for
from pipelines.llvmgpu_common import compatible_intrinsics
from pipelines.llvmgpu_tile_and_fuse import LLVMGPUTileAndFuse
from tuner.specs.candidates import generate_candidates
from tuner.discovery.program import discover
from tuner.errors import TargetError
from tuner.build.builder import LocalBuilder, build_all
from tuner.specs.transform import TRANSFORM_MAIN
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


def test_the_target_limits_admit_and_refuse_hand_counted_configs(gpu_dispatch):
    # sm_80: at most 1024 threads and 166912 bytes of shared memory per workgroup (the target's own
    # figures, read back above); mma.sync 16x8x16 f16; 2 prefetch stages on cuda.
    p = PIPE.build_problem(gpu_dispatch)
    base = next(iter(enumerate_solutions(p, 1)))

    def config(sg_m, sg_n, tile_m, tile_n, k):
        return {**base, "subgroups_m": sg_m, "subgroups_n": sg_n, "subgroup_m": tile_m, "subgroup_n": tile_n,
                "reduction_k": k}

    # 4x4 subgroups (512 threads) of 4x8 MMA tiles: a 256x256 workgroup tile (4*4*16, 4*8*8), 128
    # f32 accumulators per thread (4*8*16*8/32); K tile 64: (256 + 256) * 64 * 2 B * 2 stages = 131072 B.
    assert p.admits(config(4, 4, 4, 8, 4))
    # The same with a K tile of 128: 262144 B of shared memory, over 166912.
    assert not p.admits(config(4, 4, 4, 8, 8))
    # 8x8 subgroups are 2048 threads (small tiles, nothing else near a limit).
    assert not p.admits(config(8, 8, 1, 1, 1)) and p.admits(config(8, 4, 1, 1, 1))


@pytest.mark.slow
def test_candidates_compile_to_distinct_executables(cuda, gpu_dispatch, ctx, tmp_path):
    """No two candidates may differ only in options the compiler ignores on this target."""
    candidates = generate_candidates(gpu_dispatch, PIPE, 12, ctx, cuda.spec_entry)
    built = build_all(LocalBuilder.of(GPU_SAMPLE, cuda, tmp_path, ctx), candidates)
    hashes = [b.result.binary_hash for b in built]
    assert all(hashes) and len(set(hashes)) == len(hashes)


def test_solution_becomes_typed_attributes(gpu_dispatch, ctx):
    # prefetch_num_stages 3 is outside cuda's domain ([2]) but to_config builds what it is given.
    sol = {"mma_kind": 0, "subgroup_m": 4, "subgroup_n": 8, "subgroups_m": 2, "subgroups_n": 2,
           "reduction_k": 4, "prefetch_num_stages": 3, "reorder_workgroups": 0}
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
        assert str(options.reorder_workgroups_strategy).endswith("<None>"), options.reorder_workgroups_strategy
    # The workgroup order has one value on every backend (no compiler here acts on another).
    assert [k.domain for k in PIPE.build_problem(gpu_dispatch).knobs if k.name == "reorder_workgroups"] == [(0,)]
    # The compiler's own unit flags (convert_acc_gemm) are kept.
    assert "convert_acc_gemm" in config.expect_lowering_config


def _padding(dispatch, ctx) -> tuple[list, list]:
    """The first valid config's padding, and the full tiles read from its lowering config (M and
    N workgroup tiles, K tile = reduction steps x the intrinsic's K)."""
    sol = next(iter(enumerate_solutions(PIPE.build_problem(dispatch), 1)))
    config = PIPE.to_config(dispatch, sol, ctx)
    with ctx:
        lowering = iree_gpu.LoweringConfigAttr(ir.Attribute.parse(config.compilation_info).lowering_config)
        fields = {n.name: n.attr for n in lowering.attributes}
        padding = [ir.IntegerAttr(v).value for v in ir.ArrayAttr(fields["padding"])] if "padding" in fields else []
        mma_k = int(str(lowering.mma_kind).split("x")[-1].split("_")[0])  # ..._16x8x16_F16 -> 16
        workgroup, reduction = list(lowering.workgroup_tile_sizes), list(lowering.reduction_tile_sizes)
    return padding, [workgroup[0], workgroup[1], reduction[2] * mma_k]


def test_unaligned_tiles_are_padded_to_whole_tiles_and_aligned_ones_are_not(gpu_dispatch, ctx):
    padding, tiles = _padding(replace(gpu_dispatch, loop_bounds=(1000, 3000, 2000)), ctx)  # 1000: no multiple of 16
    assert padding == tiles and all(t > 0 for t in tiles)
    assert _padding(gpu_dispatch, ctx)[0] == []  # the aligned sample: no padding


@pytest.mark.slow
def test_candidates_compile_for_sm80_and_carry_their_config(cuda, gpu_dispatch, ctx, tmp_path):
    candidates = generate_candidates(gpu_dispatch, PIPE, 8, ctx, cuda.spec_entry)
    assert len(candidates) == 9
    built = build_all(LocalBuilder.of(GPU_SAMPLE, cuda, tmp_path, ctx), candidates)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    # GPU candidates are timed dispatch-only: each has its dispatch benchmark module.
    for b in built:
        assert b.dispatch_vmfb.stat().st_size > 0
        assert b.dispatch_function.endswith(gpu_dispatch.name)


@pytest.mark.slow
def test_unaligned_candidates_compile_for_sm80(cuda, ctx, tmp_path):
    src = tmp_path / "un.mlir"
    src.write_text(GPU_SAMPLE.read_text().replace("4096x4096xf16>, %rhs", "1000x2000xf16>, %rhs")
                   .replace("%rhs: tensor<4096x4096xf16>", "%rhs: tensor<2000x3000xf16>")
                   .replace("4096x4096xf32", "1000x3000xf32")
                   .replace("tensor<4096x4096xf16>, tensor<4096x4096xf16>", "tensor<1000x2000xf16>, tensor<2000x3000xf16>"))
    [d] = discover(src, cuda, ctx)
    assert d.loop_bounds == (1000, 3000, 2000)
    built = build_all(LocalBuilder.of(src, cuda, tmp_path / "c", ctx), generate_candidates(d, PIPE, 5, ctx, cuda.spec_entry))
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}


def test_preprocessing_spec_rebuilds_the_candidate_with_plain_iree_compile(cuda, gpu_dispatch, ctx, tmp_path):
    tiled = generate_candidates(gpu_dispatch, PIPE, 1, ctx, cuda.spec_entry)[1]
    assert "@__transform_main" in tiled.spec
    configured = rebuild_from_spec(GPU_SAMPLE, tiled, cuda, tmp_path, ctx)
    assert configured.lowering_config == tiled.config.expect_lowering_config
    assert configured.translation_info == tiled.config.expect_translation_info


@pytest.mark.slow
def test_contraction_configs_take_effect_under_o3_through_the_codegen_stage(cuda, ctx, tmp_path):
    # Under --iree-opt-level=O3 a preprocessing spec's contraction config is not taken on cuda
    # (the compiler's own config was read back); the same config at the codegen stage is.
    from tuner.stages.builtin import with_flags

    o3 = with_flags(cuda, ("--iree-opt-level=O3",))
    [d] = discover(GPU_SAMPLE, cuda, ctx, ("--iree-opt-level=O3",))
    candidates = generate_candidates(d, PIPE, 2, ctx, o3.spec_entry)
    assert all(c.config.codegen_spec for c in candidates[1:])
    built = build_all(LocalBuilder.of(GPU_SAMPLE, o3, tmp_path, ctx), candidates)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert any("--iree-codegen-transform-dialect-library=" in f for f in built[1].result.flags)


def test_a_side_shorter_than_one_mma_tile_is_padded_to_one_tile_and_no_further(cuda, ctx, tmp_path):
    """A classifier over a batch of 8 (ResNet-50's 8x1000x2048): M = 8 is padded to the MMA's 16
    rows, as the compiler's own config does; 32 rows would be 4x the work. Before, the space
    held no config for it."""
    from tests.conftest import write_matmul

    [d] = discover(write_matmul(tmp_path / "fc.mlir", 8, 1000, 2048, "f16"), cuda, ctx)
    problem = PIPE.build_problem(d)
    # NV_MMA_SYNC_F32_16x8x16_F16: 16 rows; N 32 = 1 subgroup of 4 tiles of 8 (1000 pads to 1024).
    one_tile = {"mma_kind": 0, "subgroup_m": 1, "subgroups_m": 1, "subgroup_n": 4, "subgroups_n": 1,
                "reduction_k": 4, "prefetch_num_stages": 2, "reorder_workgroups": 0, "split_k": 1}
    assert problem.admits(one_tile)
    assert not problem.admits({**one_tile, "subgroup_m": 2})  # 32 rows
    assert not problem.admits({**one_tile, "subgroups_m": 2})  # 2 subgroups of 16 rows
    solutions = list(enumerate_solutions(problem, 4))
    assert solutions and all(s["subgroup_m"] * s["subgroups_m"] == 1 for s in solutions)
    # A side as long as one MMA tile or longer keeps the quarter rule: 20 rows may not pad to 32.
    twenty = replace(d, loop_bounds=(20, 1000, 2048))
    assert not PIPE.build_problem(twenty).admits(one_tile)


def test_where_no_tiles_fill_the_gpu_the_first_configs_launch_half_what_the_smallest_do(cuda, ctx, tmp_path):
    """ResNet-50's classifier under O3 (no split-K there): one MMA tile of 16 rows, and at most
    1000 / 8 = 125 workgroups of 8 columns, so 128 cannot be had; asked for half of 125 (62),
    the first configs take 8 or 16 columns (125 or 63 workgroups), not 32 (32) or more."""
    from pipelines.llvmgpu_tile_and_fuse import enough_workgroups
    from pipelines.llvmgpu_gemm_view import gemm_view
    from tests.conftest import write_matmul

    [d] = discover(write_matmul(tmp_path / "fc.mlir", 8, 1000, 2048, "f16"), cuda, ctx)
    o3 = replace(d, flags=("--iree-opt-level=O3",))
    assert enough_workgroups(o3, gemm_view(o3), compatible_intrinsics(o3), 1) == 62
    first = generate_candidates(o3, PIPE, 4, ctx, cuda.spec_entry)[1:]
    widths = {c.config.knobs["subgroups_n"] * c.config.knobs["subgroup_n"] * 8 for c in first}
    assert widths and widths <= {8, 16}
    # A shape the smallest tiles fill the GPU with keeps 128 (the 4096^3 sample).
    assert enough_workgroups(o3, gemm_view(replace(o3, loop_bounds=(4096, 4096, 4096))), compatible_intrinsics(o3), 1) == 128


def test_an_f32_matmul_on_cuda_is_said_untunable_for_its_types_not_for_the_mma_sync_kernels_shape(cuda, tmp_path):
    # Issue 63's kind of message: it said only what the mma.sync kernel takes, also where
    # `--pipeline llvmgpu_tile_and_fuse` was named, though the reason is that no MMA intrinsic
    # of sm_80 takes f32 operands and the compiler runs it on plain threads.
    from pipelines.registry import why_untunable
    from tests.conftest import write_matmul

    [d] = discover(write_matmul(tmp_path / "mm.mlir", 128, 256, 64), cuda, ir.Context())
    named = why_untunable(d, "llvmgpu_tile_and_fuse")
    assert named == ("no MMA intrinsic of sm_80 takes f32 x f32 -> f32: the compiler's config runs it on plain "
                     "threads, which this tuner does not tune")
    assert why_untunable(d).startswith(named + "; the mma.sync kernel takes only f16 x f16 -> f32")
    assert PIPE.declines(gpu_f16 := discover(GPU_SAMPLE, cuda, ir.Context())[0]) is None and PIPE.supports(gpu_f16)
