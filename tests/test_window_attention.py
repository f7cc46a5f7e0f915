"""Swin's shifted-window attention raised (tuner.rewrite.window_mask, tuner.rewrite.attention):
the window mask added through a 5-D view between the relative-position bias and the softmax is
folded into one mask of the scores' shape; the raised program computes the spelled-out one's
result on llvm-cpu, and the external kernel takes the folded mask (each leading dim full)."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import RAISE_ATTENTION, rewrite_program
from tuner.rewrite.attention import SDPA, find_attention, raise_attention
from tuner.rewrite.torch_ops import producer, static_shape

# 2 images of 2 windows of 16 tokens, 2 heads of 8: the scores [4, 2, 16, 16]
B, W, H, N, D = 2, 2, 2, 16, 8


def _t(*shape, element="f32") -> str:
    return f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>"


def _shifted(element: str = "f32", window_mask: bool = True) -> str:
    """The exporter's form of torchvision's shifted_window_attention (q already scaled)."""
    e = element
    s4, s5 = _t(B * W, H, N, N, element=e), _t(B, W, H, N, N, element=e)
    split = f"""  %five = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[{B}, {W}, {H}, {N}, {N}]> : tensor<5xsi64>}} : () -> {_t(5, element="si64")}
  %four = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[{B * W}, {H}, {N}, {N}]> : tensor<4xsi64>}} : () -> {_t(4, element="si64")}
  %sp = torch.operator "onnx.Reshape"(%a, %five) : ({s4}, {_t(5, element="si64")}) -> {s5}
  %am = torch.operator "onnx.Add"(%sp, %mk) : ({s5}, {_t(1, W, 1, N, N, element=e)}) -> {s5}
  %l = torch.operator "onnx.Reshape"(%am, %four) : ({s5}, {_t(4, element="si64")}) -> {s4}
""" if window_mask else ""
    return f"""
func.func @f(%q: {_t(B * W, H, N, D, element=e)}, %k0: {_t(B * W, H, N, D, element=e)}, %v: {_t(B * W, H, N, D, element=e)},
             %r: {_t(1, H, N, N, element=e)}, %mk: {_t(1, W, 1, N, N, element=e)}) -> {_t(B * W, H, N, D, element=e)}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %kt = torch.operator "onnx.Transpose"(%k0) {{torch.onnx.perm = [0 : si64, 1 : si64, 3 : si64, 2 : si64]}} : ({_t(B * W, H, N, D, element=e)}) -> {_t(B * W, H, D, N, element=e)}
  %s = torch.operator "onnx.MatMul"(%q, %kt) : ({_t(B * W, H, N, D, element=e)}, {_t(B * W, H, D, N, element=e)}) -> {s4}
  %a = torch.operator "onnx.Add"(%s, %r) : ({s4}, {_t(1, H, N, N, element=e)}) -> {s4}
{split}  %p = torch.operator "onnx.Softmax"({'%l' if window_mask else '%a'}) {{torch.onnx.axis = -1 : si64}} : ({s4}) -> {s4}
  %o = torch.operator "onnx.MatMul"(%p, %v) : ({s4}, {_t(B * W, H, N, D, element=e)}) -> {_t(B * W, H, N, D, element=e)}
  return %o : {_t(B * W, H, N, D, element=e)}
}}
"""


def test_the_window_mask_is_folded_into_one_mask_of_the_scores_shape():
    with ir.Context():
        module = ir.Module.parse(_shifted())
        [site] = find_attention(module)
        assert site.window is not None and static_shape(site.window.mask) == [1, W, 1, N, N]
        assert raise_attention(module) == [f"{B * W}x{H}x{N}x{N}x{D}x{D} (shifted windows' mask folded)"]
        sdpa = []
        module.operation.walk(lambda op: (sdpa.append(op) if op.name == SDPA else None, ir.WalkResult.ADVANCE)[1])
        text = str(module)
    assert len(sdpa) == 1 and "onnx.Softmax" not in text
    assert static_shape(sdpa[0].operands[3]) == [B * W, H, N, N]  # the folded mask, full
    assert producer(sdpa[0].operands[3]).name == "torch.operator"


def test_without_the_window_mask_the_bias_alone_is_the_mask():
    with ir.Context():
        module = ir.Module.parse(_shifted(window_mask=False))
        [site] = find_attention(module)
        assert site.window is None and static_shape(site.mask_value) == [1, H, N, N]


@pytest.mark.slow
def test_the_raised_shifted_window_attention_computes_the_spelled_out_result_on_llvm_cpu(tmp_path):
    from tests.conftest import cpu_results

    source = tmp_path / "spelled.mlir"
    source.write_text(_shifted())
    assert rewrite_program(source, RAISE_ATTENTION, tmp_path / "raised.mlir")
    results = cpu_results((source, tmp_path / "raised.mlir"),
                          [(B * W, H, N, D)] * 3 + [(1, H, N, N), (1, W, 1, N, N)], tmp_path)
    np.testing.assert_allclose(results["raised"], results["spelled"], rtol=0, atol=2e-6)


def test_the_external_kernel_takes_the_folded_mask_whole():
    from tests.test_external_attention import _stand_in
    from tuner.external.attention_kernel import AttentionProblem
    from tuner.rewrite.external_attention import external_attentions

    made = []
    with ir.Context():
        module = ir.Module.parse(_shifted(element="f16"))
        changes = external_attentions(module, lambda p, t: made.append(p) or _stand_in(p, t))
    # the heads of 8 read as they are (the kernel computes them padded to 16), the mask's every
    # leading dim the scores'
    assert made == [AttentionProblem(B * W, H, N, N, 8, 8, mask=(B * W, H, N))]
    assert len(changes) == 1


EXPORT = Path(__file__).parent / "fixtures" / "exports" / "swin_shifted"


@pytest.fixture(scope="module")
def swin(tmp_path_factory) -> Path:
    """torchvision's Swin with a shifted block (two stages of two blocks, windows of 4x4 over
    8x8 then 4x4 patches: the first stage's second block shifts) as torch.onnx.export writes it,
    imported as the tuner imports it."""
    pytest.importorskip("onnx")
    from tuner.input.models import program_source
    from tuner.targets import parse_target

    return program_source(EXPORT / "model.onnx", tmp_path_factory.mktemp("swin"), parse_target("llvm-cpu"))


def test_the_exporters_shifted_window_attention_is_raised_with_its_mask_folded(swin):
    with ir.Context():
        module = ir.Module.parse(swin.read_text())
        assert raise_attention(module) == ["8x2x16x16x8x8", "8x2x16x16x8x8 (shifted windows' mask folded)",
                                           "2x4x16x16x8x8", "2x4x16x16x8x8"]
        assert "onnx.Softmax" not in str(module)


@pytest.mark.slow
def test_the_raised_swin_export_computes_torchs_output_on_llvm_cpu(swin, tmp_path):
    from tests.conftest import iree_compile
    from tuner.evaluation.runtime_tools import ModuleRun, run_once
    from tuner.targets import parse_target

    raised = tmp_path / "raised.mlir"
    assert rewrite_program(swin, RAISE_ATTENTION, raised)
    outputs = {}
    for program in (swin, raised):
        vmfb = tmp_path / f"{program.stem}.vmfb"
        iree_compile(str(program), *parse_target("llvm-cpu").compile_flags, "-o", str(vmfb))
        run = run_once(vmfb, ModuleRun("local-task", "main_graph", (EXPORT / "input0.npy",)), tmp_path / f"{program.stem}.npy")
        assert run.ok, run.stderr
        outputs[program.stem] = np.load(tmp_path / f"{program.stem}.npy")
    torch_output = np.load(EXPORT / "torch_output0.npy")
    scale = float(np.abs(torch_output).max())
    np.testing.assert_allclose(outputs["raised"], outputs[swin.stem], rtol=0, atol=2e-5 * scale)
    np.testing.assert_allclose(outputs["raised"], torch_output, rtol=0, atol=2e-5 * scale)
