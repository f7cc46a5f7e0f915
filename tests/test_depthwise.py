"""Depthwise convolutions on GPUs (ConvNeXt's 7x7, as torch exports `nn.Conv2d(C, C, 7, groups=C)`):
read as a window with a depth loop and no channel contraction, taken by the GPU window pipeline
(llvmgpu_tile_and_fuse_pooling), its config on a hand-worked solution, and candidates compiled
for real on cuda carrying their configs."""

from pathlib import Path

import numpy as np
import pytest

from pipelines import DispatchKind, pipeline_for
from tuner.discovery.program import discover
from tuner.specs.candidates import generate_candidates
from tuner.targets import parse_target


@pytest.fixture(scope="module")
def depthwise(tmp_path_factory) -> Path:
    """A 7x7 depthwise convolution with padding 3, f16, batch 2, 32 channels of 28x28, as ONNX
    (group = channels) imported as the tuner imports a model."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    from tuner.input.models import program_source

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((32, 1, 7, 7)).astype(np.float16), "weight")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float16), "bias")
    conv = helper.make_node("Conv", ["x", "weight", "bias"], ["y"], group=32, kernel_shape=[7, 7], pads=[3] * 4)
    graph = helper.make_graph([conv], "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 32, 28, 28])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 32, 28, 28])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder = tmp_path_factory.mktemp("depthwise")
    onnx.save(model, folder / "depthwise.onnx")
    return program_source(folder / "depthwise.onnx", folder, parse_target("cuda"))


def _conv(program: Path, ctx):
    [d] = [d for d in discover(program, parse_target("cuda"), ctx) if d.kind == DispatchKind.CONVOLUTION]
    return d


def test_a_depthwise_convolution_is_a_window_over_a_depth_loop_that_the_window_pipeline_takes(depthwise, ctx):
    d = _conv(depthwise, ctx)
    # Loops (n, oh, ow, c, kh, kw): c is read at the filter too (a depth loop), nothing is contracted.
    assert d.loop_bounds == (2, 28, 28, 32, 7, 7)
    assert (d.conv.batch, d.conv.output_image, d.conv.depth, d.conv.filter) == ((0,), (1, 2), (3,), (4, 5))
    assert not d.conv.input_channel and not d.conv.output_channel
    assert pipeline_for(d).name == "llvmgpu_tile_and_fuse_pooling"
    # IREE 3.13's own config: 32 threads over 32 channels of one output pixel (what is tuned away).
    assert "workgroup = [1, 1, 1, 32, 0, 0]" in d.default.lowering_config


def test_the_depthwise_config_tiles_rows_and_columns_and_keeps_the_compilers_reduction_tiles(depthwise, ctx):
    d = _conv(depthwise, ctx)
    pipeline = pipeline_for(d)
    # 8 channels x 4 rows x 4 columns, one element a thread: 128 threads.
    solution = {"workgroup_channels": 8, "workgroup_rows": 4, "workgroup_columns": 4, "thread_channels": 1,
                "thread_columns": 1}
    assert pipeline.build_problem(d).admits(solution)
    # 7 columns a workgroup with 2 a thread do not divide.
    assert not pipeline.build_problem(d).admits({**solution, "workgroup_columns": 7, "thread_columns": 2})
    config = pipeline.to_config(d, solution, ctx)
    assert "workgroup = [1, 4, 4, 8, 0, 0]" in config.expect_lowering_config
    assert "thread = [1, 1, 1, 1, 0, 0]" in config.expect_lowering_config
    assert "reduction = [0, 0, 0, 0, 1, 7]" in config.expect_lowering_config  # the compiler's, kept
    assert "workgroup_size = [128, 1, 1]" in config.expect_translation_info


@pytest.mark.slow
def test_depthwise_candidates_compile_on_cuda_and_carry_their_configs(depthwise, ctx, tmp_path):
    from tuner.stages.variants import SpecPart, Variant, build_variant

    target = parse_target("cuda")
    d = _conv(depthwise, ctx)
    candidates = generate_candidates(d, pipeline_for(d), 3, ctx, target.spec_entry)
    assert len(candidates) >= 3 and candidates[0].is_baseline
    for c in candidates[1:3]:
        built = build_variant(depthwise, Variant(f"c{c.id}", parts=(SpecPart(d, c.config, c.label),)), target,
                              tmp_path / f"c{c.id}", ctx)
        assert built.ok, built.error


def test_the_padding_of_convnexts_depthwise_convolutions_is_offered_fused_away_and_the_convolutions_stay_tuned(
        tmp_path, ctx):
    """The tiny ConvNeXt export (tests/fixtures/exports) with its linears 2-D, as tune-model keeps
    it: under O3 each 7x7 depthwise convolution's input padding is a `slow_memcpy` dispatch of its
    own. The window pipeline offers the padding fused into its producer and into the convolution;
    under either flag no such copy is left and the convolutions are still the pipeline's."""
    pytest.importorskip("onnx")
    from pipelines.model_flags import O3, PAD_INTO_CONSUMER, PAD_INTO_PRODUCER
    from tuner.discovery.program import discover_program
    from tuner.input.models import program_source
    from tuner.rewrite import ND_LINEAR_AS_MATMUL, rewrite_program

    cuda = parse_target("cuda:sm_80")
    exported = Path(__file__).parent / "fixtures" / "exports" / "convnext" / "model.onnx"
    program = tmp_path / "convnext.nd-linear.mlir"
    assert rewrite_program(program_source(exported, tmp_path, cuda), ND_LINEAR_AS_MATMUL, program)

    def formed(flags):
        found = discover_program(program, cuda, ctx, flags)
        windows = [d for d in found.dispatches if d.kind == DispatchKind.CONVOLUTION and pipeline_for(d) is not None
                   and pipeline_for(d).name == "llvmgpu_tile_and_fuse_pooling"]
        return [name for name in found.other_kinds if "slow_memcpy" in name], windows

    copies, windows = formed(O3)
    assert len(copies) == 2 and len(windows) == 2  # one a stage: 16 and 32 channels
    assert all(pipeline_for(d).model_flags_for(d) == (PAD_INTO_PRODUCER, PAD_INTO_CONSUMER) for d in windows)
    for pad in (PAD_INTO_PRODUCER, PAD_INTO_CONSUMER):
        copies, fused = formed((*O3, *pad))
        assert copies == [] and sorted(d.loop_bounds for d in fused) == sorted(d.loop_bounds for d in windows), pad
