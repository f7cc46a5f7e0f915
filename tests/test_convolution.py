"""Convolutions: found through the bindings with their dims by role, and matched by a tuning spec
(`transform.iree.match.convolution` + `dims_equal` on every role, strides and dilations) that
really reaches the compiler."""

from iree.compiler import ir

from pipelines import DispatchKind, pipeline_for
from tuner.discovery import discover, read_configured
from tuner.spec import TRANSFORM_MAIN, build_spec
from tuner.targets import parse_target
from tuner.tools import find_tool, run_tool
from tests.conftest import SAMPLES

CONV = SAMPLES / "conv_2d_nhwc_hwcf_2x34x34x256_3x3x256_f16f16f32.mlir"


def test_discovery_reads_convolution_dims(ctx):
    [d] = discover(CONV, parse_target("cuda"), ctx)
    assert d.kind == DispatchKind.CONVOLUTION and d.loop_bounds == (2, 32, 32, 256, 3, 3, 256)
    c = d.conv
    assert (c.batch, c.output_image, c.output_channel, c.filter, c.input_channel) == ((0,), (1, 2), (3,), (4, 5), (6,))
    assert (c.depth, c.strides, c.dilations) == ((), (1, 1), (1, 1))
    # The implicit-GEMM view: M = output image, N = output channels, K = filter and input channels.
    assert (d.batch_dims, d.m_dims, d.n_dims, d.k_dims) == ((0,), (1, 2), (3,), (4, 5, 6))
    assert "use_igemm_convolution = true" in d.default.translation_info
    assert d.shape_name == "b2_m32x32_n256_k3x3x256_f16f16f32"


def test_a_convolution_spec_reaches_the_compiler(ctx, tmp_path):
    """A hand-written IGEMM config, different from the default, applied through a spec built
    for the discovered convolution, is read back from the compiled dispatch."""
    cuda = parse_target("cuda")
    [d] = discover(CONV, cuda, ctx)
    wanted = ("#iree_gpu.lowering_config<{convert_acc_gemm, mma_kind = #iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_F16>, "
              "promote_operands = [0, 1], reduction = [0, 0, 0, 0, 4], subgroup = [1, 1, 2, 2, 0], "
              "workgroup = [1, 2, 32, 64, 0]}>")
    assert wanted != d.default.lowering_config
    info = f"#iree_codegen.compilation_info<lowering_config = {wanted}, translation_info = {d.default.translation_info}>"
    spec = tmp_path / "spec.mlir"
    spec.write_text(str(build_spec([(d, info)], ctx, TRANSFORM_MAIN)))
    assert "transform.iree.match.convolution" in spec.read_text()
    run = run_tool([find_tool("iree-compile"), str(CONV), *cuda.compile_flags, *cuda.spec_flags(str(spec)),
                    "--compile-to=executable-configurations"], 300)
    assert run.ok, run.stderr
    [configured] = read_configured([run.stdout], ctx)
    with ctx:
        assert configured.lowering_config == str(ir.Attribute.parse(wanted))
    # A spec for another shape leaves the convolution alone.
    from dataclasses import replace

    other = replace(d, loop_bounds=(2, 32, 32, 128, 3, 3, 256))
    spec.write_text(str(build_spec([(other, info)], ctx, TRANSFORM_MAIN)))
    run = run_tool([find_tool("iree-compile"), str(CONV), *cuda.compile_flags, *cuda.spec_flags(str(spec)),
                    "--compile-to=executable-configurations"], 300)
    [configured] = read_configured([run.stdout], ctx)
    assert configured.lowering_config == d.default.lowering_config


def test_no_pipeline_claims_convolutions_yet(ctx):
    for target in ("llvm-cpu", "cuda", "rocm"):
        [d] = discover(CONV, parse_target(target), ctx)
        assert d.kind == DispatchKind.CONVOLUTION and pipeline_for(d) is None
