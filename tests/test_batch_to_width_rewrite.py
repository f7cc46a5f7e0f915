"""The batch-to-width rewrite (tuner.rewrite.batch_to_width, an experiment the flag stage does not
offer): which convolutions it takes, the ops it writes, and that the result is the same to the
bit on llvm-cpu."""

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import BATCH_TO_WIDTH, EXPERIMENTS, REWRITES, rewrite_program
from tuner.rewrite.batch_to_width import batch_to_width

F = "f32"


def _t(n: int, c: int, h: int, w: int) -> str:
    return f"!torch.vtensor<[{n},{c},{h},{w}],{F}>"


def _conv(x: str, shape_in: str, shape_out: str, pads=(1, 1, 1, 1), strides=(1, 1)) -> str:
    si = lambda v: ", ".join(f"{i} : si64" for i in v)  # noqa: E731
    return (f'torch.operator "onnx.Conv"({x}, %w, %b) {{torch.onnx.kernel_shape = [3 : si64, 3 : si64], '
            f"torch.onnx.pads = [{si(pads)}], torch.onnx.strides = [{si(strides)}]}} : "
            f"({shape_in}, !torch.vtensor<[8,8,3,3],{F}>, !torch.vtensor<[8],{F}>) -> {shape_out}")


# ResNet's last stage in small: 3x3 convolutions over 4 images of 7x7, one followed by a ReLU;
# a strided one and one on 16-wide rows (no padding to save) are left alone.
PROGRAM = f"""
func.func @f(%x: {_t(4, 8, 7, 7)}, %w: !torch.vtensor<[8,8,3,3],{F}>, %b: !torch.vtensor<[8],{F}>,
             %y: {_t(4, 8, 16, 16)}) -> ({_t(4, 8, 7, 7)}, {_t(4, 8, 4, 4)}, {_t(4, 8, 16, 16)})
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 17 : si64}} {{
  %c = {_conv("%x", _t(4, 8, 7, 7), _t(4, 8, 7, 7))}
  %r = torch.operator "onnx.Relu"(%c) : ({_t(4, 8, 7, 7)}) -> {_t(4, 8, 7, 7)}
  %s = {_conv("%x", _t(4, 8, 7, 7), _t(4, 8, 4, 4), strides=(2, 2))}
  %u = {_conv("%y", _t(4, 8, 16, 16), _t(4, 8, 16, 16))}
  return %r, %s, %u : {_t(4, 8, 7, 7)}, {_t(4, 8, 4, 4)}, {_t(4, 8, 16, 16)}
}}
"""


def test_narrow_unit_stride_3x3_convolutions_run_as_one_wide_image_and_no_others():
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        # 4 images of 7 columns padded to 16 each: 64 columns; side by side 4 x 9 = 36, as 48.
        assert batch_to_width(module) == ["4x8x7x7 as one row of 36 (48 computed, not 4x16)"]
        lines = [line.strip() for line in str(module).splitlines() if '"onnx.' in line]
    names = [line.split('"onnx.')[1].split('"')[0] for line in lines]
    assert names == ["Pad", "Transpose", "Reshape", "Conv", "Reshape", "Slice", "Transpose", "Relu", "Conv", "Conv"]
    assert lines[3].endswith(f"-> {_t(1, 8, 7, 36)}") and "torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]" in lines[3]
    assert lines[6].endswith(f"-> {_t(4, 8, 7, 7)}") and "perm = [2 : si64, 0 : si64, 1 : si64, 3 : si64]" in lines[6]
    assert lines[8].endswith(f"-> {_t(4, 8, 4, 4)}") and lines[9].endswith(f"-> {_t(4, 8, 16, 16)}")


def test_it_is_an_experiment_no_flag_stage_offers():
    assert BATCH_TO_WIDTH in EXPERIMENTS and all(BATCH_TO_WIDTH not in rs for rs in REWRITES.values())


@pytest.mark.slow
def test_the_side_by_side_program_computes_the_same_result_to_the_bit(tmp_path):
    from tests.conftest import cpu_results

    source = tmp_path / "stage.mlir"  # the rewritten convolution's result alone
    source.write_text(PROGRAM.replace(f"-> ({_t(4, 8, 7, 7)}, {_t(4, 8, 4, 4)}, {_t(4, 8, 16, 16)})", f"-> {_t(4, 8, 7, 7)}")
                      .replace(f"return %r, %s, %u : {_t(4, 8, 7, 7)}, {_t(4, 8, 4, 4)}, {_t(4, 8, 16, 16)}",
                               f"return %r : {_t(4, 8, 7, 7)}"))
    rewritten = tmp_path / "wide.mlir"
    assert rewrite_program(source, BATCH_TO_WIDTH, rewritten) == ["4x8x7x7 as one row of 36 (48 computed, not 4x16)"]
    results = cpu_results((source, rewritten), [(4, 8, 7, 7), (8, 8, 3, 3), (8,), (4, 8, 16, 16)], tmp_path)
    assert results["stage"].shape == (4, 8, 7, 7)
    np.testing.assert_array_equal(results["wide"], results["stage"])
