"""Masks an export computes from constants (tuner.rewrite.constant_eval): transformers' causal
mask, spelled as its exporter writes it, is read as causal and becomes the attention kernel's own
causal masking; a mask of zeros is dropped; anything else (another pattern, a value that depends
on the model's input) is left as a mask."""

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite.constant_eval import evaluate, mask_kind
from tuner.rewrite.torch_ops import onnx_sites

N = 6
META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _t(*dims: int, element: str = "f16") -> str:
    return f"!torch.vtensor<[{','.join(map(str, dims))}],{element}>"


def _arange(name: str, shape: tuple[int, ...]) -> str:
    values = ", ".join(map(str, range(N)))
    dims = "x".join(map(str, shape))
    return (f'  %{name} = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[{values}]> : '
            f'tensor<{N}xsi64>}} : () -> {_t(N, element="si64")}\n'
            f'  %{name}s = torch.vtensor.literal(dense<[{", ".join(map(str, shape))}]> : tensor<{len(shape)}xsi64>) '
            f': {_t(len(shape), element="si64")}\n'
            f'  %{name}r = torch.operator "onnx.Reshape"(%{name}, %{name}s) : ({_t(N, element="si64")}, '
            f'{_t(len(shape), element="si64")}) -> {_t(*shape, element="si64")}  // {dims}\n')


def _mask_program(compare: str = "LessOrEqual", low: str = "-6.550400e+04", keep: str = "0.000000e+00",
                  from_input: bool = False) -> str:
    """`func.func @f` returning transformers' causal mask for N tokens as the exporter writes it:
    Where(LessOrEqual(key index [1, 1, 1, N], query index [1, 1, N, 1]), 0, finfo(f16).min)."""
    s = _t()
    keys = "%x" if from_input else "%kxr"
    return f"""
func.func @f(%x: {_t(1, 1, 1, N, element="si64")}) -> {_t(1, 1, N, N)} attributes {META} {{
{_arange("kx", (1, 1, 1, N))}{_arange("qx", (1, 1, N, 1))}  %keep = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<{keep}> : tensor<f16>}} : () -> {s}
  %low = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<{low}> : tensor<f16>}} : () -> {s}
  %c = torch.operator "onnx.{compare}"({keys}, %qxr) : ({_t(1, 1, 1, N, element="si64")}, {_t(1, 1, N, 1, element="si64")}) -> {_t(1, 1, N, N, element="i1")}
  %m = torch.operator "onnx.Where"(%c, %keep, %low) : ({_t(1, 1, N, N, element="i1")}, {s}, {s}) -> {_t(1, 1, N, N)}
  return %m : {_t(1, 1, N, N)}
}}
"""


def _kind(program: str):
    with ir.Context():
        module = ir.Module.parse(program)
        where = onnx_sites(module, "Where", lambda op: True)[0]
        return mask_kind(where.result, N, N), evaluate(where.result)


def test_the_exporters_causal_mask_is_read_as_causal():
    kind, values = _kind(_mask_program())
    assert kind == "causal"
    np.testing.assert_array_equal(values[0, 0] == 0, np.tril(np.ones((N, N), bool)))


@pytest.mark.parametrize("program, kind, why", [
    (_mask_program(compare="GreaterOrEqual"), None, "the keys after the query kept: not causal"),
    (_mask_program(low="-1.000000e+00"), None, "a bias of -1, not a mask that drops"),
    (_mask_program(low="0.000000e+00"), "zero", "zeros everywhere: no mask"),
])
def test_other_constant_masks_are_what_they_hold(program, kind, why):
    assert _kind(program)[0] == kind, why


def test_a_mask_that_depends_on_the_models_input_is_not_read():
    kind, values = _kind(_mask_program(from_input=True))
    assert kind is None and values is None


def test_a_causal_mask_becomes_the_kernels_causal_masking_and_is_not_passed():
    from tests.test_external_attention import _stand_in
    from tuner.rewrite.external_attention import external_attentions

    t = _t(1, 2, N, 64)
    mask = _mask_program().split("attributes")[1].split("\n", 1)[1].rsplit("  return", 1)[0]
    program = f"""
func.func @f(%q: {t}, %k: {t}, %v: {t}) -> {t} attributes {META} {{
{mask}  %none = torch.constant.none
  %zero = torch.constant.float 0.000000e+00
  %false = torch.constant.bool false
  %r = torch.aten.scaled_dot_product_attention %q, %k, %v, %m, %zero, %false, %none, %false : {t}, {t}, {t}, {_t(1, 1, N, N)}, !torch.float, !torch.bool, !torch.none, !torch.bool -> {t}
  return %r : {t}
}}
"""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        external_attentions(module, lambda p, tiles: made.append(p) or _stand_in(p, tiles))
        text = str(module)
    assert made[0].causal and made[0].mask is None
    call = next(line for line in text.splitlines() if "call @attention_1x2x6x6x64x64_f16_causal(" in line)
    assert call.count("tensor<1x2x6x64xf16>") == 4 and "1x1x6x6" not in call  # Q, K, V and the result only


def test_an_image_mask_built_like_swins_is_evaluated_through_its_scatters_slices_and_transposes():
    # torchvision's shifted-window mask: zeros (ConstantOfShape), rows of it set (ScatterND of
    # rows taken by Slice), then a Transpose and an Unsqueeze; numpy computes the same
    i64 = "si64"
    program = f"""
func.func @f() -> {_t(1, 3, 3)} attributes {META} {{
  %shape = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[4, 3]> : tensor<2xsi64>}} : () -> {_t(2, element=i64)}
  %zeros = torch.operator "onnx.ConstantOfShape"(%shape) {{torch.onnx.value = dense<0.0> : tensor<1xf16>}} : ({_t(2, element=i64)}) -> {_t(4, 3)}
  %rows = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[[1], [3]]> : tensor<2x1xsi64>}} : () -> {_t(2, 1, element=i64)}
  %new = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf16>}} : () -> {_t(2, 3)}
  %set = torch.operator "onnx.ScatterND"(%zeros, %rows, %new) {{torch.onnx.reduction = "none"}} : ({_t(4, 3)}, {_t(2, 1, element=i64)}, {_t(2, 3)}) -> {_t(4, 3)}
  %s0 = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[1]> : tensor<1xsi64>}} : () -> {_t(1, element=i64)}
  %s1 = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[4]> : tensor<1xsi64>}} : () -> {_t(1, element=i64)}
  %ax = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[0]> : tensor<1xsi64>}} : () -> {_t(1, element=i64)}
  %sl = torch.operator "onnx.Slice"(%set, %s0, %s1, %ax) : ({_t(4, 3)}, {_t(1, element=i64)}, {_t(1, element=i64)}, {_t(1, element=i64)}) -> {_t(3, 3)}
  %pad = torch.operator "onnx.ConstantOfShape"(%shape) {{torch.onnx.value = dense<7.0> : tensor<1xf16>}} : ({_t(2, element=i64)}) -> {_t(4, 3)}
  %wide = torch.operator "onnx.Slice"(%pad, %s0, %s1, %ax) : ({_t(4, 3)}, {_t(1, element=i64)}, {_t(1, element=i64)}, {_t(1, element=i64)}) -> {_t(3, 3)}
  %sum = torch.operator "onnx.Add"(%sl, %wide) : ({_t(3, 3)}, {_t(3, 3)}) -> {_t(3, 3)}
  %t = torch.operator "onnx.Transpose"(%sum) {{torch.onnx.perm = [1 : si64, 0 : si64]}} : ({_t(3, 3)}) -> {_t(3, 3)}
  %u = torch.operator "onnx.Unsqueeze"(%t, %ax) : ({_t(3, 3)}, {_t(1, element=i64)}) -> {_t(1, 3, 3)}
  return %u : {_t(1, 3, 3)}
}}
"""
    image = np.zeros((4, 3), np.float16)
    image[[1, 3]] = [[1, 2, 3], [4, 5, 6]]
    want = (image[1:4] + 7).T[None]
    with ir.Context():
        module = ir.Module.parse(program)
        [unsqueeze] = onnx_sites(module, "Unsqueeze", lambda op: True)
        got = evaluate(unsqueeze.result)
    assert got is not None and got.shape == (1, 3, 3)
    np.testing.assert_array_equal(got, want)
