"""The support matrix, compiled for real: for every (sample dispatch, target) a pipeline claims,
the first candidates it emits (a sample: 3 to 8 per cell, to keep the suite short) all compile and
each compiled dispatch carries exactly its config (read back from the configured executables);
the cells no pipeline claims stay unclaimed. (The 4096^3 f16 matmul and the NHWC convolutions on
GPUs are compiled in test_llvmgpu_pipeline, test_rocm and test_convolution; the NCHW convolution
here.)"""

from dataclasses import replace

import pytest

from pipelines import pipeline_for
from tuner.specs.candidates import generate_candidates
from tuner.discovery.program import discover
from tuner.build.builder import LocalBuilder, build_all
from tuner.core.results import Status
from tuner.targets import parse_target
from tests.conftest import SAMPLES

# On the CPU, enough to cover data tiling and every register-tile shape the preferences produce
# first; on GPUs, a sample of the first candidates (their compiles take longer).
CPU_SAMPLES = sorted(p.name for p in SAMPLES.glob("*_f32.mlir"))
GPU_SAMPLES = ["matmul_transpose_b_2048x4096x1024_f16f16f32.mlir", "generic_contraction_bias_relu_2048x4096x1024_f16f16f32.mlir"]
SUPPORTED = ([(s, "llvm-cpu", None, 8) for s in CPU_SAMPLES]
             + [("conv_2d_nchw_fchw_2x256x34x34_3x3_f16f16f32.mlir", "llvm-cpu", None, 4)]
             + [(s, t, None, 4) for s in GPU_SAMPLES for t in ("cuda", "rocm:gfx942")]
             + [(s, "rocm:gfx942", "llvmgpu_vector_distribute", 4) for s in GPU_SAMPLES]
             + [(GPU_SAMPLES[0], "cuda", "llvmgpu_vector_distribute", 3)]
             + [("attention_8x1024x1024x64_f16.mlir", t, None, 6) for t in ("cuda", "rocm:gfx942")]
             # The shapes BENCHMARKS.md reports on the H100: batch matmul and the large attention.
             + [("batch_matmul_16x1024x1024x1024_f16f16f32.mlir", "cuda", None, 3),
                ("attention_32x4096x4096x64_f16.mlir", "cuda", None, 3)]
             # Channels first: an implicit GEMM with the output channels as M (test_convolution).
             + [("conv_2d_nchw_fchw_2x256x34x34_3x3_f16f16f32.mlir", t, None, 3) for t in ("cuda", "rocm:gfx942")])
UNSUPPORTED = [("attention_8x1024x1024x64_f16.mlir", "llvm-cpu")]


@pytest.mark.slow
@pytest.mark.parametrize("sample,target_name,pipeline_name,count", SUPPORTED, ids=lambda v: str(v))
def test_a_sample_of_candidates_compiles_and_carries_its_config(sample, target_name, pipeline_name, count, ctx,
                                                                 tmp_path):
    target = parse_target(target_name)
    [dispatch] = discover(SAMPLES / sample, target, ctx)
    pipeline = pipeline_for(dispatch, pipeline_name)
    candidates = generate_candidates(dispatch, pipeline, count, ctx, target.spec_entry)
    assert len(candidates) == count + 1 and candidates[0].is_baseline
    built = build_all(LocalBuilder.of(SAMPLES / sample, target, tmp_path, ctx), candidates)
    failures = {b.result.label: b.result.error for b in built if not b.result.ok}
    assert not failures  # OK: compiled, and the config was read back from the compiled dispatch
    for b in built:
        assert b.vmfb is not None and b.vmfb.stat().st_size > 0
    # Each config made its own code: no candidate's binary is the compiler's default's.
    [base] = [b.result.binary_hash for b in built if b.result.is_baseline]
    assert all(b.result.binary_hash != base for b in built if not b.result.is_baseline), \
        [b.result.label for b in built if b.result.binary_hash == base]


@pytest.mark.parametrize("sample,target_name", UNSUPPORTED, ids=lambda v: str(v))
def test_unsupported_cells_are_not_claimed(sample, target_name, ctx):
    [dispatch] = discover(SAMPLES / sample, parse_target(target_name), ctx)
    assert pipeline_for(dispatch) is None


def test_attention_configs_carry_their_decomposition(ctx):
    """An attention candidate sets the op's decomposition_config (its QK and PV matmuls) next to
    its compilation_info, and the read-back checks both."""
    from pipelines import check_config
    from pipelines.base import ConfiguredDispatch

    cuda = parse_target("cuda")
    [d] = discover(SAMPLES / "attention_8x1024x1024x64_f16.mlir", cuda, ctx)
    assert d.kind.value == "attention" and d.op_name == "iree_linalg_ext.online_attention"
    assert (d.batch_dims, d.m_dims, d.n_dims, d.k_dims) == ((0,), (1,), (2,), (3, 4))
    tiled = generate_candidates(d, pipeline_for(d), 1, ctx, cuda.spec_entry)[1]
    [(name, decomposition)] = tiled.config.root_attributes
    assert name == "decomposition_config" and "qk_attrs" in decomposition and "pv_attrs" in decomposition
    # On cuda it goes in at the codegen stage, where the op is the online_attention discovery
    # read: matched by that name and its query, key and value types.
    assert tiled.config.codegen_spec and "@__kernel_config" in tiled.spec
    assert '["iree_linalg_ext.online_attention"]' in tiled.spec and '"decomposition_config"' in tiled.spec
    assert "tensor<8x1024x64xf16>" in tiled.spec
    applied = ConfiguredDispatch(d.op_name, tiled.config.expect_lowering_config, tiled.config.expect_translation_info,
                                 (("decomposition_config", decomposition),))
    assert check_config(tiled.config, applied) == []
    lost = replace(applied, attributes=())  # annotated, then dropped by the compiler
    assert any(p.startswith("decomposition_config is unset") for p in check_config(tiled.config, lost))


@pytest.mark.slow
def test_a_config_that_did_not_take_effect_is_caught(ctx, cpu, tmp_path):
    path = SAMPLES / "matmul_1024x1024x1024_f32.mlir"
    [dispatch] = discover(path, cpu, ctx)
    tiled = generate_candidates(dispatch, pipeline_for(dispatch), 3, ctx)[2]
    assert tiled.config.compilation_info
    baseline = generate_candidates(dispatch, pipeline_for(dispatch), 0, ctx)[0]
    # Ask for the tiled config but ship the empty spec: the read-back must notice.
    sneaky = replace(tiled, spec=baseline.spec)
    [built] = build_all(LocalBuilder.of(path, cpu, tmp_path, ctx), [sneaky])
    assert built.result.status == Status.CONFIG_NOT_APPLIED
    assert "lowering_config is" in built.result.error
