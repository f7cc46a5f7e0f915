"""Depthwise convolutions as an external kernel (tuner.external.depthwise_kernel,
tuner.rewrite.external_depthwise): which convolutions the rewrite takes and which it leaves,
the problem it reads from ONNX's Conv, the call it makes (one function per problem, the bias a
binding), a kernel that cannot be made as data, and (slow) that plain iree-compile embeds the
kernel as a dispatch of its own.

The fixture is the PTX Triton 3.9 wrote for `tuner.external.triton_depthwise`'s kernel for a
1x8x8x8 input, a 3x3 filter padded by 1, with its bias (64 pixels, 1 warp) for sm_90a: six
pointer parameters, X, W, the bias, Y and Triton's two scratch buffers, unread. Nothing here
needs Triton or a GPU."""

from pathlib import Path

import pytest
from iree.compiler import ir

from tuner.external.abi import ExternKernel, KernelAbiError, for_iree
from tuner.external.depthwise_kernel import DepthwiseProblem, DepthwiseTiles, depthwise_tiles_for
from tuner.rewrite import EXTERNAL_DEPTHWISE, REWRITES, rewrite_program, rewrites_for
from tuner.rewrite.external_depthwise import external_depthwise_convs, problem_of
from tuner.rewrite.torch_ops import onnx_sites
from tuner.targets import parse_target

PTX = (Path(__file__).parent / "fixtures" / "external" / "triton_depthwise_1x8x8x8_3x3_bias.ptx").read_text()
EXPORTS = Path(__file__).parent / "fixtures" / "exports"


def _conv(x: list[int], w: list[int], y: list[int], element: str = "f16", bias: bool = True, **attributes) -> str:
    """`func.func @f` of one onnx.Conv as iree-import-onnx writes it."""
    def t(shape):
        return f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>"

    attrs = {"torch.onnx.group": f"{attributes.pop('group', x[1])} : si64",
             **{f"torch.onnx.{k}": v if isinstance(v, str) else "[" + ", ".join(f"{i} : si64" for i in v) + "]"
                for k, v in attributes.items()}}
    args = f"%x: {t(x)}, %w: {t(w)}" + (f", %b: {t([w[0]])}" if bias else "")
    operands, types = ("%x, %w, %b", f"{t(x)}, {t(w)}, {t([w[0]])}") if bias else ("%x, %w", f"{t(x)}, {t(w)}")
    return f"""
func.func @f({args}) -> {t(y)}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.Conv"({operands}) {{{', '.join(f'{k} = {v}' for k, v in attrs.items())}}} : ({types}) -> {t(y)}
  return %y : {t(y)}
}}
"""


def _fixture_kernel(problem: DepthwiseProblem, tiles: DepthwiseTiles) -> ExternKernel:
    """The fixture's kernel for any problem (its PTX is never run here)."""
    bindings = 4 if problem.bias else 3
    oh, ow = problem.out
    return ExternKernel(problem.name, for_iree(PTX, "_depthwise", problem.name, bindings), bindings,
                        32 * tiles.warps, 0, (problem.n * problem.c, -(-oh * ow // tiles.pixels), 1), tiles.label)


def _problem(program: str):
    with ir.Context():
        module = ir.Module.parse(program)
        conv = onnx_sites(module, "Conv", lambda op: True)[0]
        return problem_of(conv)


def test_convnexts_7x7_convolution_is_read_with_its_padding_and_bias():
    problem = _problem(_conv([8, 96, 56, 56], [96, 1, 7, 7], [8, 96, 56, 56], pads=[3, 3, 3, 3],
                             kernel_shape=[7, 7], strides=[1, 1], dilations=[1, 1]))
    assert problem == DepthwiseProblem(8, 96, 56, 56, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1), "f16", True)
    assert problem.out == (56, 56) and problem.name == "depthwise_8x96x56x56_7x7_p3x3x3x3_f16_bias"


def test_a_strided_unevenly_padded_convolution_has_the_output_onnx_gives_it():
    # MobileNet-style 5x5, stride 2, padded 1 before and 2 after: (14 + 3 - 5) // 2 + 1 = 7 rows
    problem = _problem(_conv([1, 32, 14, 14], [32, 1, 5, 5], [1, 32, 7, 7], bias=False, pads=[1, 1, 2, 2],
                             strides=[2, 2]))
    assert problem.out == (7, 7) and problem.strides == (2, 2) and problem.pads == (1, 1, 2, 2) and not problem.bias


@pytest.mark.parametrize("x, w, y, attributes, why", [
    ([1, 8, 8, 8], [8, 8, 3, 3], [1, 8, 8, 8], {"group": 1, "pads": [1, 1, 1, 1]}, "a dense convolution"),
    ([1, 8, 8, 8], [16, 1, 3, 3], [1, 16, 8, 8], {"group": 8, "pads": [1, 1, 1, 1]}, "two filters a channel"),
    ([1, 8, 8, 8], [8, 1, 3, 3], [1, 8, 8, 8], {"auto_pad": '"SAME_UPPER"'}, "padding left to auto_pad"),
    ([1, 8, 8, 8], [8, 1, 3, 3], [1, 8, 6, 6], {"element": "si8"}, "an integer convolution"),
])
def test_convolutions_the_kernel_does_not_take_are_left_alone(x, w, y, attributes, why):
    element = attributes.pop("element", "f16")
    program = _conv(x, w, y, element, **attributes)
    assert _problem(program) is None, why
    with ir.Context():
        module = ir.Module.parse(program)
        assert external_depthwise_convs(module, _fixture_kernel) == [], why


def test_convolutions_of_one_shape_call_one_extern_function_with_the_bias_a_binding():
    t, w = "!torch.vtensor<[1,8,8,8],f16>", "!torch.vtensor<[8,1,3,3],f16>"
    program = f"""
func.func @f(%x: {t}, %w: {w}, %b: !torch.vtensor<[8],f16>) -> {t}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.Conv"(%x, %w, %b) {{torch.onnx.group = 8 : si64, torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]}} : ({t}, {w}, !torch.vtensor<[8],f16>) -> {t}
  %z = torch.operator "onnx.Conv"(%y, %w, %b) {{torch.onnx.group = 8 : si64, torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]}} : ({t}, {w}, !torch.vtensor<[8],f16>) -> {t}
  return %z : {t}
}}
"""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        done = external_depthwise_convs(module, lambda p, tiles: made.append(p) or _fixture_kernel(p, tiles))
        text = str(module)
    assert done == ["1x8x8x8_3x3_p1x1x1x1_f16_bias (64 pixels w1)"] * 2
    assert made == [DepthwiseProblem(1, 8, 8, 8, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1), "f16", True)]
    assert '"onnx.Conv"' not in text and text.count("hal.dispatch.extern") == 1
    calls = [line for line in text.splitlines() if "call @depthwise_1x8x8x8_3x3_p1x1x1x1_f16_bias" in line]
    assert len(calls) == 2 and all("tensor<8xf16>" in c and "tensor<8x1x3x3xf16>" in c for c in calls)
    # four bindings (X, W, the bias, Y) on a grid of one workgroup per image's channel
    assert "#hal.pipeline.binding<storage_buffer, ReadOnly>, " * 2 in text and "workgroup_size = [32 : index" in text


def test_a_kernel_that_cannot_be_made_leaves_the_convolution_and_says_why():
    def source(problem, tiles):
        raise KernelAbiError("_depthwise reads parameters beyond its bindings: _depthwise_param_4")

    program = _conv([1, 8, 8, 8], [8, 1, 3, 3], [1, 8, 8, 8], pads=[1, 1, 1, 1])
    with ir.Context():
        module = ir.Module.parse(program)
        before = str(module)
        assert external_depthwise_convs(module, source) == []
        assert str(module) == before


@pytest.mark.parametrize("pixels, tiles", [
    (56 * 56, DepthwiseTiles(512, 4)),  # a large plane: 512 pixels a workgroup, 7 of them
    (14 * 14, DepthwiseTiles(256, 4)),  # the plane in one workgroup, a power of two over it
    (7 * 7, DepthwiseTiles(64, 1)),
    (3 * 3, DepthwiseTiles(32, 1)),     # never under one warp's 32 lanes
])
def test_a_workgroup_takes_the_plane_up_to_512_pixels_64_a_warp(pixels, tiles):
    side = int(pixels ** 0.5)
    assert depthwise_tiles_for(DepthwiseProblem(1, 8, side, side, 1, 1)) == tiles


def test_every_depthwise_convolution_of_the_convnext_export_is_taken(tmp_path):
    pytest.importorskip("onnx")
    from tuner.input.models import program_source

    program = program_source(EXPORTS / "convnext" / "model.onnx", tmp_path, parse_target("llvm-cpu"))
    with ir.Context():
        module = ir.Module.parse(program.read_text())
        convs = onnx_sites(module, "Conv", lambda op: True)
        problems = [problem_of(c) for c in convs]
    # The tiny export: a 4x4 stem, two stages of one block (16 then 32 channels, 7x7 depthwise),
    # one 2x2 downsampling between them; the stem and the downsampling are dense. The tiny
    # export's depthwise convolutions carry no bias operand.
    taken = [p for p in problems if p is not None]
    assert [(p.c, p.kh, p.pads, p.bias, p.element) for p in taken] == [(16, 7, (3, 3, 3, 3), False, "f32"),
                                                                        (32, 7, (3, 3, 3, 3), False, "f32")]
    assert len(problems) - len(taken) == 2


def test_the_rewrite_is_offered_on_cuda_exactly_where_triton_is_installed():
    from importlib.util import find_spec

    assert (EXTERNAL_DEPTHWISE in rewrites_for(parse_target("cuda:sm_80"))) == (find_spec("triton") is not None)
    assert EXTERNAL_DEPTHWISE not in rewrites_for(parse_target("rocm:gfx942"))
    assert EXTERNAL_DEPTHWISE not in REWRITES["cpu"]


@pytest.mark.slow
def test_plain_iree_compile_embeds_the_depthwise_kernel_as_a_dispatch_of_its_own(tmp_path):
    from tests.conftest import extern_ptx
    from tuner.rewrite import Rewrite

    program = tmp_path / "model.mlir"
    program.write_text(_conv([1, 8, 8, 8], [8, 1, 3, 3], [1, 8, 8, 8], pads=[1, 1, 1, 1]))
    rewrite = Rewrite("external-depthwise-conv", lambda m: external_depthwise_convs(m, _fixture_kernel), "")
    assert rewrite_program(program, rewrite, tmp_path / "rewritten.mlir")
    name = "depthwise_1x8x8x8_3x3_p1x1x1x1_f16_bias"
    assert extern_ptx(tmp_path / "rewritten.mlir", tmp_path, name) == [for_iree(PTX, "_depthwise", name, 4)]


def test_the_silu_after_a_depthwise_convolution_is_computed_by_the_kernel():
    t = "!torch.vtensor<[1,8,8,8],f16>"
    program = _conv([1, 8, 8, 8], [8, 1, 3, 3], [1, 8, 8, 8], pads=[1, 1, 1, 1]).replace(
        f"  return %y : {t}",
        f'  %s = torch.operator "onnx.Sigmoid"(%y) : ({t}) -> {t}\n'
        f'  %out = torch.operator "onnx.Mul"(%s, %y) : ({t}, {t}) -> {t}\n  return %out : {t}')
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        done = external_depthwise_convs(module, lambda p, tiles: made.append(p) or _fixture_kernel(p, tiles))
        text = str(module)
    assert made[0].activation == "silu" and done == ["1x8x8x8_3x3_p1x1x1x1_f16_bias_silu (64 pixels w1)"]
    assert not any(f'"onnx.{op}"' in text for op in ("Conv", "Sigmoid", "Mul"))
