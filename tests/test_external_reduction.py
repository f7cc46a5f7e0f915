"""Reductions over an image's pixels as an external kernel (tuner.external.reduction_kernel,
tuner.rewrite.external_reduction): the problem read from ONNX's ReduceL2 / ReduceMean / ... over
the middle axes (ConvNeXt-V2's GRN as exported, and after f32-reductions), what is left alone, and
that it is an experiment the flag stage does not offer. The kernel's arithmetic is checked by
benchmarks/interpret_external_kernels.py; the PTX here is the kernel's own for a small problem,
compiled by Triton on the CPU (never run)."""

from pathlib import Path

import pytest
from iree.compiler import ir

from tuner.external.abi import ExternKernel, for_iree
from tuner.external.reduction_kernel import SpatialReduceProblem, spatial_reduce_tiles_for
from tuner.rewrite import EXPERIMENTS, EXTERNAL, EXTERNAL_SPATIAL_REDUCTION, F32_REDUCTIONS, REWRITES
from tuner.rewrite.external_reduction import external_spatial_reductions

PTX = Path(__file__).parent / "fixtures" / "external" / "triton_reduce_l2_2x49x96.ptx"
META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _t(dims, element="f16") -> str:
    return f"!torch.vtensor<[{','.join(map(str, dims))}],{element}>"


def _stand_in(problem, tiles) -> ExternKernel:
    return ExternKernel(problem.name, for_iree(PTX.read_text(), "_spatial_reduce", problem.name, 2), 2, 128, 256,
                        tiles.grid(problem), tiles.label)


def _reduce(kind: str, shape, axes, keepdims: int = 1, element: str = "f16") -> str:
    """`kind` of x over `axes` (an operand, as opset 18 on gives it)."""
    rank = len(shape)
    kept = [1 if i in [a % rank for a in axes] else d for i, d in enumerate(shape)] if keepdims else \
        [d for i, d in enumerate(shape) if i not in [a % rank for a in axes]]
    n = len(axes)
    return f"""
func.func @f(%x: {_t(shape, element)}) -> {_t(kept, element)} attributes {META} {{
  %axes = torch.vtensor.literal(dense<{list(axes)}> : tensor<{n}xsi64>) : !torch.vtensor<[{n}],si64>
  %y = torch.operator "onnx.{kind}"(%x, %axes) {{torch.onnx.keepdims = {keepdims} : si64, torch.onnx.noop_with_empty_axes = 0 : si64}} : ({_t(shape, element)}, !torch.vtensor<[{n}],si64>) -> {_t(kept, element)}
  return %y : {_t(kept, element)}
}}
"""


def _rewritten(program: str, rewrites=()) -> tuple[list, list[str], str]:
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        for rewrite in rewrites:
            rewrite.apply(module)
        done = external_spatial_reductions(module, lambda p, t: made.append(p) or _stand_in(p, t))
        module.operation.verify()
        return made, done, str(module)


def test_convnext_v2s_grn_norm_over_an_nhwc_images_pixels_is_one_call_of_the_kernel():
    made, done, text = _rewritten(_reduce("ReduceL2", [2, 7, 7, 96], [1, 2]))
    assert made == [SpatialReduceProblem(2, 49, 96, "l2", "f16")]
    assert done == ["l2_2x49x96_f16 (64x32 w4 s3)"]
    assert 'hal.dispatch.extern "reduce_l2_2x49x96_f16"' in text and "onnx.ReduceL2" not in text
    assert "-> !torch.vtensor<[2,1,1,96],f16>" in text  # the call's result as the site had it


def test_after_f32_reductions_both_casts_are_taken_in_and_the_kernel_reads_the_f16_values():
    made, done, text = _rewritten(_reduce("ReduceL2", [2, 7, 7, 96], [1, 2]), [F32_REDUCTIONS])
    assert made == [SpatialReduceProblem(2, 49, 96, "l2", "f16")]
    assert "onnx.Cast" not in text and "onnx.ReduceL2" not in text
    assert "func.func private @reduce_l2_2x49x96_f16(%arg0: tensor<2x7x7x96xf16>) -> tensor<2x1x1x96xf16>" in text


@pytest.mark.parametrize("kind, shape, axes, keepdims, expected", [
    ("ReduceMean", [4, 50, 64], [1], 0, SpatialReduceProblem(4, 50, 64, "mean")),  # a mean over tokens
    ("ReduceSum", [2, 3, 5, 6, 32], [1, 2, 3], 1, SpatialReduceProblem(2, 90, 32, "sum")),
    ("ReduceSumSquare", [2, 7, 7, 96], [-3, -2], 1, SpatialReduceProblem(2, 49, 96, "sumsq")),
])
def test_each_kind_over_every_middle_axis_is_taken(kind, shape, axes, keepdims, expected):
    made, done, _ = _rewritten(_reduce(kind, shape, axes, keepdims))
    assert made == [expected] and len(done) == 1


@pytest.mark.parametrize("kind, shape, axes, why", [
    ("ReduceL2", [2, 7, 7, 96], [3], "over the channels: IREE's own reduction reads it in order"),
    ("ReduceL2", [2, 7, 7, 96], [1], "over one of two middle axes"),
    ("ReduceL2", [2, 7, 7, 96], [0, 1, 2], "the batch too"),
    ("ReduceMax", [2, 7, 7, 96], [1, 2], "no kind the kernel computes"),
    ("ReduceMean", [8, 96], [1], "a rank-2 tensor has no middle axes"),
])
def test_what_is_no_reduction_over_an_images_pixels_is_left_alone(kind, shape, axes, why):
    made, done, text = _rewritten(_reduce(kind, shape, axes))
    assert made == [] and done == [] and f"onnx.{kind}" in text, why


def test_the_tiles_keep_whole_lines_of_channels_and_two_workgroups_a_multiprocessor_where_they_can():
    grn_first_stage = SpatialReduceProblem(8, 3136, 384, "l2")  # 8 x 6 blocks of 64: too few
    assert spatial_reduce_tiles_for(grn_first_stage).channels == 32
    assert spatial_reduce_tiles_for(SpatialReduceProblem(8, 49, 3072, "l2")).channels == 64  # 384 blocks
    assert spatial_reduce_tiles_for(SpatialReduceProblem(1, 9, 96, "l2")).pixels == 16


def test_the_reduction_kernel_is_an_experiment_the_flag_stage_does_not_offer():
    assert EXTERNAL_SPATIAL_REDUCTION in EXPERIMENTS
    assert EXTERNAL_SPATIAL_REDUCTION not in EXTERNAL and EXTERNAL_SPATIAL_REDUCTION not in REWRITES["gpu"]
