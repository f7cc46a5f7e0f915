"""The pointwise-conv-as-matmul rewrite (tuner.rewrite.pointwise_conv): which convolutions it
takes, the form it writes (the filter as the MatMul's first operand; the images side by side
where the filter outweighs the pixels), that the rewritten program computes what the
convolutions did, and that IREE then forms a contraction whose M is the output channels (the
form CUDA computes right) where it formed one whose M was the pixels, with no copy of a large
filter per image."""

import numpy as np
import pytest
from iree.compiler import ir

from tests.test_strided_conv_rewrite import PROGRAM, conv_line, cpu_outputs, imported_block
from tuner.rewrite import POINTWISE_CONV_AS_MATMUL, REWRITES, SUBSAMPLE_STRIDED_1X1, combined, rewrite_program
from tuner.rewrite.pointwise_conv import pointwise_convs_as_matmuls
from tuner.targets import parse_target


def _ops(module: ir.Module) -> list[str]:
    """The onnx op names of the function, in order."""
    from tuner.rewrite.torch_ops import ONNX_OP

    block = module.body.operations[0].regions[0].blocks[0]
    return [ir.StringAttr(op.attributes["name"]).value.removeprefix("onnx.") for op in block.operations
            if op.name == ONNX_OP]


def test_only_an_unpadded_unit_stride_1x1_convolution_becomes_a_matmul_of_the_filter_and_the_pixels():
    # PROGRAM's convolutions: 1x1 stride 2, 3x3 stride 2, 1x1 stride 1 (the rewrite's), 1x1 padded.
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        assert pointwise_convs_as_matmuls(module) == ["2x8x9x9 by 16x8x1x1"]
        assert _ops(module) == ["Conv", "Conv", "Reshape", "Reshape", "MatMul", "Reshape", "Add", "Reshape", "Conv"]
        text = str(module)
    matmul = next(line for line in text.splitlines() if '"onnx.MatMul"' in line)
    # The filter [O, C] first, the pixels [N, C, H*W] second: M = output channels.
    assert "(!torch.vtensor<[16,8],f32>, !torch.vtensor<[2,8,81],f32>) -> !torch.vtensor<[2,16,81],f32>" in matmul
    assert "-> !torch.vtensor<[2,16,9,9],f32>" in text.splitlines()[[i for i, line in enumerate(text.splitlines())
                                                                       if '"onnx.Add"' in line][0] + 2]


SMALL_IMAGE = """
func.func @f(%x: !torch.vtensor<[2,64,3,3],f32>, %w: !torch.vtensor<[96,64,1,1],f32>, %b: !torch.vtensor<[96],f32>)
    -> !torch.vtensor<[2,96,3,3],f32> {
  %y = torch.operator "onnx.Conv"(%x, %w, %b) {torch.onnx.kernel_shape = [1 : si64, 1 : si64]} :
      (!torch.vtensor<[2,64,3,3],f32>, !torch.vtensor<[96,64,1,1],f32>, !torch.vtensor<[96],f32>) -> !torch.vtensor<[2,96,3,3],f32>
  return %y : !torch.vtensor<[2,96,3,3],f32>
}
"""


def test_a_filter_larger_than_the_pixels_is_not_copied_per_image_the_images_go_side_by_side():
    # 96 x 64 filter values against 9 pixels of 64 + 96 channels: one 2-D matmul over both
    # images' pixels, between a transpose of the input and one of the result.
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(SMALL_IMAGE)
        assert pointwise_convs_as_matmuls(module) == ["2x64x3x3 by 96x64x1x1"]
        assert _ops(module) == ["Reshape", "Transpose", "Reshape", "Reshape", "MatMul", "Reshape", "Add", "Reshape",
                                "Transpose", "Reshape"]
        text = str(module)
    matmul = next(line for line in text.splitlines() if '"onnx.MatMul"' in line)
    assert "(!torch.vtensor<[96,64],f32>, !torch.vtensor<[64,18],f32>) -> !torch.vtensor<[96,18],f32>" in matmul


def test_a_1x1_convolution_without_a_bias_and_a_program_without_one_are_handled():
    no_bias = PROGRAM.replace(conv_line("d", 1, 0, 1), conv_line("d", 1, 0, 1).replace(", %b)", ")").replace(
        ", !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16,9,9]", ") -> !torch.vtensor<[2,16,9,9]"))
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(no_bias)
        assert pointwise_convs_as_matmuls(module) == ["2x8x9x9 by 16x8x1x1"]
        assert "Add" not in _ops(module)
        without = ir.Module.parse(PROGRAM.replace(conv_line("d", 1, 0, 1), conv_line("d", 3, 1, 1)).replace(
            "%w1: !torch.vtensor<[16,8,1,1],f32>, ", "%w1: !torch.vtensor<[16,8,1,1],f32>, "))
        before = str(without)
        assert pointwise_convs_as_matmuls(without) == [] and str(without) == before


def test_the_gpu_flag_stage_offers_it_after_the_subsample_so_that_together_both_apply():
    gpu = [r.name for r in REWRITES["gpu"]]
    assert gpu.index("subsample-strided-1x1") < gpu.index("pointwise-conv-as-matmul")
    assert "pointwise-conv-as-matmul" not in [r.name for r in REWRITES["cpu"]]


@pytest.mark.slow
def test_the_rewritten_block_computes_what_the_convolutions_did_and_cuda_forms_the_filter_first_contraction(tmp_path, ctx):
    pytest.importorskip("onnx")
    from tuner.discovery.program import discover_program

    cuda = parse_target("cuda:sm_80")
    imported = imported_block(tmp_path)
    both = combined([SUBSAMPLE_STRIDED_1X1, POINTWISE_CONV_AS_MATMUL])
    rewritten = tmp_path / "rewritten.mlir"
    # The strided shortcut is subsampled, then it and the block's two 1x1 convolutions are MatMuls.
    assert rewrite_program(imported, both, rewritten) == [
        "2x32x15x15 stride 2x2", "2x32x15x15 by 16x32x1x1", "2x16x8x8 by 64x16x1x1", "2x32x8x8 by 64x32x1x1"]
    # On cuda the unit-stride 1x1 convolution was a contraction over (pixels, output channels);
    # as a MatMul, batched, its M is the output channels (16 here) and its N the pixels (225).
    before = {d.shape_name for d in discover_program(imported, cuda, ctx).dispatches}
    after = {d.shape_name for d in discover_program(rewritten, cuda, ctx).dispatches}
    assert any(s.startswith("m2x15x15_n16_k32") for s in before), before
    assert any(s.startswith("b2_m16_n225_k32") for s in after), after
    outputs = cpu_outputs({"convolutions": imported, "matmuls": rewritten}, tmp_path)
    # Both sum in f32 and round to f16 once per convolution, in other orders: within f16's rounding.
    scale = float(np.abs(outputs["convolutions"]).max())
    assert scale > 0.1
    np.testing.assert_allclose(outputs["matmuls"], outputs["convolutions"], rtol=0, atol=4e-3 * scale)


@pytest.mark.slow
def test_a_last_stage_block_computes_the_same_result_with_the_images_side_by_side_and_no_filter_copy(tmp_path, ctx):
    """A bottleneck of 64 channels at 3x3 pixels (as a ResNet's last stage, smaller): every 1x1
    filter outweighs its pixels, so each becomes one 2-D matmul over both images' pixels."""
    pytest.importorskip("onnx")
    from tuner.discovery.program import discover_program

    cuda = parse_target("cuda:sm_80")
    imported = imported_block(tmp_path, (2, 64, 3))
    rewritten = tmp_path / "rewritten.mlir"
    assert rewrite_program(imported, combined([SUBSAMPLE_STRIDED_1X1, POINTWISE_CONV_AS_MATMUL]), rewritten) == [
        "2x64x3x3 stride 2x2", "2x64x3x3 by 32x64x1x1", "2x32x2x2 by 128x32x1x1", "2x64x2x2 by 128x64x1x1"]
    names = [d.name for d in discover_program(rewritten, cuda, ctx).dispatches]
    # The 32x64 filter over both images' 9 pixels, the 128x32 one over their 4: one matmul each,
    # no batch; nothing broadcast.
    assert any("_matmul_32x18x64_" in n for n in names) and any("_matmul_128x8x32_" in n for n in names), names
    assert not any("batch_matmul" in n or "broadcast" in n for n in names), names
    outputs = cpu_outputs({"convolutions": imported, "matmuls": rewritten}, tmp_path, (2, 64, 3, 3))
    scale = float(np.abs(outputs["convolutions"]).max())
    assert scale > 0.1
    np.testing.assert_allclose(outputs["matmuls"], outputs["convolutions"], rtol=0, atol=4e-3 * scale)
