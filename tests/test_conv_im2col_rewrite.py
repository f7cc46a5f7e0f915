"""The conv-as-im2col-matmul rewrite (tuner.rewrite.conv_im2col): which convolutions it takes,
that the rewritten program computes the same result (padded, strided, dilated, asymmetric
windows, with and without a bias, one image and several), and that on cuda the convolutions
become 2-D matmuls over every image's pixels that the mma.sync kernel takes, its candidates
compiling to ldmatrix and mma.sync, with no copy of the filter per image."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from pipelines import DispatchKind
from pipelines.llvmgpu_mma_sync import LLVMGPUMmaSync
from tests.test_strided_conv_rewrite import T, conv_line
from tuner.rewrite import CONV_AS_IM2COL_MATMUL, REWRITES, rewrite_program
from tuner.rewrite.conv_im2col import convs_as_im2col_matmuls
from tuner.targets import parse_target


GROUPED = ('%g = torch.operator "onnx.Conv"(%x, %wg, %b) {torch.onnx.group = 2 : si64, torch.onnx.kernel_shape = [3 : si64, 3 : si64], '
           'torch.onnx.pads = [1 : si64, 1 : si64, 1 : si64, 1 : si64]} : '
           f'({T}, !torch.vtensor<[16,4,3,3],f32>, !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16,9,9],f32>')
# A 3x3 padded, a 3x3 strided, a 1x1 and a grouped 3x3: the first two are the rewrite's.
PROGRAM = f"""
func.func @f(%x: {T}, %w1: !torch.vtensor<[16,8,1,1],f32>, %w3: !torch.vtensor<[16,8,3,3],f32>,
             %wg: !torch.vtensor<[16,4,3,3],f32>, %b: !torch.vtensor<[16],f32>)
    -> (!torch.vtensor<[2,16,9,9],f32>, !torch.vtensor<[2,16,5,5],f32>, !torch.vtensor<[2,16,9,9],f32>, !torch.vtensor<[2,16,9,9],f32>) {{
  {conv_line("a", 3, 1, 1)}
  {conv_line("c", 3, 1, 2)}
  {conv_line("d", 1, 0, 1)}
  {GROUPED}
  return %a, %c, %d, %g : !torch.vtensor<[2,16,9,9],f32>, !torch.vtensor<[2,16,5,5],f32>, !torch.vtensor<[2,16,9,9],f32>, !torch.vtensor<[2,16,9,9],f32>
}}
"""


GROUPED_1X1 = f"""
func.func @f(%x: {T}, %w: !torch.vtensor<[16,4,1,1],f32>, %b: !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16,9,9],f32> {{
  %g = torch.operator "onnx.Conv"(%x, %w, %b) {{torch.onnx.group = 2 : si64, torch.onnx.kernel_shape = [1 : si64, 1 : si64]}} :
      ({T}, !torch.vtensor<[16,4,1,1],f32>, !torch.vtensor<[16],f32>) -> !torch.vtensor<[2,16,9,9],f32>
  return %g : !torch.vtensor<[2,16,9,9],f32>
}}
"""


def _ops(module: ir.Module) -> list[str]:
    block = module.body.operations[0].regions[0].blocks[0]
    return [ir.StringAttr(op.attributes["name"]).value.removeprefix("onnx.") for op in block.operations
            if op.name == "torch.operator"]


def _gather_indices(module: ir.Module) -> list[np.ndarray]:
    """The constant indices of each onnx.Gather of the function, in order."""
    block = module.body.operations[0].regions[0].blocks[0]
    gathers = [op for op in block.operations if op.name == "torch.operator"
               and ir.StringAttr(op.attributes["name"]).value == "onnx.Gather"]
    return [np.array(ir.DenseIntElementsAttr(g.operands[1].owner.attributes["value"])) for g in gathers]


def _where_masks(module: ir.Module) -> list[np.ndarray]:
    """The constant condition of each onnx.Where of the function, in order."""
    block = module.body.operations[0].regions[0].blocks[0]
    wheres = [op for op in block.operations if op.name == "torch.operator"
              and ir.StringAttr(op.attributes["name"]).value == "onnx.Where"]
    return [np.array(ir.DenseElementsAttr(w.operands[0].owner.attributes["value"])).astype(bool) for w in wheres]


def test_windowed_ungrouped_convolutions_are_rewritten_and_1x1_and_grouped_ones_are_left():
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        assert convs_as_im2col_matmuls(module) == ["2x8x9x9 by 16x8x3x3", "2x8x9x9 by 16x8x3x3"]
        ops = _ops(module)
        # Two convolutions are left (the 1x1 and the grouped one); each rewritten one is one
        # Gather of the taps from the image as it is (never a padded copy of it), a Where that
        # zeroes the taps in the padding, the filter's Pad for the extra taps, a Transpose
        # putting the two images side by side, a MatMul of the reshaped filter, a Transpose back
        # to each image's channels, then a Slice dropping the extra pixels.
        assert ops.count("Conv") == 2 and ops.count("Gather") == 2 and ops.count("Where") == 2
        assert ops.count("Pad") == 2 and ops.count("MatMul") == 2 and ops.count("Slice") == 2
        assert ops.count("Transpose") == 4
        strided = _gather_indices(module)[1]
        inside = _where_masks(module)[1]
        text = str(module)
    # The strided one reads the 9x9 image padded by 1: 9 taps by 5x5 output pixels, padded to 10
    # taps (K = 8 x 10, a multiple of 16) by 32 pixels (two images' 32 make 64 columns). Tap
    # (0, 0) of pixel (1, 2) is image pixel (1, 3), 1 * 9 + 3; tap (1, 1) of pixel (4, 4) is
    # (8, 8); tap (0, 0) of pixel (0, 0) is in the padding, and tap (2, 1) of pixel (4, 4) past
    # the image's last row: both read pixel 0 and are masked, as the extra taps and pixels are.
    assert strided.shape == inside.shape == (10, 32)
    assert strided[0, 1 * 5 + 2] == 12 and inside[0, 1 * 5 + 2]
    assert strided[1 * 3 + 1, 4 * 5 + 4] == 80 and inside[1 * 3 + 1, 4 * 5 + 4]
    assert not inside[0, 0] and not inside[2 * 3 + 1, 4 * 5 + 4] and strided[0, 0] == 0
    assert not inside[:, 25:].any() and not inside[9].any() and (strided[~inside] == 0).all()
    # The patches: 8 channels x 10 taps over two images of 32 pixels (the strided one) and of 96
    # (the other: 81 pixels, the fewest over 81 that two images make a multiple of 64 of); the
    # filter is a plain 2-D operand, never broadcast over the images.
    assert "!torch.vtensor<[80,64],f32>" in text and "!torch.vtensor<[80,192],f32>" in text
    assert "!torch.vtensor<[16,192],f32>" in text and "[2,16,80]" not in text


def test_no_conv_rewrite_takes_a_grouped_1x1_convolution():
    """`group` is an integer attribute (it was read as a list, and a grouped 1x1 convolution, as
    ResNeXt's, stopped the pointwise and strided rewrites with a ValueError)."""
    for rewrite in REWRITES["gpu"]:
        with ir.Context() as c:
            c.allow_unregistered_dialects = True
            module = ir.Module.parse(GROUPED_1X1)
            assert rewrite.apply(module) == [], rewrite.name
            assert _ops(module) == ["Conv"]


def test_it_is_offered_on_gpus_only_and_tunes_the_contractions_it_forms():
    assert CONV_AS_IM2COL_MATMUL in REWRITES["gpu"] and CONV_AS_IM2COL_MATMUL not in REWRITES["cpu"]
    assert CONV_AS_IM2COL_MATMUL.tunes == (DispatchKind.CONTRACTION,)


def _convs_model(path: Path, batch: int) -> None:
    """Four convolutions of one f32 input, as an exporter writes them: 3x3 padded with a bias,
    3x3 strided by 2 with uneven pads, a dilated 5x3 window without a bias, and a 1x1 (left)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (
        ("w1", (16, 8, 3, 3)), ("b1", (16,)), ("w2", (12, 8, 3, 3)), ("b2", (12,)), ("w3", (8, 8, 5, 3)),
        ("w4", (4, 8, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2", "b2"], ["y2"], kernel_shape=[3, 3], strides=[2, 2], pads=[0, 1, 1, 0]),
             helper.make_node("Conv", ["x", "w3"], ["y3"], kernel_shape=[5, 3], dilations=[2, 1], pads=[2, 1, 2, 1]),
             helper.make_node("Conv", ["x", "w4"], ["y4"], kernel_shape=[1, 1])]
    out = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, "convs", [out("x", TensorProto.FLOAT, [batch, 8, 11, 10])],
                              [out("y1", TensorProto.FLOAT, [batch, 16, 11, 10]), out("y2", TensorProto.FLOAT, [batch, 12, 5, 5]),
                               out("y3", TensorProto.FLOAT, [batch, 8, 7, 10]), out("y4", TensorProto.FLOAT, [batch, 4, 11, 10])],
                              inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.slow
@pytest.mark.parametrize("batch", [2, 1])  # a batch matmul, and a plain matmul for one image
def test_the_rewritten_convolutions_compute_the_same_results(tmp_path, batch):
    pytest.importorskip("onnx")
    from tests.conftest import iree_compile
    from tuner.evaluation.runtime_tools import ModuleRun, read_output, run_once
    from tuner.input.models import program_source

    _convs_model(tmp_path / "convs.onnx", batch)
    cpu = parse_target("llvm-cpu")
    imported = program_source(tmp_path / "convs.onnx", tmp_path, cpu)
    rewritten = tmp_path / "rewritten.mlir"
    assert rewrite_program(imported, CONV_AS_IM2COL_MATMUL, rewritten) == [
        f"{batch}x8x11x10 by 16x8x3x3", f"{batch}x8x11x10 by 12x8x3x3", f"{batch}x8x11x10 by 8x8x5x3"]
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(1).standard_normal((batch, 8, 11, 10)).astype(np.float32))
    results = {}
    for name, program in {"conv": imported, "im2col": rewritten}.items():
        iree_compile(str(program), *cpu.compile_flags, "-o", str(tmp_path / f"{name}.vmfb"))
        results[name] = []
        for i in range(4):
            run = ModuleRun("local-task", "convs", (x,), outputs=4, checked=i)
            assert run_once(tmp_path / f"{name}.vmfb", run, tmp_path / f"{name}{i}.npy").ok
            results[name].append(read_output(tmp_path / f"{name}{i}.npy", run))
    for conv, im2col in zip(results["conv"], results["im2col"]):
        np.testing.assert_allclose(im2col, conv, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_on_cuda_a_3x3_convolution_becomes_one_matmul_over_both_images_whose_mma_sync_kernel_compiles(tmp_path, ctx):
    """A 2x64x28x28 3x3 convolution to 128 channels, f16 (ResNet's 28x28 stage): rewritten, its
    dispatch is one 2-D matmul (M = 128 channels, N = two images of 784 pixels padded to 800,
    K = 576) the mma.sync kernel takes, a config of the kernel compiles with ldmatrix and
    mma.sync in its PTX, and no dispatch copies the image into a padded one."""
    pytest.importorskip("onnx")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tests.conftest import run_cli
    from tuner.discovery.program import discover_program
    from tuner.input.models import program_source

    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [2, 64, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [2, 128, 28, 28])],
        [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float16), n) for n, s in
         (("w", (128, 64, 3, 3)), ("b", (128,)))])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "conv.onnx")
    cuda = parse_target("cuda:sm_80")
    rewritten = tmp_path / "rewritten.mlir"
    rewrite_program(program_source(tmp_path / "conv.onnx", tmp_path, cuda), CONV_AS_IM2COL_MATMUL, rewritten)
    found = discover_program(rewritten, cuda, ctx)
    (dispatch,) = [d for d in found.dispatches if d.kind == DispatchKind.CONTRACTION]
    # The padded convolution's image is gathered from as it is: no copy of it into a padded one
    # (IREE's slow_memcpy dispatch; ResNet-50's tuned build spent 0.28 ms of 2.62 in such on the H200).
    assert not any("slow_memcpy" in name for name, _ in found.skipped), found.skipped
    assert not dispatch.batch_dims
    assert dispatch.sizes((*dispatch.m_dims, *dispatch.n_dims, *dispatch.k_dims)) == (128, 1600, 576)
    assert LLVMGPUMmaSync().supports(dispatch)
    out = tmp_path / "run"
    result = run_cli("tune", str(rewritten), "--target", "cuda:sm_80", "--pipeline", "llvmgpu_mma_sync",
                     "--dispatch", dispatch.name, "--budget", "1", "--compile-only", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "compiled 2 of 2 candidates" in result.output
    ptx = "\n".join(p.read_text() for p in (out / "candidates" / "0001" / "binaries").glob("*.ptx"))
    assert "ldmatrix" in ptx and "mma.sync.aligned.m16n8k16" in ptx


def _windows_program() -> str:
    """Four convolutions of the 2x8x9x9 input: 3x3 by 3 and 2x2 by 2 (windows apart), 3x3 by 2
    and a 2x2 dilated by 2 with stride 2 (windows that overlap)."""
    def conv(out: str, k: int, s: int, d: int, size: int) -> str:
        wt, ot = f"!torch.vtensor<[16,8,{k},{k}],f32>", f"!torch.vtensor<[2,16,{size},{size}],f32>"
        return (f'%{out} = torch.operator "onnx.Conv"(%x, %w{k}, %b) {{torch.onnx.kernel_shape = [{k} : si64, {k} : si64], '
                f'torch.onnx.dilations = [{d} : si64, {d} : si64], torch.onnx.strides = [{s} : si64, {s} : si64]}} : '
                f'({T}, {wt}, !torch.vtensor<[16],f32>) -> {ot}')
    results = "!torch.vtensor<[2,16,3,3],f32>, !torch.vtensor<[2,16,4,4],f32>, !torch.vtensor<[2,16,4,4],f32>, !torch.vtensor<[2,16,4,4],f32>"
    return f"""
func.func @f(%x: {T}, %w2: !torch.vtensor<[16,8,2,2],f32>, %w3: !torch.vtensor<[16,8,3,3],f32>,
             %b: !torch.vtensor<[16],f32>) -> ({results}) {{
  {conv("a", 3, 3, 1, 3)}
  {conv("c", 2, 2, 1, 4)}
  {conv("e", 3, 2, 1, 4)}
  {conv("g", 2, 2, 2, 4)}
  return %a, %c, %e, %g : {results}
}}
"""


def test_patchify_takes_only_the_convolutions_whose_windows_do_not_overlap():
    from tuner.rewrite import FEEDERS, PATCHIFY_AS_MATMUL

    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(_windows_program())
        assert convs_as_im2col_matmuls(module, apart_only=True) == ["2x8x9x9 by 16x8x3x3", "2x8x9x9 by 16x8x2x2"]
        ops = _ops(module)
        # the overlapping two are left
        assert ops.count("Conv") == 2 and ops.count("Gather") == 2
        assert _gather_indices(module)[0][4, :3].tolist() == [10, 13, 16]  # tap (1, 1) of row 0: pixels 1*9+1, +3, +6
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        assert len(convs_as_im2col_matmuls(ir.Module.parse(_windows_program()))) == 4  # unrestricted: every one
    # a feeder of the joined external option, not offered alone (conv-as-im2col-matmul is)
    assert PATCHIFY_AS_MATMUL in FEEDERS and CONV_AS_IM2COL_MATMUL not in FEEDERS
    assert PATCHIFY_AS_MATMUL not in REWRITES["gpu"] and CONV_AS_IM2COL_MATMUL in REWRITES["gpu"]


def _patchify_model(path: Path) -> None:
    """ConvNeXt's two patchify convolutions as an exporter writes them (a 4x4 stem by 4, a 2x2
    downsample by 2, each with its bias), f32, batch 2."""
    from onnx import helper, numpy_helper

    from tests.conftest import save_onnx

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in (
        ("w1", (16, 3, 4, 4)), ("b1", (16,)), ("w2", (24, 16, 2, 2)), ("b2", (24,)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y1"], kernel_shape=[4, 4], strides=[4, 4]),
             helper.make_node("Conv", ["y1", "w2", "b2"], ["y2"], kernel_shape=[2, 2], strides=[2, 2])]
    save_onnx(path, nodes, inits, [2, 3, 32, 32], ("y2", [2, 24, 4, 4]))


@pytest.mark.slow
def test_patchify_computes_the_same_results(tmp_path):
    pytest.importorskip("onnx")
    from tests.conftest import rewrite_matches_onnx
    from tuner.rewrite import PATCHIFY_AS_MATMUL

    _patchify_model(tmp_path / "patchify.onnx")
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    changed, _, _ = rewrite_matches_onnx(tmp_path / "patchify.onnx", PATCHIFY_AS_MATMUL, x, tmp_path)
    assert changed == ["2x3x32x32 by 16x3x4x4", "2x16x8x8 by 24x16x2x2"]
