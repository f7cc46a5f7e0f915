"""Layer norms as an external kernel (tuner.external.layernorm_kernel, tuner.rewrite.external_layernorm):
the problem read from ONNX's LayerNormalization, ConvNeXt's channels-last Transpose taken in (the
kernel reads NCHW), what is left alone, and that every norm is an experiment while the flag
stage's kernels take only those after a channels-last transpose; transformers' RMSNorm as the
exporter spells it out, one call of the RMS kernel (an experiment too), and what it is not. The kernel's arithmetic is
checked by benchmarks/interpret_external_kernels.py; the stand-in PTX here is the conv
fixture's (never run)."""

from pathlib import Path

import pytest
from iree.compiler import ir

from tuner.external.abi import ExternKernel, for_iree
from tuner.external.layernorm_kernel import LayerNormProblem, layernorm_tiles_for
from tuner.rewrite import EXPERIMENTS, EXTERNAL, EXTERNAL_LAYERNORM, EXTERNAL_TRANSPOSED_LAYERNORM, REWRITES
from tuner.rewrite.external_layernorm import external_layernorms

FIXTURES = Path(__file__).parent / "fixtures" / "external"
META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _t(*dims: int) -> str:
    return f"!torch.vtensor<[{','.join(map(str, dims))}],f16>"


def _stand_in(problem, tiles) -> ExternKernel:
    """A fixture's PTX under the problem's name: X, W, B, Y for a layer norm with a bias, else
    three bindings (a layer norm without one, an RMS norm)."""
    bias = getattr(problem, "bias", False)
    bindings = 4 if bias else 3
    ptx = (FIXTURES / ("triton_conv_1x16x8x8_32x3x3_bias_relu.ptx" if bias else "triton_gemm_16x128x64.ptx"))
    entry = "_conv" if bias else "_gemm"
    return ExternKernel(problem.name, for_iree(ptx.read_text(), entry, problem.name, bindings), bindings, 128, 0,
                        (-(-problem.rows // tiles.rows), 1, 1), tiles.label)


def _rewritten(rewrite, program: str) -> tuple[list, list[str], str]:
    """`program` rewritten by `rewrite` (external_layernorms or external_rms_norms) with the
    stand-in kernel: the problems asked for, what the rewrite said, and the rewritten text."""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        done = rewrite(module, lambda p, t: made.append(p) or _stand_in(p, t))
        return made, done, str(module)


def _convnext_norm(axis: int = -1) -> str:
    """ConvNeXt's block as exported: the depthwise result [2, 96, 7, 7] permuted to NHWC, then
    nn.LayerNorm(96) (eps 1e-6)."""
    nchw, nhwc, c = _t(2, 96, 7, 7), _t(2, 7, 7, 96), _t(96)
    return f"""
func.func @f(%x: {nchw}, %w: {c}, %b: {c}) -> {nhwc} attributes {META} {{
  %t = torch.operator "onnx.Transpose"(%x) {{torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]}} : ({nchw}) -> {nhwc}
  %y = torch.operator "onnx.LayerNormalization"(%t, %w, %b) {{torch.onnx.axis = {axis} : si64, torch.onnx.epsilon = 9.99999997E-7 : f32}} : ({nhwc}, {c}, {c}) -> {nhwc}
  return %y : {nhwc}
}}
"""


def test_one_problems_norms_of_two_ranks_call_one_function_each_reshaped_to_its_arguments():
    """OPT as exported: the same norm on [1, 16, 64] and, after a Reshape, on [16, 64]; the function
    is defined for the first, the second site reshaped to and from it (it failed verification)."""
    x3, x2, c, shape = _t(1, 16, 64), _t(16, 64), _t(64), "!torch.vtensor<[2],si64>"
    program = f"""
func.func @f(%x: {x3}, %w: {c}, %b: {c}) -> {x2} attributes {META} {{
  %y = torch.operator "onnx.LayerNormalization"(%x, %w, %b) {{torch.onnx.axis = -1 : si64, torch.onnx.epsilon = 9.99999974E-6 : f32}} : ({x3}, {c}, {c}) -> {x3}
  %s = torch.vtensor.literal(dense<[16, 64]> : tensor<2xsi64>) : {shape}
  %r = torch.operator "onnx.Reshape"(%y, %s) : ({x3}, {shape}) -> {x2}
  %z = torch.operator "onnx.LayerNormalization"(%r, %w, %b) {{torch.onnx.axis = -1 : si64, torch.onnx.epsilon = 9.99999974E-6 : f32}} : ({x2}, {c}, {c}) -> {x2}
  return %z : {x2}
}}
"""
    with ir.Context():
        module = ir.Module.parse(program)
        done = external_layernorms(module, _stand_in)
        module.operation.verify()
        text = str(module)
    assert done == ["16x64_f16 (128 rows of 64 w4)"] * 2
    assert text.count("func.func private @layernorm_16x64_f16(") == 1
    calls = [line for line in text.splitlines() if "call @layernorm_16x64_f16" in line]
    assert len(calls) == 2 and all("(tensor<1x16x64xf16>, tensor<64xf16>, tensor<64xf16>) -> tensor<1x16x64xf16>" in c
                                   for c in calls)
    assert text.count('"onnx.Reshape"') == 3  # the program's, then into the function's rows and back


def test_convnexts_channels_last_norm_reads_the_nchw_tensor_and_the_transpose_goes():
    made, done, text = _rewritten(external_layernorms, _convnext_norm())
    # 2 images x 49 pixels, 96 channels each; the NCHW tensor's 49 pixels a plane
    assert made == [LayerNormProblem(98, 96, pytest.approx(1e-6), "f16", True, 49)]
    assert done == ["98x96_nchw49_f16 (64 rows of 128 w4)"]
    assert '"onnx.Transpose"' not in text and '"onnx.LayerNormalization"' not in text
    call = next(line for line in text.splitlines() if "call @layernorm_98x96_nchw49_f16" in line)
    assert "(tensor<2x96x7x7xf16>, tensor<96xf16>, tensor<96xf16>) -> tensor<2x7x7x96xf16>" in call


def test_a_norm_over_rows_as_they_lie_without_a_bias_is_taken_as_it_is():
    x, w = _t(4, 16, 64), _t(64)
    program = f"""
func.func @f(%x: {x}, %w: {w}) -> {x} attributes {META} {{
  %y = torch.operator "onnx.LayerNormalization"(%x, %w) {{torch.onnx.axis = -1 : si64}} : ({x}, {w}) -> {x}
  return %y : {x}
}}
"""
    made, _, text = _rewritten(external_layernorms, program)
    assert made == [LayerNormProblem(64, 64, pytest.approx(1e-5), "f16", False, 0)]
    assert "(tensor<4x16x64xf16>, tensor<64xf16>) -> tensor<4x16x64xf16>" in text


def test_a_norm_over_other_dims_is_left_alone():
    with ir.Context():
        module = ir.Module.parse(_convnext_norm(axis=2))
        before = str(module)
        assert external_layernorms(module, _stand_in) == []
        assert str(module) == before


@pytest.mark.parametrize("c, rows, width", [(96, 64, 128), (768, 8, 1024), (4096, 2, 4096)])
def test_a_workgroup_takes_whole_rows_8192_values_at_most(c, rows, width):
    tiles = layernorm_tiles_for(LayerNormProblem(1000, c, 1e-5))
    assert (tiles.rows, tiles.width) == (rows, width) and tiles.rows * tiles.width <= 8192


def test_the_kernels_take_every_layer_norm_and_the_transposed_only_form_is_an_experiment():
    """The flag stage's kernels (EXTERNAL) take ConvNeXt's norms, whose Transpose the kernel
    takes in, and a transformer's norm over its rows (BERT-base on the H200 0.127 -> 0.124 ms);
    the form that takes only the first is kept for comparisons."""
    assert EXTERNAL_LAYERNORM in EXTERNAL and EXTERNAL_TRANSPOSED_LAYERNORM not in EXTERNAL
    assert EXTERNAL_TRANSPOSED_LAYERNORM in EXPERIMENTS and all(EXTERNAL_TRANSPOSED_LAYERNORM not in rs
                                                                for rs in REWRITES.values())
    rows, t = _t(4, 16, 64), _t(64)
    both = _convnext_norm().replace("return %y", f"""%z = torch.operator "onnx.LayerNormalization"(%r, %v) {{torch.onnx.axis = -1 : si64}} : ({rows}, {t}) -> {rows}
  return %y""").replace("%b: !torch.vtensor<[96],f16>)", f"%b: !torch.vtensor<[96],f16>, %r: {rows}, %v: {t})")
    with ir.Context():
        module = ir.Module.parse(both)
        done = external_layernorms(module, _stand_in, transposed_only=True)
        text = str(module)
        module = ir.Module.parse(both)
        every = external_layernorms(module, _stand_in)
    assert done == ["98x96_nchw49_f16 (64 rows of 128 w4)"] and text.count('"onnx.LayerNormalization"') == 1
    assert every == ["98x96_nchw49_f16 (64 rows of 128 w4)", "64x64_f16_nobias (128 rows of 64 w4)"]


def _rms_norm(exponent: str = "2.000000e+00", axis: int = -1, inverse: str = "Reciprocal", gemma: bool = False) -> str:
    """transformers' RMSNorm(64, eps 1e-6) as torch.onnx.export writes it on [1, 16, 64] f16:
    Cast to f32, Pow 2, ReduceMean over the last dim (kept), Add eps, Sqrt, Reciprocal (`inverse`),
    Mul, Cast back, Mul by the weight. `gemma`: GemmaRMSNorm's, the Mul by an f32 weight (the
    exporter's fold of `1 + w`) before the Cast back."""
    x16, x32, m32, w, i64 = _t(1, 16, 64), "!torch.vtensor<[1,16,64],f32>", "!torch.vtensor<[1,16,1],f32>", _t(64), \
        "!torch.vtensor<[1],si64>"
    s32 = "!torch.vtensor<[],f32>"
    return f"""
func.func @f(%x: {x16}, %w: {w}) -> {x16} attributes {META} {{
  %two = torch.vtensor.literal(dense<{exponent}> : tensor<f32>) : {s32}
  %eps = torch.vtensor.literal(dense<9.99999997E-7> : tensor<f32>) : {s32}
  %axes = torch.vtensor.literal(dense<{axis}> : tensor<1xsi64>) : {i64}
  %a = torch.operator "onnx.Cast"(%x) {{torch.onnx.to = 1 : si64}} : ({x16}) -> {x32}
  %p = torch.operator "onnx.Pow"(%a, %two) : ({x32}, {s32}) -> {x32}
  %m = torch.operator "onnx.ReduceMean"(%p, %axes) {{torch.onnx.keepdims = 1 : si64}} : ({x32}, {i64}) -> {m32}
  %e = torch.operator "onnx.Add"(%m, %eps) : ({m32}, {s32}) -> {m32}
  %s = torch.operator "onnx.Sqrt"(%e) : ({m32}) -> {m32}
  %r = torch.operator "onnx.{inverse}"(%s) : ({m32}) -> {m32}
  %n = torch.operator "onnx.Mul"(%a, %r) : ({x32}, {m32}) -> {x32}
{_gemma_end(x16, x32) if gemma else _llama_end(x16, x32, w)}  return %y : {x16}
}}
"""


def _llama_end(x16: str, x32: str, w: str) -> str:
    return f"""  %h = torch.operator "onnx.Cast"(%n) {{torch.onnx.to = 10 : si64}} : ({x32}) -> {x16}
  %y = torch.operator "onnx.Mul"(%w, %h) : ({w}, {x16}) -> {x16}
"""


def _gemma_end(x16: str, x32: str) -> str:
    w32 = "!torch.vtensor<[64],f32>"
    return f"""  %w1 = torch.vtensor.literal(dense<1.500000e+00> : tensor<64xf32>) : {w32}
  %h = torch.operator "onnx.Mul"(%n, %w1) : ({x32}, {w32}) -> {x32}
  %y = torch.operator "onnx.Cast"(%h) {{torch.onnx.to = 10 : si64}} : ({x32}) -> {x16}
"""


def test_an_exported_rms_norm_is_one_call_of_the_kernel_on_x_and_the_weight():
    from tuner.external.layernorm_kernel import RmsNormProblem
    from tuner.rewrite.external_layernorm import external_rms_norms

    made, done, text = _rewritten(external_rms_norms, _rms_norm())
    assert made == [RmsNormProblem(16, 64, pytest.approx(1e-6), "f16")] and done == ["16x64_f16 (128 rows of 64 w4)"]
    assert not any(f'"onnx.{op}"' in text for op in ("Cast", "Pow", "ReduceMean", "Sqrt", "Reciprocal", "Mul", "Add"))
    call = next(line for line in text.splitlines() if "call @rmsnorm_16x64_f16" in line)
    assert "(tensor<1x16x64xf16>, tensor<64xf16>) -> tensor<1x16x64xf16>" in call


def test_gemmas_rms_norm_scaled_in_f32_before_the_cast_is_one_call_with_an_f32_weight():
    from tuner.external.layernorm_kernel import RmsNormProblem
    from tuner.rewrite.external_layernorm import external_rms_norms

    made, done, text = _rewritten(external_rms_norms, _rms_norm(gemma=True))
    assert made == [RmsNormProblem(16, 64, pytest.approx(1e-6), "f16", weight_f32=True)]
    assert done == ["16x64_f16_w32 (128 rows of 64 w4)"]
    assert not any(f'"onnx.{op}"' in text for op in ("Cast", "Pow", "ReduceMean", "Sqrt", "Reciprocal", "Mul", "Add"))
    call = next(line for line in text.splitlines() if "call @rmsnorm_16x64_f16_w32" in line)
    assert "(tensor<1x16x64xf16>, tensor<64xf32>) -> tensor<1x16x64xf16>" in call


@pytest.mark.parametrize("exponent, axis, inverse, why", [
    ("3.000000e+00", -1, "Reciprocal", "a cube's mean is no RMS"),
    ("2.000000e+00", 1, "Reciprocal", "the mean over the tokens, not the channels"),
    ("2.000000e+00", -1, "Neg", "no inverse of the root"),
])
def test_what_is_no_exported_rms_norm_is_left_as_it_is(exponent, axis, inverse, why):
    from tuner.rewrite.external_layernorm import external_rms_norms

    with ir.Context():
        module = ir.Module.parse(_rms_norm(exponent, axis, inverse))
        assert external_rms_norms(module, _stand_in) == [], why
        assert '"onnx.ReduceMean"' in str(module)


def test_the_rms_norm_kernel_is_one_of_the_kernels_the_flag_stage_joins():
    from tuner.rewrite import EXTERNAL_RMSNORM, makes_kernels

    assert EXTERNAL_RMSNORM in EXTERNAL and EXTERNAL_RMSNORM not in EXPERIMENTS and makes_kernels(EXTERNAL_RMSNORM)
