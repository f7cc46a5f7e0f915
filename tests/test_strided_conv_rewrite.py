"""The subsample-strided-1x1 rewrite (tuner.rewrite.strided_conv): which convolutions it takes,
that the rewritten program computes the same result, that IREE then forms a contraction where it
formed a reduction, and that the flag stage offers it with the attention rewrite together."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from pipelines import DispatchKind
from tests.conftest import iree_compile
from tuner.discovery.program import discover_program
from tuner.evaluation.runtime_tools import ModuleRun, run_once
from tuner.rewrite import RAISE_ATTENTION, SUBSAMPLE_STRIDED_1X1, combined, rewrite_program
from tuner.rewrite.strided_conv import subsample_strided_pointwise_convs
from tuner.targets import parse_target

T = "!torch.vtensor<[2,8,9,9],f32>"
CONV = ('%{out} = torch.operator "onnx.Conv"(%x, %{w}, %b) {{torch.onnx.kernel_shape = [{k} : si64, {k} : si64], '
        'torch.onnx.pads = [{p} : si64, {p} : si64, {p} : si64, {p} : si64], '
        'torch.onnx.strides = [{s} : si64, {s} : si64]}} : ({t}, {wt}, !torch.vtensor<[16],f32>) -> {ot}')


def conv_line(out: str, k: int, p: int, s: int) -> str:
    """A program line: an onnx.Conv of the 2x8x9x9 input `%x` by a KxK filter, padding p, stride s."""
    size = (9 + 2 * p - k) // s + 1
    return CONV.format(out=out, w=f"w{k}", k=k, p=p, s=s, t=T, wt=f"!torch.vtensor<[16,8,{k},{k}],f32>",
                       ot=f"!torch.vtensor<[2,16,{size},{size}],f32>")


# Four convolutions of a 9x9 input (odd: the subsample's size is rounded up): only the first, a
# 1x1 with stride 2 and no padding, is the rewrite's.
PROGRAM = f"""
func.func @f(%x: {T}, %w1: !torch.vtensor<[16,8,1,1],f32>, %w3: !torch.vtensor<[16,8,3,3],f32>,
             %b: !torch.vtensor<[16],f32>) -> (!torch.vtensor<[2,16,5,5],f32>, !torch.vtensor<[2,16,5,5],f32>,
                                                !torch.vtensor<[2,16,9,9],f32>, !torch.vtensor<[2,16,6,6],f32>) {{
  {conv_line("a", 1, 0, 2)}
  {conv_line("c", 3, 1, 2)}
  {conv_line("d", 1, 0, 1)}
  {conv_line("e", 1, 1, 2)}
  return %a, %c, %d, %e : !torch.vtensor<[2,16,5,5],f32>, !torch.vtensor<[2,16,5,5],f32>, !torch.vtensor<[2,16,9,9],f32>, !torch.vtensor<[2,16,6,6],f32>
}}
"""


def _convs(module: ir.Module) -> list[tuple[list[int], str]]:
    """Each onnx.Conv of the function in order: its strides and what makes its input (the
    argument, or the op that computes it)."""
    from tuner.rewrite.torch_ops import int_list, is_onnx, producer

    block = module.body.operations[0].regions[0].blocks[0]
    return [(int_list(op.attributes["torch.onnx.strides"]),
             "argument" if producer(op.operands[0]) is None else ir.StringAttr(producer(op.operands[0]).attributes["name"]).value)
            for op in block.operations if is_onnx(op, "Conv")]


def test_only_an_unpadded_strided_1x1_convolution_is_rewritten_into_a_subsample_and_a_unit_stride_one():
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        assert subsample_strided_pointwise_convs(module) == ["2x8x9x9 stride 2x2"]
        # The 1x1 with stride 2 reads a subsample with unit stride; the 3x3 strided, the
        # unit-stride 1x1 and the padded strided 1x1 keep their strides and input.
        assert _convs(module) == [([1, 1], "onnx.Slice"), ([2, 2], "argument"), ([1, 1], "argument"),
                                  ([2, 2], "argument")]
        slice_line = next(line for line in str(module).splitlines() if '"onnx.Slice"' in line)
    assert "-> !torch.vtensor<[2,8,5,5],f32>" in slice_line  # ceil(9 / 2) rows and columns kept


def test_a_program_without_strided_1x1_convolutions_is_left_alone():
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM.replace(conv_line("a", 1, 0, 2), conv_line("a", 1, 0, 1).replace("[2,16,9,9]", "[2,16,5,5]")))
        before = str(module)
        assert subsample_strided_pointwise_convs(module) == []
        assert str(module) == before


def test_rewrites_applied_together_keep_each_name():
    both = combined([RAISE_ATTENTION, SUBSAMPLE_STRIDED_1X1])
    assert both.names == ("raise-attention", "subsample-strided-1x1")
    assert both.tunes == RAISE_ATTENTION.tunes


def _downsample_block(batch: int, channels: int, size: int):
    """A ResNet stage's first bottleneck (torchvision's v1.5) as torch exports it, batch norms
    folded: the previous block's ReLU, then Conv 1x1, Conv 3x3 stride 2 and Conv 1x1 (ReLUs between)
    beside the projection shortcut, a Conv 1x1 stride 2; added, ReLU. f16."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    width, out_channels = channels // 2, 2 * channels
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float16), n) for n, s in (
        ("w1", (width, channels, 1, 1)), ("b1", (width,)), ("w2", (width, width, 3, 3)), ("b2", (width,)),
        ("w3", (out_channels, width, 1, 1)), ("b3", (out_channels,)), ("wd", (out_channels, channels, 1, 1)),
        ("bd", (out_channels,)))]
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Conv", ["r", "w1", "b1"], ["c1"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["c1"], ["h1"]),
             helper.make_node("Conv", ["h1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4),
             helper.make_node("Relu", ["c2"], ["h2"]),
             helper.make_node("Conv", ["h2", "w3", "b3"], ["main"], kernel_shape=[1, 1]),
             helper.make_node("Conv", ["r", "wd", "bd"], ["down"], kernel_shape=[1, 1], strides=[2, 2]),
             helper.make_node("Add", ["main", "down"], ["sum"]), helper.make_node("Relu", ["sum"], ["y"])]
    out = (size + 1) // 2
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [batch, channels, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [batch, out_channels, out, out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def imported_block(tmp_path: Path, shape: tuple[int, int, int] = (2, 32, 15)) -> Path:
    """_downsample_block(*shape) (batch, channels, size) saved and imported as the tuner imports
    an ONNX model."""
    import onnx

    from tuner.input.models import program_source

    onnx.save(_downsample_block(*shape), tmp_path / "block.onnx")
    return program_source(tmp_path / "block.onnx", tmp_path, parse_target("llvm-cpu"))


def cpu_outputs(programs: dict[str, Path], tmp_path: Path, shape: tuple[int, ...] = (2, 32, 15, 15)) -> dict[str, np.ndarray]:
    """Each program of the block (input `shape`) built for llvm-cpu and run on the same input
    (f32 results)."""
    cpu = parse_target("llvm-cpu")
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).standard_normal(shape).astype(np.float16))
    outputs = {}
    for name, program in programs.items():
        iree_compile(str(program), *cpu.compile_flags, "-o", str(tmp_path / f"{name}.vmfb"))
        assert run_once(tmp_path / f"{name}.vmfb", ModuleRun("local-task", "block", (x,)), tmp_path / f"{name}.npy").ok
        outputs[name] = np.load(tmp_path / f"{name}.npy").astype(np.float32)
    return outputs


@pytest.mark.slow
def test_the_rewritten_block_computes_the_same_result_and_forms_a_contraction_not_a_reduction(tmp_path, ctx):
    pytest.importorskip("onnx")
    cuda = parse_target("cuda:sm_80")
    imported = imported_block(tmp_path)
    rewritten = tmp_path / "rewritten.mlir"
    assert rewrite_program(imported, SUBSAMPLE_STRIDED_1X1, rewritten) == ["2x32x15x15 stride 2x2"]
    # On a GPU target the strided 1x1 convolution was a reduction; rewritten, a contraction.
    before = {d.kind for d in discover_program(imported, cuda, ctx).dispatches}
    after = {d.kind for d in discover_program(rewritten, cuda, ctx).dispatches}
    assert DispatchKind.REDUCTION in before and DispatchKind.REDUCTION not in after
    assert DispatchKind.CONTRACTION in after
    outputs = cpu_outputs({"strided": imported, "rewritten": rewritten}, tmp_path)
    np.testing.assert_allclose(outputs["rewritten"], outputs["strided"], rtol=1e-5, atol=1e-5)
