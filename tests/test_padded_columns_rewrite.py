"""The pad-conv-columns rewrite (tuner.rewrite.padded_columns): which convolutions it takes, that
the Slice goes after the column-wise ops that alone consume the widened result (a ReLU and a
1x1 convolution, as in a ResNet bottleneck), that the result is the same to the bit, and that the
widened convolution's config needs no padding on cuda."""

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import PAD_CONV_COLUMNS, REWRITES, rewrite_program
from tuner.rewrite.padded_columns import pad_convolution_columns
from tuner.targets import parse_target

F = "f32"


def _t(c: int, h: int, w: int) -> str:
    return f"!torch.vtensor<[2,{c},{h},{w}],{F}>"


# A bottleneck on a 14x14 image: 3x3 convolution (the rewrite's), ReLU, 1x1 convolution (both
# column-wise: the slice goes after them), then an Add with the input (not column-wise: the slice
# goes before it); and a strided 3x3 convolution and one whose output is 16 wide already (neither
# is the rewrite's).
PROGRAM = f"""
func.func @f(%x: {_t(16, 14, 14)}, %w3: !torch.vtensor<[16,16,3,3],{F}>, %w1: !torch.vtensor<[16,16,1,1],{F}>,
             %b: !torch.vtensor<[16],{F}>, %y: {_t(16, 16, 16)}) -> ({_t(16, 14, 14)}, {_t(16, 7, 7)}, {_t(16, 16, 16)})
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 17 : si64}} {{
  %c = torch.operator "onnx.Conv"(%x, %w3, %b) {{torch.onnx.kernel_shape = [3 : si64, 3 : si64], torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64], torch.onnx.strides = [1 : si64, 1 : si64]}} : ({_t(16, 14, 14)}, !torch.vtensor<[16,16,3,3],{F}>, !torch.vtensor<[16],{F}>) -> {_t(16, 14, 14)}
  %r = torch.operator "onnx.Relu"(%c) : ({_t(16, 14, 14)}) -> {_t(16, 14, 14)}
  %p = torch.operator "onnx.Conv"(%r, %w1, %b) {{torch.onnx.kernel_shape = [1 : si64, 1 : si64], torch.onnx.pads = [0 : si64, 0 : si64, 0 : si64, 0 : si64], torch.onnx.strides = [1 : si64, 1 : si64]}} : ({_t(16, 14, 14)}, !torch.vtensor<[16,16,1,1],{F}>, !torch.vtensor<[16],{F}>) -> {_t(16, 14, 14)}
  %a = torch.operator "onnx.Add"(%p, %x) : ({_t(16, 14, 14)}, {_t(16, 14, 14)}) -> {_t(16, 14, 14)}
  %s = torch.operator "onnx.Conv"(%x, %w3, %b) {{torch.onnx.kernel_shape = [3 : si64, 3 : si64], torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64], torch.onnx.strides = [2 : si64, 2 : si64]}} : ({_t(16, 14, 14)}, !torch.vtensor<[16,16,3,3],{F}>, !torch.vtensor<[16],{F}>) -> {_t(16, 7, 7)}
  %u = torch.operator "onnx.Conv"(%y, %w3, %b) {{torch.onnx.kernel_shape = [3 : si64, 3 : si64], torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64], torch.onnx.strides = [1 : si64, 1 : si64]}} : ({_t(16, 16, 16)}, !torch.vtensor<[16,16,3,3],{F}>, !torch.vtensor<[16],{F}>) -> {_t(16, 16, 16)}
  return %a, %s, %u : {_t(16, 14, 14)}, {_t(16, 7, 7)}, {_t(16, 16, 16)}
}}
"""


def _lines(module: ir.Module) -> list[str]:
    return [line.strip() for line in str(module).splitlines() if '"onnx.' in line]


def test_a_unit_stride_convolution_with_rows_no_mma_tile_divides_computes_16_columns_sliced_after_its_column_wise_consumers():
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        assert pad_convolution_columns(module) == ["2x16x14x14 computed 16 wide"]
        lines = _lines(module)
    names = [line.split('"onnx.')[1].split('"')[0] for line in lines]
    assert names == ["Conv", "Relu", "Conv", "Slice", "Add", "Conv", "Conv"]
    # The 3x3 convolution pads 2 more columns on the right (1 + 2) and yields 16 columns; the ReLU
    # and the 1x1 convolution run 16 wide; the Slice keeps 14 for the Add.
    assert "torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 3 : si64]" in lines[0]
    assert lines[0].endswith(f"-> {_t(16, 14, 16)}") and lines[1].endswith(f"-> {_t(16, 14, 16)}")
    assert lines[2].endswith(f"-> {_t(16, 14, 16)}") and lines[3].endswith(f"-> {_t(16, 14, 14)}")
    # The strided convolution and the one already 16 wide are left as they were.
    assert "torch.onnx.strides = [2 : si64, 2 : si64]" in lines[5] and lines[5].endswith(f"-> {_t(16, 7, 7)}")
    assert lines[6].endswith(f"-> {_t(16, 16, 16)}")


def test_the_gpu_flag_stage_offers_it_and_the_cpu_one_does_not():
    assert PAD_CONV_COLUMNS in REWRITES["gpu"] and PAD_CONV_COLUMNS not in REWRITES["cpu"]


@pytest.mark.slow
def test_the_rewritten_program_computes_the_same_result_to_the_bit_and_cuda_needs_no_padding_for_it(tmp_path, ctx):
    from tests.conftest import cpu_results
    from tuner.discovery.program import discover_program

    source = tmp_path / "block.mlir"  # the bottleneck's result alone
    source.write_text(PROGRAM.replace(f"-> ({_t(16, 14, 14)}, {_t(16, 7, 7)}, {_t(16, 16, 16)})", f"-> {_t(16, 14, 14)}")
                      .replace(f"return %a, %s, %u : {_t(16, 14, 14)}, {_t(16, 7, 7)}, {_t(16, 16, 16)}",
                               f"return %a : {_t(16, 14, 14)}"))
    rewritten = tmp_path / "padded.mlir"
    assert rewrite_program(source, PAD_CONV_COLUMNS, rewritten) == ["2x16x14x14 computed 16 wide"]
    results = cpu_results((source, rewritten), [(2, 16, 14, 14), (16, 16, 3, 3), (16, 16, 1, 1), (16,), (2, 16, 16, 16)],
                          tmp_path)
    np.testing.assert_array_equal(results["padded"], results["block"])
    # In f16 on cuda (an implicit GEMM with MMAs) the widened convolution's own config pads
    # nothing; the 14-wide one pads its rows.
    cuda = parse_target("cuda:sm_80")
    for program in (source, rewritten):
        program.with_suffix(".f16.mlir").write_text(program.read_text().replace("f32", "f16"))
    configs = {p.stem: [d.default.lowering_config for d in discover_program(p.with_suffix(".f16.mlir"), cuda, ctx).dispatches
                        if d.conv is not None and 14 in d.loop_bounds[2:4]] for p in (source, rewritten)}
    assert configs["block"] and all("padding = " in c for c in configs["block"])
    assert configs["padded"] and not any("padding" in c for c in configs["padded"])


def test_in_a_basic_block_the_second_3x3_convolution_reads_the_sliced_rows_and_is_widened_itself():
    """ResNet-18's block: 3x3, ReLU, 3x3, Add. A 3x3 convolution reads neighbouring columns, so it
    is not column-wise: the first one's slice goes before it, and it is padded on its own."""
    conv = ('torch.operator "onnx.Conv"({x}, %w3, %b) {{torch.onnx.kernel_shape = [3 : si64, 3 : si64], '
            'torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64], torch.onnx.strides = [1 : si64, 1 : si64]}} : '
            f'({_t(16, 14, 14)}, !torch.vtensor<[16,16,3,3],{F}>, !torch.vtensor<[16],{F}>) -> {_t(16, 14, 14)}')
    program = f"""
func.func @f(%x: {_t(16, 14, 14)}, %w3: !torch.vtensor<[16,16,3,3],{F}>, %b: !torch.vtensor<[16],{F}>) -> {_t(16, 14, 14)} {{
  %c = {conv.format(x="%x")}
  %r = torch.operator "onnx.Relu"(%c) : ({_t(16, 14, 14)}) -> {_t(16, 14, 14)}
  %d = {conv.format(x="%r")}
  %a = torch.operator "onnx.Add"(%d, %x) : ({_t(16, 14, 14)}, {_t(16, 14, 14)}) -> {_t(16, 14, 14)}
  return %a : {_t(16, 14, 14)}
}}
"""
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(program)
        assert pad_convolution_columns(module) == ["2x16x14x14 computed 16 wide"] * 2
        lines = _lines(module)
    names = [line.split('"onnx.')[1].split('"')[0] for line in lines]
    assert names == ["Conv", "Relu", "Slice", "Conv", "Slice", "Add"]
    assert lines[1].endswith(f"-> {_t(16, 14, 16)}") and lines[2].endswith(f"-> {_t(16, 14, 14)}")
    assert lines[3].endswith(f"-> {_t(16, 14, 16)}") and lines[4].endswith(f"-> {_t(16, 14, 14)}")
