"""1-D convolutions as the filter by their gathered taps (tuner.rewrite.conv1d): which
convolutions are taken, and (slow) that the rewritten programs compute what the convolutions
did on llvm-cpu: a strided, padded one by hand and the Whisper export's two."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import Rewrite, rewrite_program
from tuner.rewrite.conv1d import conv1d_taken, conv1ds_as_matmuls
from tuner.rewrite.torch_ops import onnx_sites

CONV1D = Rewrite("conv1d-as-matmul", conv1ds_as_matmuls, "")
EXPORTS = Path(__file__).parent / "fixtures" / "exports"


def _conv(attributes: str = "torch.onnx.pads = [1 : si64, 1 : si64], torch.onnx.strides = [2 : si64]",
          w: str = "32,16,3", y: str = "2,32,25") -> str:
    x, wt, yt = "!torch.vtensor<[2,16,50],f32>", f"!torch.vtensor<[{w}],f32>", f"!torch.vtensor<[{y}],f32>"
    b = f"!torch.vtensor<[{w.split(',')[0]}],f32>"
    return f"""
func.func @f(%x: {x}, %w: {wt}, %b: {b}) -> {yt}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.Conv"(%x, %w, %b) {{{attributes}}} : ({x}, {wt}, {b}) -> {yt}
  return %y : {yt}
}}
"""


@pytest.mark.parametrize("attributes, w, y, taken", [
    ("torch.onnx.pads = [1 : si64, 1 : si64], torch.onnx.strides = [2 : si64]", "32,16,3", "2,32,25", True),
    ("torch.onnx.group = 4 : si64", "32,4,3", "2,32,48", False),           # grouped (wav2vec2's positional one)
    ("torch.onnx.dilations = [2 : si64]", "32,16,3", "2,32,46", False),     # dilated
    ('torch.onnx.auto_pad = "SAME_UPPER"', "32,16,3", "2,32,50", False),    # padding left to auto_pad
])
def test_which_1d_convolutions_are_taken(attributes, w, y, taken):
    with ir.Context():
        module = ir.Module.parse(_conv(attributes, w, y))
        [conv] = onnx_sites(module, "Conv", lambda op: True)
        assert conv1d_taken(conv) == taken


@pytest.mark.slow
def test_a_strided_padded_1d_convolution_as_a_matmul_computes_the_same_on_llvm_cpu(tmp_path):
    from tests.conftest import cpu_results

    source = tmp_path / "spelled.mlir"
    source.write_text(_conv())
    assert rewrite_program(source, CONV1D, tmp_path / "rewritten.mlir") == ["2x16x50 by 32x16x3"]
    results = cpu_results((source, tmp_path / "rewritten.mlir"), [(2, 16, 50), (32, 16, 3), (32,)], tmp_path)
    np.testing.assert_allclose(results["rewritten"], results["spelled"], rtol=0, atol=1e-5)


@pytest.mark.slow
def test_the_whisper_exports_convolutions_as_matmuls_compute_torchs_output_on_llvm_cpu(tmp_path):
    pytest.importorskip("onnx")
    from tests.conftest import iree_compile
    from tuner.evaluation.runtime_tools import ModuleRun, run_once
    from tuner.input.models import program_source
    from tuner.targets import parse_target

    program = program_source(EXPORTS / "whisper" / "model.onnx", tmp_path / "import", parse_target("llvm-cpu"))
    rewritten = tmp_path / "rewritten.mlir"
    # the tiny encoder's two: 16 mel bins to 64 channels, then 64 to 64 at stride 2
    assert rewrite_program(program, CONV1D, rewritten) == ["1x16x32 by 64x16x3", "1x64x32 by 64x64x3"]
    vmfb = tmp_path / "m.vmfb"
    iree_compile(str(rewritten), *parse_target("llvm-cpu").compile_flags, "-o", str(vmfb))
    run = run_once(vmfb, ModuleRun("local-task", "main_graph", (EXPORTS / "whisper" / "input0.npy",)), tmp_path / "o.npy")
    assert run.ok, run.stderr
    torch_output = np.load(EXPORTS / "whisper" / "torch_output0.npy")
    np.testing.assert_allclose(np.load(tmp_path / "o.npy"), torch_output, rtol=0,
                               atol=5e-6 * float(np.abs(torch_output).max()))
