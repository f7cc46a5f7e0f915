"""Convolutions as an external implicit-GEMM kernel (tuner.external.conv_kernel,
tuner.external.triton_conv, tuner.rewrite.external_conv): which convolutions the rewrite takes
and which it leaves, the problem it reads from ONNX's Conv, the Relu it takes into the kernel,
the call it makes (one function per problem), the tiles, a kernel that cannot be made as data,
and (slow) that plain iree-compile embeds the kernel as a dispatch of its own.

The kernel's arithmetic is checked by benchmarks/interpret_external_kernels.py (Triton's
interpreter against torch) and on the GPU; the fixture is the PTX Triton 3.9 wrote for its
1x16x8x8 input by 32 3x3 filters padded by 1, with a bias and a ReLU, for sm_90a: six pointer
parameters, X, W, the bias, Y and Triton's two scratch buffers, unread. Nothing here needs
Triton or a GPU."""

from pathlib import Path

import pytest
from iree.compiler import ir

from tuner.external.abi import ExternKernel, KernelAbiError, for_iree
from tuner.external.conv_kernel import ConvProblem, conv_tiles_for
from tuner.external.gemm_kernel import GemmTiles
from tuner.rewrite import EXTERNAL, EXTERNAL_CONV, EXTERNAL_GEMM, rewrite_program
from tuner.rewrite.external_conv import external_convs, problem_of
from tuner.rewrite.external_gemm import external_gemms
from tuner.rewrite.torch_ops import onnx_sites

PTX = (Path(__file__).parent / "fixtures" / "external" / "triton_conv_1x16x8x8_32x3x3_bias_relu.ptx").read_text()
META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _t(shape: list[int], element: str = "f16") -> str:
    return f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>"


def _attributes(**attributes) -> str:
    return ", ".join(f"torch.onnx.{k} = " + (v if isinstance(v, str) else f"{v} : si64" if isinstance(v, int) else
                                            "[" + ", ".join(f"{i} : si64" for i in v) + "]")
                     for k, v in attributes.items())


def _conv(x: list[int], w: list[int], y: list[int], element: str = "f16", bias: bool = True, after: str = "",
          **attributes) -> str:
    """`func.func @f` of one onnx.Conv as iree-import-onnx writes it (then `after`, an op on %y
    named %out, if given)."""
    args = f"%x: {_t(x, element)}, %w: {_t(w, element)}" + (f", %b: {_t([w[0]], element)}" if bias else "")
    operands = "%x, %w, %b" if bias else "%x, %w"
    types = ", ".join([_t(x, element), _t(w, element), *([_t([w[0]], element)] if bias else [])])
    line = f'torch.operator "onnx.{after}"(%y) : ({_t(y, element)}) -> {_t(y, element)}' if after else ""
    return f"""
func.func @f({args}) -> {_t(y, element)}
    attributes {META} {{
  %y = torch.operator "onnx.Conv"({operands}) {{{_attributes(**attributes)}}} : ({types}) -> {_t(y, element)}
  {"%out = " + line if after else ""}
  return {"%out" if after else "%y"} : {_t(y, element)}
}}
"""


def _fixture_kernel(problem: ConvProblem, tiles: GemmTiles) -> ExternKernel:
    """The fixture's kernel for any problem (its PTX is never run here)."""
    bindings = 4 if "row_bias" in problem.epilogue else 3
    m, n, _ = problem.gemm
    return ExternKernel(problem.name, for_iree(PTX, "_conv", problem.name, bindings), bindings, 32 * tiles.warps,
                        0, (-(-n // tiles.bn), -(-m // tiles.bm), problem.group), tiles.label)


def _problem(program: str):
    with ir.Context():
        module = ir.Module.parse(program)
        return problem_of(onnx_sites(module, "Conv", lambda op: True)[0])


def test_a_resnet_3x3_convolution_is_read_as_a_product_of_filters_by_pixels():
    problem = _problem(_conv([8, 256, 14, 14], [256, 256, 3, 3], [8, 256, 14, 14], pads=[1, 1, 1, 1],
                             kernel_shape=[3, 3], strides=[1, 1]))
    assert problem == ConvProblem(8, 256, 14, 14, 256, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), 1, "f16", ("row_bias",))
    # m = filters, n = 8 images x 196 pixels, k = 256 channels x 9 taps
    assert problem.gemm == (256, 1568, 2304) and problem.name == "conv_8x256x14x14_256x3x3_p1x1x1x1_f16_row_bias"


def test_a_grouped_strided_convolution_is_one_product_a_group_with_the_output_onnx_gives_it():
    # RegNet-style: 64 channels in groups of 16, stride 2, padded 1: (112 + 2 - 3) // 2 + 1 = 56
    problem = _problem(_conv([8, 64, 112, 112], [64, 16, 3, 3], [8, 64, 56, 56], bias=False, group=4,
                             pads=[1, 1, 1, 1], strides=[2, 2]))
    assert problem.out == (56, 56) and problem.group == 4 and problem.epilogue == ()
    assert problem.gemm == (16, 8 * 56 * 56, 16 * 9)


@pytest.mark.parametrize("x, w, y, attributes, why", [
    ([1, 8, 8, 8], [8, 1, 3, 3], [1, 8, 8, 8], {"group": 8, "pads": [1, 1, 1, 1]}, "a depthwise convolution"),
    ([1, 8, 8, 8], [8, 8, 3, 3], [1, 8, 8, 8], {"auto_pad": '"SAME_UPPER"'}, "padding left to auto_pad"),
    ([1, 8, 8, 8], [8, 8, 3, 3], [1, 8, 6, 6], {"element": "f32"}, "an f32 convolution"),
    ([1, 8, 8, 8], [8, 8, 3, 3], [1, 8, 7, 7], {}, "a result of another shape than the attributes give"),
])
def test_convolutions_the_kernel_does_not_take_are_left_alone(x, w, y, attributes, why):
    element = attributes.pop("element", "f16")
    program = _conv(x, w, y, element, **attributes)
    assert _problem(program) is None, why
    with ir.Context():
        module = ir.Module.parse(program)
        assert external_convs(module, _fixture_kernel) == [], why


@pytest.mark.parametrize("after, taken", [("Relu", ("row_bias", "relu")), ("Gelu", ("row_bias", "gelu")),
                                          ("Sigmoid", ("row_bias",))])  # a Sigmoid alone is no SiLU
def test_a_relu_or_gelu_after_the_convolution_is_computed_by_the_kernel(after, taken):
    made = []
    with ir.Context():
        module = ir.Module.parse(_conv([1, 16, 8, 8], [32, 16, 3, 3], [1, 32, 8, 8], after=after, pads=[1, 1, 1, 1]))
        external_convs(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert made[0].epilogue == taken
    assert '"onnx.Conv"' not in text and (f'"onnx.{after}"' in text) == (after == "Sigmoid")


def test_silu_as_the_exporter_writes_it_is_computed_by_the_kernel():
    y = _t([1, 32, 8, 8])
    program = _conv([1, 16, 8, 8], [32, 16, 3, 3], [1, 32, 8, 8], after="Sigmoid", pads=[1, 1, 1, 1]).replace(
        f"  return %out : {y}",
        f'  %silu = torch.operator "onnx.Mul"(%y, %out) : ({y}, {y}) -> {y}\n  return %silu : {y}')
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        external_convs(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert made[0].epilogue == ("row_bias", "silu")
    assert not any(f'"onnx.{op}"' in text for op in ("Conv", "Sigmoid", "Mul"))


def test_convolutions_of_one_shape_call_one_extern_function_with_the_bias_a_binding():
    x, w, b = _t([1, 16, 8, 8]), _t([16, 16, 3, 3]), _t([16])
    conv = (f'torch.operator "onnx.Conv"(%IN, %w, %b) {{{_attributes(pads=[1, 1, 1, 1])}}} : ({x}, {w}, {b}) -> {x}')
    program = f"""
func.func @f(%x: {x}, %w: {w}, %b: {b}) -> {x}
    attributes {META} {{
  %y = {conv.replace("%IN", "%x")}
  %z = {conv.replace("%IN", "%y")}
  return %z : {x}
}}
"""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        done = external_convs(module, lambda p, tiles: made.append(p) or _fixture_kernel(p, tiles))
        text = str(module)
    assert done == ["1x16x8x8_16x3x3_p1x1x1x1_f16_row_bias_nhwc (32x64x16 w4 s3)"] * 2  # 64 pixels: the narrower tile
    assert len(made) == 1 and '"onnx.Conv"' not in text and text.count("hal.dispatch.extern") == 1
    calls = [line for line in text.splitlines() if "call @conv_1x16x8x8_16x3x3_p1x1x1x1_f16_row_bias" in line]
    # the filter given tap-major, [16, 3, 3, 16] (16 channels, steps of 16: one tap's channels a step)
    assert len(calls) == 2 and all("tensor<16xf16>" in c and "tensor<16x3x3x16xf16>" in c for c in calls)
    # a call's two: the filter's (a constant, IREE would fold it) and the image's, channels-last
    assert text.count('"onnx.Transpose"') == 4
    # four bindings (X, W, the bias, Y), the last written
    assert "#hal.pipeline.binding<storage_buffer, ReadOnly>, " * 3 + "#hal.pipeline.binding<storage_buffer>]" in text


@pytest.mark.parametrize("channels_last", [False, True])  # nor the transposes made for it
def test_a_kernel_that_cannot_be_made_leaves_the_convolution_as_it_was(channels_last):
    def source(problem, tiles):
        raise KernelAbiError("_conv reads parameters beyond its bindings: _conv_param_4")

    with ir.Context():
        module = ir.Module.parse(_conv([1, 16, 8, 8], [16, 16, 3, 3], [1, 16, 8, 8], pads=[1, 1, 1, 1]))
        before = str(module)
        assert external_convs(module, source, channels_last=channels_last) == []
        assert str(module) == before


@pytest.mark.parametrize("problem, tiles, why", [
    # 64 filters by 25088 pixels: 64-row tiles, 196 workgroups fill a wave at 64x128
    (ConvProblem(8, 64, 56, 56, 64, 3, 3, pads=(1, 1, 1, 1)), GemmTiles(64, 128, 32, 4, 3), "first to fill a wave"),
    # 32 filters: 32-row tiles, not 64 rows half of zeros
    (ConvProblem(8, 128, 56, 56, 32, 3, 3, pads=(1, 1, 1, 1)), GemmTiles(32, 128, 32, 4, 3), "a group of 32 filters"),
    # 512 filters by 392 pixels: no tile fills a wave; 64x64 makes the most workgroups (56), not
    # the 32-row tiles kept for groups that few
    (ConvProblem(8, 512, 7, 7, 512, 3, 3, pads=(1, 1, 1, 1)), GemmTiles(64, 64, 32, 4, 3), "the most workgroups"),
    # groups of 48 channels: steps of 16, so that a step is one tap's channels; 48 filters a
    # group by 6272 pixels, two groups: 64x128 makes 98 workgroups, 64x64 the first wave (196)
    (ConvProblem(8, 96, 28, 28, 96, 3, 3, pads=(1, 1, 1, 1), group=2), GemmTiles(64, 64, 16, 4, 3), "48 channels"),
])
def test_the_tiles_are_as_tall_as_the_filters_allow_and_fill_a_wave_where_they_can(problem, tiles, why):
    assert conv_tiles_for(problem) == tiles, why


def test_the_gemm_takes_the_pointwise_convolutions_before_the_conv_kernel_takes_the_rest():
    # EXTERNAL's order: the GEMM first, so a 1x1 convolution over 16 channels is a plain matrix
    # product (no gather) and the 3x3 one after it the conv kernel's
    names = [r.name for r in EXTERNAL]
    assert names.index(EXTERNAL_GEMM.name) < names.index(EXTERNAL_CONV.name)
    x, w1, w3, y, b = _t([1, 16, 8, 8]), _t([32, 16, 1, 1]), _t([32, 32, 3, 3]), _t([1, 32, 8, 8]), _t([32])
    program = f"""
func.func @f(%x: {x}, %w1: {w1}, %w3: {w3}, %b: {b}) -> {y}
    attributes {META} {{
  %y = torch.operator "onnx.Conv"(%x, %w1) : ({x}, {w1}) -> {y}
  %z = torch.operator "onnx.Conv"(%y, %w3, %b) {{{_attributes(pads=[1, 1, 1, 1])}}} : ({y}, {w3}, {b}) -> {y}
  return %z : {y}
}}
"""
    gemm_ptx = (Path(__file__).parent / "fixtures" / "external" / "triton_gemm_16x128x64.ptx").read_text()

    def gemm_kernel(problem, tiles):  # A, B, C: the GEMM fixture's three bindings
        return ExternKernel(problem.name, for_iree(gemm_ptx, "_gemm", problem.name, 3), 3, 128, 0, (1, 1, 1), "")

    with ir.Context():
        module = ir.Module.parse(program)
        assert external_gemms(module, gemm_kernel)
        assert external_convs(module, _fixture_kernel) == ["1x32x8x8_32x3x3_p1x1x1x1_f16_row_bias_nhwc (32x64x32 w4 s3)"]
        text = str(module)
    assert "call @gemm_32x64x16_f16(" in text and "call @conv_1x32x8x8_32x3x3_p1x1x1x1_f16_row_bias_nhwc(" in text
    assert '"onnx.Conv"' not in text


@pytest.mark.slow
def test_plain_iree_compile_embeds_the_conv_kernel_as_a_dispatch_of_its_own(tmp_path):
    from tests.conftest import extern_ptx
    from tuner.rewrite import Rewrite

    program = tmp_path / "model.mlir"
    program.write_text(_conv([1, 16, 8, 8], [32, 16, 3, 3], [1, 32, 8, 8], after="Relu", pads=[1, 1, 1, 1]))
    rewrite = Rewrite("external-hopper-conv", lambda m: external_convs(m, _fixture_kernel), "")
    assert rewrite_program(program, rewrite, tmp_path / "rewritten.mlir")
    name = "conv_1x16x8x8_32x3x3_p1x1x1x1_f16_row_bias_relu_nhwc"
    assert extern_ptx(tmp_path / "rewritten.mlir", tmp_path, name) == [for_iree(PTX, "_conv", name, 4)]


def test_a_stems_filter_stays_as_it_lies_where_a_step_is_no_taps_channels():
    # 3 channels: K in the filter's own order, the filter passed as it is
    with ir.Context():
        module = ir.Module.parse(_conv([1, 3, 16, 16], [16, 3, 7, 7], [1, 16, 8, 8], pads=[3, 3, 3, 3], strides=[2, 2]))
        external_convs(module, _fixture_kernel)
        text = str(module)
    assert '"onnx.Transpose"' not in text and "tensor<16x3x7x7xf16>" in text


def test_the_kernel_is_given_the_image_nhwc_where_a_step_is_one_taps_channels():
    made = []
    with ir.Context():
        module = ir.Module.parse(_conv([1, 16, 8, 6], [32, 16, 3, 3], [1, 32, 8, 6], pads=[1, 1, 1, 1]))
        done = external_convs(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert made[0].channels_last and done == ["1x16x8x6_32x3x3_p1x1x1x1_f16_row_bias_nhwc (32x64x16 w4 s3)"]
    call = next(line for line in text.splitlines() if "call @conv_1x16x8x6_32x3x3_p1x1x1x1_f16_row_bias_nhwc" in line)
    # X as [N, H, W, C] and the filter as [F, KH, KW, CG], each a transpose; Y stays NCHW
    assert "tensor<1x8x6x16xf16>" in call and "tensor<32x3x3x16xf16>" in call and "-> tensor<1x32x8x6xf16>" in call
    assert text.count('"onnx.Transpose"') == 2 and text.count("[0 : si64, 2 : si64, 3 : si64, 1 : si64]") == 2


def test_the_nchw_experiment_gives_the_image_as_it_lies_and_only_the_filter_tap_major():
    made = []
    with ir.Context():
        module = ir.Module.parse(_conv([1, 16, 8, 6], [32, 16, 3, 3], [1, 32, 8, 6], pads=[1, 1, 1, 1]))
        done = external_convs(module, lambda p, t: made.append(p) or _fixture_kernel(p, t), channels_last=False)
        text = str(module)
    assert not made[0].channels_last and done == ["1x16x8x6_32x3x3_p1x1x1x1_f16_row_bias (32x64x16 w4 s3)"]
    call = next(line for line in text.splitlines() if "call @conv_1x16x8x6_32x3x3_p1x1x1x1_f16_row_bias(" in line)
    assert "tensor<1x16x8x6xf16>" in call and "tensor<32x3x3x16xf16>" in call and text.count('"onnx.Transpose"') == 1


def test_a_stems_image_stays_nchw():
    made = []
    with ir.Context():
        module = ir.Module.parse(_conv([1, 3, 16, 16], [16, 3, 7, 7], [1, 16, 8, 8], pads=[3, 3, 3, 3], strides=[2, 2]))
        external_convs(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert not made[0].channels_last and '"onnx.Transpose"' not in text
