"""The rocm target (compile-only here: no AMD GPU): gfx archs, MFMA intrinsics read from the
target, and every emitted TileAndFuse candidate compiled for gfx942 carrying its config."""

import pytest

from pipelines import pipeline_for
from pipelines.llvmgpu_common import compatible_intrinsics
from tuner.specs.candidates import generate_candidates
from tuner.build.builder import LocalBuilder, build_all
from tuner.discovery.program import discover
from tuner.errors import TargetError
from tuner.targets import parse_target
from tests.conftest import SAMPLES

MATMUL = SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir"
BATCH = SAMPLES / "batch_matmul_16x1024x1024x1024_f16f16f32.mlir"


@pytest.fixture(scope="module")
def gfx942():
    return parse_target("rocm:gfx942")


def test_rocm_targets():
    t = parse_target("rocm")
    assert t.name == "rocm:gfx942" and t.device == "hip" and t.time_dispatch_only
    assert "--iree-rocm-target=gfx942" in t.compile_flags and "--iree-hal-target-device=hip" in t.compile_flags
    assert parse_target("rocm:gfx1100").name == "rocm:gfx1100"
    with pytest.raises(TargetError, match="unknown rocm arch"):
        parse_target("rocm:gfx906")


def test_discovery_reads_mfma_intrinsics(gfx942, ctx):
    [d] = discover(MATMUL, gfx942, ctx)
    assert (d.target.backend, d.target.arch) == ("rocm", "gfx942")
    assert d.target.subgroup_sizes == (64,)
    assert "TileAndFuse" in d.default.pipeline and "MFMA_F32_16x16x16_F16" in d.default.lowering_config
    # Single-block f16 MFMAs only: the multi-block ones (..x16B_, ..x4B_, ..x2B_) do not lower.
    assert [i.name for i in compatible_intrinsics(d)] == ["MFMA_F32_16x16x16_F16", "MFMA_F32_32x32x8_F16"]
    assert pipeline_for(d).name == "llvmgpu_tile_and_fuse"


@pytest.mark.slow
@pytest.mark.parametrize("sample,count", [(MATMUL, 10), (BATCH, 6)], ids=["matmul", "batch_matmul"])
def test_candidates_compile_for_gfx942_and_carry_their_config(gfx942, ctx, tmp_path, sample, count):
    [d] = discover(sample, gfx942, ctx)
    candidates = generate_candidates(d, pipeline_for(d), count, ctx, gfx942.spec_entry)
    assert len(candidates) == count + 1
    built = build_all(LocalBuilder.of(sample, gfx942, tmp_path, ctx), candidates)
    # OK means: compiled, and the configured dispatch read back carries exactly the candidate's
    # lowering_config and translation_info.
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert all(b.dispatch_vmfb.stat().st_size > 0 for b in built)
    # On rocm the pipeline options are knobs: they must change the executable.
    hashes = [b.result.binary_hash for b in built]
    assert len(set(hashes)) == len(hashes)


@pytest.mark.slow
@pytest.mark.parametrize("sample,count", [(MATMUL, 8), (BATCH, 4)], ids=["matmul", "batch_matmul"])
def test_vector_distribute_candidates_compile_for_gfx942(gfx942, ctx, tmp_path, sample, count):
    [d] = discover(sample, gfx942, ctx)
    pipeline = pipeline_for(d, "llvmgpu_vector_distribute")
    candidates = generate_candidates(d, pipeline, count, ctx, gfx942.spec_entry)
    assert len(candidates) == count + 1
    assert all("VectorDistribute" in c.config.expect_translation_info for c in candidates[1:])
    assert all("subgroup_basis" in c.config.expect_lowering_config for c in candidates[1:])
    built = build_all(LocalBuilder.of(sample, gfx942, tmp_path, ctx), candidates)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert len({b.result.binary_hash for b in built}) == len(built)


def test_pipelines_are_chosen_by_name(gfx942, ctx):
    [d] = discover(MATMUL, gfx942, ctx)
    assert pipeline_for(d).name == "llvmgpu_tile_and_fuse"  # the compiler's own choice
    assert pipeline_for(d, "llvmgpu_vector_distribute").name == "llvmgpu_vector_distribute"
    assert pipeline_for(d, "llvmcpu_double_tiling") is None
    with pytest.raises(KeyError, match="unknown pipeline"):
        pipeline_for(d, "magic")
    [cuda_dispatch] = discover(MATMUL, parse_target("cuda"), ctx)
    assert pipeline_for(cuda_dispatch).name == "llvmgpu_tile_and_fuse"  # the compiler's own choice
    assert pipeline_for(cuda_dispatch, "llvmgpu_vector_distribute").name == "llvmgpu_vector_distribute"
