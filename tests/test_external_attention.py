"""Attention as an external Hopper kernel (tuner.rewrite.external_attention): which attentions the
kernel takes, its tiles, its launch ABI without a mask (Triton's PTX, the result the fourth
binding and the fifth pointer unread), the rewrite of a spelled-out attention into a call of one
extern dispatch (raised first), and (slow) what plain iree-compile embeds. Nothing here needs
Triton or a GPU; the kernels ran on the H200 (docs/benchmarks/external-kernels.md).

The PTX fixture is what Triton 3.9 wrote for tuner.external.triton_attention's kernel without a
mask (1 x 2 heads of 64 queries and keys, head 64, 64x64 tiles, 4 warps, 2 stages, sm_90a)."""

import re
from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tuner.external.abi import ExternKernel, KernelAbiError, for_iree
from tuner.external.attention_kernel import (AttentionProblem, AttentionTiles, attention_tile_candidates,
                                             attention_tiles_for, padded_width)
from tuner.rewrite import EXTERNAL_ATTENTION, rewrites_for
from tuner.rewrite.external_attention import external_attentions

FIXTURES = Path(__file__).parent / "fixtures" / "external"
NO_MASK = (FIXTURES / "triton_attention_1x2x64x64x64_nomask.ptx").read_text()


def test_without_a_mask_the_result_is_the_fourth_binding_and_the_fifth_pointer_is_dropped_unread():
    out = for_iree(NO_MASK, "_attention", "attention_k", 4)
    header = re.search(r"\.entry\s+attention_k\s*\((.*?)\)", out, re.S).group(1)
    assert [p.split()[-1] for p in header.split(",")] == [f"attention_k_param_{i}" for i in range(4)]
    # the kernel stores through its fourth parameter: the result
    stored = re.findall(r"st\.global[^\n]*", out)
    assert stored and "ld.param.b64" in out and "[attention_k_param_3]" in out
    assert out.count("wgmma.mma_async") == NO_MASK.count("wgmma.mma_async") > 0


def test_a_kernel_name_ptx_cannot_parse_is_refused_before_it_reaches_the_driver():
    # "rows2304.2304.2304" passed the compile and failed the driver's JIT at load on the H200
    with pytest.raises(KernelAbiError, match="no PTX identifier"):
        for_iree(NO_MASK, "_attention", "attention_rows2304.2304", 4)


@pytest.mark.parametrize("problem", [
    AttentionProblem(1, 12, 512, 512, 64, 64, rows=(2304, 2304, 2304), offsets=(0, 768, 1536),
                     seq_major=(True, True, True, True)),
    AttentionProblem(2, 32, 512, 512, 128, 128, mask=(1, 1, 512), causal=True, kv_heads=8),
])
def test_the_names_of_joined_masked_and_grouped_problems_are_ptx_identifiers(problem):
    out = for_iree(NO_MASK, "_attention", problem.name, 4)
    assert f".entry {problem.name}(" in out


@pytest.mark.parametrize("problem, why", [
    (AttentionProblem(1, 12, 512, 512, 100, 100), "head widths 100/100"),  # rows not whole 16-byte vectors
    (AttentionProblem(1, 8, 512, 512, 512, 512), "head widths 512/512"),  # past 256
    (AttentionProblem(1, 12, 512, 512, 64, 64, "bf16"), "bf16"),
    (AttentionProblem(2, 12, 512, 512, 64, 64, mask=(3, 1, 512)), "no broadcast"),
    (AttentionProblem(1, 12, 512, 512, 64, 64, mask=(1, 1, 512), mask_element="i1"), "i1 mask"),
    (AttentionProblem(1, 12, 512, 512, 64, 64, kv_heads=5), "5 key/value heads for 12 query heads"),
])
def test_attentions_the_kernel_does_not_take_say_why(problem, why):
    assert why in problem.why_not()


@pytest.mark.parametrize("d", [80, 96, 256])  # Phi-2's, Phi-3's and GPT-NeoX-20B's, Gemma's heads
def test_head_widths_that_are_no_power_of_two_or_past_128_are_taken(d):
    assert AttentionProblem(1, 32, 512, 512, d, d, causal=True).why_not() is None


@pytest.mark.parametrize("width, padded", [(8, 16), (16, 16), (40, 64), (80, 128), (96, 128), (128, 128), (136, 256)])
def test_a_head_is_computed_in_the_power_of_two_that_holds_it(width, padded):
    assert padded_width(width) == padded


def test_the_shared_memory_of_a_tile_is_its_stages_of_keys_and_values_and_one_block_of_queries():
    # Triton's compile of the kernel for sm_90a gave these (Gemma's 256-wide heads, 64x64, 3
    # stages: 3 x 64 x (256 + 256) x 2 bytes of K and V, 64 x 256 x 2 of Q; Phi-2's 80 as 128).
    assert AttentionTiles(64, 64, 4, 3).shared_bytes(AttentionProblem(1, 8, 1024, 1024, 256, 256)) == 229376
    assert AttentionTiles(128, 64, 4, 3).shared_bytes(AttentionProblem(1, 8, 1024, 1024, 80, 80)) == 131072


def test_tiles_too_big_for_a_wide_head_lose_stages_or_are_not_offered():
    gemma = AttentionProblem(1, 8, 4096, 4096, 256, 256, causal=True)
    # 128 rows of 4 warps would hold 256 accumulator values a thread; 128x64 on 8 warps fits at 2
    # stages (196608 bytes) but not 3 (262144); 128x128 on 8 warps fits at none.
    assert AttentionTiles(128, 64, 4, 3).fitted(gemma) is None
    assert AttentionTiles(128, 64, 8, 3).fitted(gemma) == AttentionTiles(128, 64, 8, 2)
    assert AttentionTiles(128, 128, 8, 2).fitted(gemma) is None
    assert attention_tiles_for(gemma) == AttentionTiles(64, 64, 4, 3)
    # no candidate holds 128 rows on 4 warps or 128 keys a step of 128 rows
    candidates = attention_tile_candidates(gemma, count=20)
    assert candidates[0] == AttentionTiles(64, 64, 4, 3) and AttentionTiles(128, 64, 8, 2) in candidates
    assert not any((t.bm == 128 and t.warps == 4) or (t.bm, t.bn) == (128, 128) for t in candidates)
    # a head of 64 keeps every tile as it is
    llama = AttentionProblem(1, 32, 1024, 1024, 64, 64, causal=True)
    assert AttentionTiles(128, 128, 8, 2).fitted(llama) == AttentionTiles(128, 128, 8, 2)


def test_a_broadcast_additive_mask_and_a_causal_flag_are_taken():
    assert AttentionProblem(2, 12, 512, 512, 64, 64, mask=(1, 12, 512), causal=True).why_not() is None


@pytest.mark.parametrize("problem, bm", [
    (AttentionProblem(8, 12, 197, 197, 64, 64), 128),  # 2 x 96 = 192 workgroups
    (AttentionProblem(1, 12, 512, 512, 64, 64), 64),   # 4 x 12 = 48 at 128 rows: 8 x 12 at 64
    (AttentionProblem(1, 32, 1024, 1024, 64, 64), 128),  # 8 x 32 = 256
    (AttentionProblem(512, 3, 49, 49, 32, 32), 64),  # Swin's windows: both fill a wave, 64 pads 15 rows, 128 79
])
def test_a_workgroups_query_rows_fill_a_wave_and_pad_the_queries_least(problem, bm):
    assert attention_tiles_for(problem).bm == bm


def _t(*dims: int, element: str = "f16") -> str:
    return f"!torch.vtensor<[{','.join(map(str, dims))}],{element}>"


def _attention(d: int = 64, element: str = "f16", mask: bool = True, mask_rows: int = 100) -> str:
    """A spelled-out attention as an ONNX import writes one: 2 images x 4 heads of 100 tokens,
    an additive mask [2, 1, mask_rows, 100] (100: causal-like, 1: a padding mask)."""
    e = element
    added = (f'  %a = torch.operator "onnx.Add"(%t, %m) : ({_t(2, 4, 100, 100, element=e)}, '
             f'{_t(2, 1, mask_rows, 100, element=e)}) -> {_t(2, 4, 100, 100, element=e)}\n') if mask else ""
    return f"""
func.func @f(%q: {_t(2, 4, 100, d, element=e)}, %k0: {_t(2, 100, 4, d, element=e)}, %v: {_t(2, 4, 100, d, element=e)},
             %c: {_t(element=e)}, %m: {_t(2, 1, mask_rows, 100, element=e)}) -> {_t(2, 4, 100, d, element=e)}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %kt = torch.operator "onnx.Transpose"(%k0) {{torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]}} : ({_t(2, 100, 4, d, element=e)}) -> {_t(2, 4, d, 100, element=e)}
  %s = torch.operator "onnx.MatMul"(%q, %kt) : ({_t(2, 4, 100, d, element=e)}, {_t(2, 4, d, 100, element=e)}) -> {_t(2, 4, 100, 100, element=e)}
  %t = torch.operator "onnx.Mul"(%s, %c) : ({_t(2, 4, 100, 100, element=e)}, {_t(element=e)}) -> {_t(2, 4, 100, 100, element=e)}
{added}  %p = torch.operator "onnx.Softmax"({'%a' if mask else '%t'}) {{torch.onnx.axis = -1 : si64}} : ({_t(2, 4, 100, 100, element=e)}) -> {_t(2, 4, 100, 100, element=e)}
  %o = torch.operator "onnx.MatMul"(%p, %v) : ({_t(2, 4, 100, 100, element=e)}, {_t(2, 4, 100, d, element=e)}) -> {_t(2, 4, 100, d, element=e)}
  return %o : {_t(2, 4, 100, d, element=e)}
}}
"""


def _stand_in(problem: AttentionProblem, tiles: AttentionTiles) -> ExternKernel:
    """The no-mask fixture's PTX under the problem's name (compiled here, never run)."""
    bindings = 5 if problem.mask else 4
    return ExternKernel(problem.name, for_iree(NO_MASK, "_attention", problem.name, 4), bindings, 128, 32768,
                        (-(-problem.m // tiles.bm), problem.z * problem.h, 1), tiles.label)


def _rewritten(program: str) -> tuple[list[AttentionProblem], list[str], str]:
    """`program` with its attentions rewritten, the kernels the stand-in's: the problems asked
    for, what the rewrite said, and the rewritten text."""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        changes = external_attentions(module, lambda p, t: made.append(p) or _stand_in(p, t))
        return made, changes, str(module)


def test_a_masked_attention_is_raised_and_becomes_one_extern_dispatch_of_q_k_v_and_the_mask():
    made, changes, text = _rewritten(_attention())
    # K is read as the program holds it, [2, 100, 4, 64] (the Transpose raise-attention writes
    # back from K^T is the head split's): seq-major, no transpose dispatch
    assert made == [AttentionProblem(2, 4, 100, 100, 64, 64, mask=(2, 1, 100), seq_major=(False, True, False, False))]
    assert changes == ["2x4x100x100x64x64_f16_mask2x1x100_k_bshd (64x64 w4 s3)"]
    for gone in ("onnx.Softmax", "onnx.MatMul", "scaled_dot_product_attention", "onnx.Transpose"):
        assert gone not in text
    call = next(line for line in text.splitlines() if "call @attention_2x4x100x100x64x64_f16_mask2x1x100_k_bshd" in line)
    assert call.count("tensor<2x4x100x64xf16>") == 3 and "tensor<2x100x4x64xf16>" in call
    assert "tensor<2x1x100x100xf16>" in call
    assert text.count("hal.dispatch.extern") == 1 and "workgroup_size = [128 : index, 1 : index, 1 : index]" in text
    assert '"onnx.Mul"(%arg0, %arg3)' in text  # the scale, carried into Q as raise-attention does


def test_heads_of_80_as_phi_2_has_become_one_extern_dispatch_of_their_own_width():
    made, changes, text = _rewritten(_attention(d=80))
    assert made == [AttentionProblem(2, 4, 100, 100, 80, 80, mask=(2, 1, 100), seq_major=(False, True, False, False))]
    assert "onnx.Softmax" not in text and text.count("hal.dispatch.extern") == 1
    call = next(line for line in text.splitlines() if "call @attention_2x4x100x100x80x80_f16_mask2x1x100_k_bshd" in line)
    assert call.count("tensor<2x4x100x80xf16>") == 3 and "tensor<2x100x4x80xf16>" in call


def test_an_attention_the_kernel_leaves_has_its_heads_padded_for_iree_and_one_it_takes_does_not():
    # Stable Diffusion 1.x's heads of 40: in f16 the kernel reads them as they are; in f32 the
    # raised op stays IREE's, whose attention pipeline lays out no MMA tile of 40 columns.
    both = _attention(d=40) + _attention(d=40, element="f32").replace("func.func @f(", "func.func @g(")
    with ir.Context():
        module = ir.Module.parse(both)
        changes = external_attentions(module, _stand_in)
        text = str(module)
    assert changes[0].startswith("2x4x100x100x40x40_f16")
    assert changes[1].endswith("(heads 40/40 padded to 64/64)") and "f32 (the kernel is f16)" in changes[1]
    assert text.count('"onnx.Pad"') == 3 and "[2,4,100,64],f32" in text and "[2,4,100,64],f16" not in text


def test_a_padding_mask_is_passed_to_the_kernel_broadcast_over_the_queries():
    with ir.Context():
        module = ir.Module.parse(_attention(mask_rows=1))
        assert external_attentions(module, _stand_in) == ["2x4x100x100x64x64_f16_mask2x1x1_k_bshd (64x64 w4 s3)"]
        assert "tensor<2x1x1x100xf16>" in str(module)


@pytest.mark.slow
def test_raise_attention_takes_a_padding_mask_and_computes_the_spelled_out_result_on_llvm_cpu(tmp_path):
    """A mask [2, 1, 1, 100] (a padding mask, as BERT's attention_mask exports) broadcast over the
    queries by IREE's lowering of the raised op: the same result as the spelled-out attention."""
    import numpy as np

    from tests.conftest import cpu_results
    from tuner.rewrite import RAISE_ATTENTION, rewrite_program

    source = tmp_path / "spelled.mlir"
    source.write_text(_attention(element="f32", mask_rows=1))
    assert rewrite_program(source, RAISE_ATTENTION, tmp_path / "raised.mlir") == ["2x4x100x100x64x64"]
    results = cpu_results((source, tmp_path / "raised.mlir"), [(2, 4, 100, 64), (2, 100, 4, 64), (2, 4, 100, 64), (),
                                                                (2, 1, 1, 100)], tmp_path)
    assert np.abs(results["raised"] - results["spelled"]).max() <= 1e-5 * np.abs(results["spelled"]).max()


def test_a_program_whose_attentions_the_kernel_does_not_take_is_not_rewritten(tmp_path):
    from tuner.rewrite import Rewrite, rewrite_program

    with ir.Context():
        assert external_attentions(ir.Module.parse(_attention(element="f32")), _stand_in) == []
    (tmp_path / "model.mlir").write_text(_attention(element="f32"))
    rewrite = Rewrite("external-flash-attention", lambda m: external_attentions(m, _stand_in), "")
    assert rewrite_program(tmp_path / "model.mlir", rewrite, tmp_path / "rewritten.mlir") == []
    assert not (tmp_path / "rewritten.mlir").exists()


def test_the_rewrite_is_offered_on_cuda_exactly_where_triton_is_installed():
    from importlib.util import find_spec

    from tuner.targets import parse_target

    assert (EXTERNAL_ATTENTION in rewrites_for(parse_target("cuda:sm_80"))) == (find_spec("triton") is not None)
    assert EXTERNAL_ATTENTION not in rewrites_for(parse_target("rocm:gfx942"))


@pytest.mark.slow
def test_plain_iree_compile_embeds_the_attention_kernel_as_a_dispatch_of_its_own(tmp_path):
    from tests.conftest import extern_ptx
    from tuner.rewrite import Rewrite, rewrite_program

    (tmp_path / "model.mlir").write_text(_attention(mask=False))
    rewrite = Rewrite("external-flash-attention", lambda m: external_attentions(m, _stand_in), "")
    assert rewrite_program(tmp_path / "model.mlir", rewrite, tmp_path / "rewritten.mlir")
    name = "attention_2x4x100x100x64x64_f16_k_bshd"
    assert extern_ptx(tmp_path / "rewritten.mlir", tmp_path, name) == \
        [for_iree(NO_MASK, "_attention", name, 4)]


def _exported_heads(scale_q: str = "3.535160e-01", out_transposed: bool = True) -> str:
    """An attention as torch.onnx.export writes F.scaled_dot_product_attention, raised: Q, K and V
    split into heads (Reshape [1, 16, 2, 64] elsewhere, here arguments) and transposed to
    [1, 2, 16, 64], Q and K each multiplied by the scale's square root (f16 constants), SDPA at
    scale 1, and its result transposed back."""
    bshd, bhsd, s = _t(1, 16, 2, 64), _t(1, 2, 16, 64), _t()
    perm = "{torch.onnx.perm = [0 : si64, 2 : si64, 1 : si64, 3 : si64]}"
    split = "\n".join(f'  %{x}t = torch.operator "onnx.Transpose"(%{x}) {perm} : ({bshd}) -> {bhsd}' for x in "qkv")
    back = (f'  %o = torch.operator "onnx.Transpose"(%r) {perm} : ({bhsd}) -> {bshd}\n  return %o : {bshd}'
            if out_transposed else f"  return %r : {bhsd}")
    return f"""
func.func @f(%q: {bshd}, %k: {bshd}, %v: {bshd}) -> {bshd if out_transposed else bhsd}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %cq = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<{scale_q}> : tensor<f16>}} : () -> {s}
  %ck = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<3.535160e-01> : tensor<f16>}} : () -> {s}
{split}
  %qs = torch.operator "onnx.Mul"(%qt, %cq) : ({bhsd}, {s}) -> {bhsd}
  %ks = torch.operator "onnx.Mul"(%kt, %ck) : ({bhsd}, {s}) -> {bhsd}
  %none = torch.constant.none
  %zero = torch.constant.float 0.000000e+00
  %false = torch.constant.bool false
  %one = torch.constant.float 1.000000e+00
  %r = torch.aten.scaled_dot_product_attention %qs, %ks, %vt, %none, %zero, %false, %one, %false : {bhsd}, {bhsd}, {bhsd}, !torch.none, !torch.float, !torch.bool, !torch.float, !torch.bool -> {bhsd}
{back}
}}
"""


@pytest.mark.parametrize("out_transposed", [True, False])
def test_the_exporters_head_split_is_read_as_it_lies_and_its_scalars_become_the_kernels_scale(out_transposed):
    made, _, text = _rewritten(_exported_heads(out_transposed=out_transposed))
    # 0.353516 (sqrt(1/8) in f16) on Q and on K: their product the kernel's scale
    assert made[0].seq_major == (True, True, True, out_transposed)
    assert made[0].scale == pytest.approx(0.35351563 ** 2, rel=1e-6)
    assert '"onnx.Mul"' not in text and '"onnx.Transpose"' not in text  # the head split's own, read through
    call = next(line for line in text.splitlines() if "call @attention_1x2x16x16x64x64_f16_" in line)
    assert call.count("tensor<1x16x2x64xf16>") == (4 if out_transposed else 3)


def test_a_mul_by_a_tensor_is_no_scale_and_q_stays_as_the_program_made_it():
    bhsd = _t(1, 2, 16, 64)
    program = _exported_heads().replace(f'"onnx.Mul"(%qt, %cq) : ({bhsd}, {_t()})', f'"onnx.Mul"(%qt, %qt) : ({bhsd}, {bhsd})')
    made, _, text = _rewritten(program)
    assert made[0].seq_major == (False, True, True, True) and made[0].scale == pytest.approx(0.35351563, rel=1e-6)
    assert text.count('"onnx.Mul"') == 1 and text.count('"onnx.Transpose"') == 1  # Q's own, kept


def _fused_heads() -> str:
    """_exported_heads with Q, K and V as GPT-2's export makes them: one [1, 16, 384] projection
    (an argument here) split in three on its last axis, each part reshaped to [1, 16, 2, 64]."""
    bshd, part, fused, shape = _t(1, 16, 2, 64), _t(1, 16, 128), _t(1, 16, 384), _t(4, element="si64")
    program = _exported_heads().replace(f"func.func @f(%q: {bshd}, %k: {bshd}, %v: {bshd})", f"func.func @f(%x: {fused})")
    lines = [f'  %to4 = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[1, 16, 2, 64]> : tensor<4xsi64>}} : () -> {shape}',
             f'  %p:3 = torch.operator "onnx.Split"(%x) {{torch.onnx.axis = 2 : si64, torch.onnx.num_outputs = 3 : si64}} : '
             f'({fused}) -> ({part}, {part}, {part})']
    lines += [f'  %{x} = torch.operator "onnx.Reshape"(%p#{i}, %to4) : ({part}, {shape}) -> {bshd}' for i, x in enumerate("qkv")]
    marker = "  %cq = "
    return program.replace(marker, "\n".join(lines) + "\n" + marker, 1)


def test_heads_split_from_one_fused_projection_are_read_from_it_at_their_offsets_not_copied():
    made, _, text = _rewritten(_fused_heads())
    assert made[0].seq_major == (True, True, True, True)
    assert made[0].rows == (384, 384, 384) and made[0].offsets == (0, 128, 256)  # q, k, v as the Split orders them
    assert not any(f'"onnx.{op}"' in text for op in ("Split", "Reshape", "Transpose", "Mul"))
    call = next(line for line in text.splitlines() if "call @attention_1x2x16x16x64x64_f16_" in line)
    assert "_rows384x384x384_at0x128x256" in call and call.count("tensor<1x16x384xf16>") == 3
    assert text.count("torch_c.to_builtin_tensor %arg0") == 3  # the projection itself, thrice


def test_a_split_part_with_another_user_is_copied_as_before():
    part = _t(1, 16, 128)
    program = _fused_heads().replace("  return %o", f'  %extra = torch.operator "onnx.Neg"(%p#1) : ({part}) -> {part}\n  return %o')
    made, _, _ = _rewritten(program)
    # K's part is used elsewhere: K read from its own copy; Q and V from the projection
    assert made[0].rows == (384, 0, 384) and made[0].offsets == (0, 0, 256)


def test_a_constant_mask_the_same_for_every_image_is_given_once_and_read_modulo_its_period():
    # Swin's window mask is every image's copy of one image's windows: here a mask of constants
    # [1, 1, 100, 100] expanded to both images of the batch
    one, both = _t(1, 1, 100, 100), _t(2, 1, 100, 100)
    program = _attention().replace('"onnx.Add"(%t, %m)', '"onnx.Add"(%t, %mc)').replace(
        "  %a = torch.operator", f"""  %m1 = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<-2.5> : tensor<1x1x100x100xf16>}} : () -> {one}
  %to = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<[2, 1, 100, 100]> : tensor<4xsi64>}} : () -> {_t(4, element="si64")}
  %mc = torch.operator "onnx.Expand"(%m1, %to) : ({one}, {_t(4, element="si64")}) -> {both}
  %a = torch.operator""", 1)
    made, _, text = _rewritten(program)
    assert made[0].mask == (1, 1, 100)  # z's period 1 of 2: the kernel reads it modulo 1
    call = next(line for line in text.splitlines() if "call @attention_2x4x100x100x64x64_f16_mask1x1x100" in line)
    assert "tensor<1x1x100x100xf16>" in call
    assert "torch.vtensor.literal(dense<-2.500000e+00> : tensor<1x1x100x100xf16>)" in text


@pytest.mark.parametrize("mask, why", [((3, 4, 100), "3 does not divide 2 x 4 z"), ((2, 3, 100), "3 heads of 4")])
def test_a_mask_whose_period_does_not_divide_z_is_refused(mask, why):
    assert AttentionProblem(8, 4, 100, 100, 64, 64, mask=mask).why_not(), why



def _grouped_query(v_repeated: bool = True, k_scaled: bool = True) -> str:
    """An attention of 4 query heads over 2 key/value heads as transformers' Llama and Mistral
    export it (decoders' repeat_kv): K and V [1, 2, 16, 64] each Unsqueezed at axis 2, Expanded
    to [1, 2, 2, 16, 64] and Reshaped to [1, 4, 16, 64]; K then multiplied by the scale's square
    root (an f16 constant), Q already scaled; SDPA at scale 1, causal. `v_repeated` False: V an
    argument of 4 heads of its own."""
    q, kv, s = _t(1, 4, 16, 64), _t(1, 2, 16, 64), _t()
    i64 = lambda n: _t(n, element="si64")  # noqa: E731

    def repeat(x: str) -> str:
        return (f'  %{x}u = torch.operator "onnx.Unsqueeze"(%{x}, %axis) : ({kv}, {i64(1)}) -> {_t(1, 2, 1, 16, 64)}\n'
                f'  %{x}e = torch.operator "onnx.Expand"(%{x}u, %wide) : ({_t(1, 2, 1, 16, 64)}, {i64(5)}) -> {_t(1, 2, 2, 16, 64)}\n'
                f'  %{x}r = torch.operator "onnx.Reshape"(%{x}e, %to4) : ({_t(1, 2, 2, 16, 64)}, {i64(4)}) -> {q}')
    mul = f'  %ks = torch.operator "onnx.Mul"(%kr, %c) : ({q}, {s}) -> {q}' if k_scaled else ""
    return f"""
func.func @f(%q: {q}, %k: {kv}, %v: {kv if v_repeated else q}) -> {q}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %c = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<3.535160e-01> : tensor<f16>}} : () -> {s}
  %axis = torch.vtensor.literal(dense<2> : tensor<1xsi64>) : {i64(1)}
  %wide = torch.vtensor.literal(dense<[1, 2, 2, 16, 64]> : tensor<5xsi64>) : {i64(5)}
  %to4 = torch.vtensor.literal(dense<[1, 4, 16, 64]> : tensor<4xsi64>) : {i64(4)}
{repeat("k")}
{repeat("v") if v_repeated else ""}
{mul}
  %none = torch.constant.none
  %zero = torch.constant.float 0.000000e+00
  %true = torch.constant.bool true
  %false = torch.constant.bool false
  %one = torch.constant.float 1.000000e+00
  %r = torch.aten.scaled_dot_product_attention %q, {"%ks" if k_scaled else "%kr"}, {"%vr" if v_repeated else "%v"}, %none, %zero, %true, %one, %false : {q}, {q}, {q}, !torch.none, !torch.float, !torch.bool, !torch.float, !torch.bool -> {q}
  return %r : {q}
}}
"""


@pytest.mark.parametrize("k_scaled", [True, False])
def test_grouped_query_keys_and_values_are_read_before_repeat_kv_copies_them(k_scaled):
    """Each of the 2 K/V heads serves 2 query heads in the kernel (IREE wrote the repeated copies:
    a Mistral-7B layer's two broadcast dispatches); K's Mul by the scale's square root goes into
    the kernel's scale."""
    made, changed, text = _rewritten(_grouped_query(k_scaled=k_scaled))
    assert made[0].kv_heads == 2 and made[0].h == 4 and changed[0].startswith("1x4x16x16x64x64_f16_causal_gqa2 ")
    assert made[0].scale == pytest.approx(0.35351563 if k_scaled else 1.0, rel=1e-6)
    assert not any(f'"onnx.{op}"' in text for op in ("Unsqueeze", "Expand", "Reshape", "Mul"))
    call = next(line for line in text.splitlines() if "call @attention_1x4x16x16x64x64_f16_causal_gqa2(" in line)
    assert call.count("tensor<1x2x16x64xf16>") == 2


def test_keys_repeated_where_values_are_not_are_read_as_repeated():
    """Only K repeated (V of 4 heads of its own): no one K/V head count, the kernel reads K's copy
    and the program still makes it."""
    made, _, text = _rewritten(_grouped_query(v_repeated=False))
    assert made and made[0].kv_heads == 0 and "_gqa" not in made[0].name
    assert made[0].scale == pytest.approx(1.0) and '"onnx.Expand"' in text and '"onnx.Mul"' in text


def test_grouped_query_heads_are_a_constant_of_the_kernel_and_their_rows_as_wide_as_their_own_heads():
    from tuner.external.triton_attention import constants

    tiles = AttentionTiles(128, 64, 4, 3)
    gqa = constants(AttentionProblem(1, 32, 512, 512, 128, 128, seq_major=(True, True, True, True), kv_heads=8), tiles)
    assert (gqa["G"], gqa["QR"], gqa["KR"], gqa["VR"]) == (4, 32 * 128, 8 * 128, 8 * 128)
    assert constants(AttentionProblem(1, 32, 512, 512, 128, 128), tiles)["G"] == 1



def _joined_heads() -> str:
    """_exported_heads with Q, K and V as join-sibling-linears leaves them: one [1, 16, 384]
    projection (an argument here) reshaped into 6 heads of 64, each of Q, K, V a Slice of 2
    whole heads of it."""
    bshd, fused, heads, i64 = _t(1, 16, 2, 64), _t(1, 16, 384), _t(1, 16, 6, 64), _t(1, element="si64")
    program = _exported_heads().replace(f"func.func @f(%q: {bshd}, %k: {bshd}, %v: {bshd})", f"func.func @f(%x: {fused})")
    lines = [f'  %to6 = torch.vtensor.literal(dense<[1, 16, 6, 64]> : tensor<4xsi64>) : {_t(4, element="si64")}',
             f'  %h = torch.operator "onnx.Reshape"(%x, %to6) : ({fused}, {_t(4, element="si64")}) -> {heads}',
             f'  %axis = torch.vtensor.literal(dense<2> : tensor<1xsi64>) : {i64}',
             f'  %step = torch.vtensor.literal(dense<1> : tensor<1xsi64>) : {i64}']
    for i, x in enumerate("qkv"):
        lines += [f'  %{x}0 = torch.vtensor.literal(dense<{2 * i}> : tensor<1xsi64>) : {i64}',
                  f'  %{x}1 = torch.vtensor.literal(dense<{2 * i + 2}> : tensor<1xsi64>) : {i64}',
                  f'  %{x} = torch.operator "onnx.Slice"(%h, %{x}0, %{x}1, %axis, %step) : '
                  f'({heads}, {i64}, {i64}, {i64}, {i64}) -> {bshd}']
    marker = "  %cq = "
    return program.replace(marker, "\n".join(lines) + "\n" + marker, 1)


def test_heads_sliced_from_joined_linears_are_read_from_the_joined_projection_at_their_offsets():
    """join-sibling-linears' Q, K and V: whole heads sliced from one projection reshaped into
    heads; the kernel reads each from the projection's rows, and the Slices and the Reshape go."""
    made, _, text = _rewritten(_joined_heads())
    assert made[0].seq_major == (True, True, True, True)
    assert made[0].rows == (384, 384, 384) and made[0].offsets == (0, 128, 256)
    assert not any(f'"onnx.{op}"' in text for op in ("Slice", "Reshape", "Transpose", "Mul"))
    assert text.count("torch_c.to_builtin_tensor %arg0") == 3


def test_a_strided_or_partial_head_slice_is_read_as_it_is():
    program = _joined_heads().replace("dense<1> : tensor<1xsi64>", "dense<2> : tensor<1xsi64>", 1)  # step 2
    made, _, _ = _rewritten(program)
    assert made[0].rows == (0, 0, 0)


def _multi_query() -> str:
    """Multi-query attention as Falcon's export spells it: Q [1, 4, 16, 64] against K and V of one
    head [1, 1, 16, 64], broadcast by the MatMuls (no repeat_kv), Kᵀ by a Transpose."""
    q, kv, kt, p = _t(1, 4, 16, 64), _t(1, 1, 16, 64), _t(1, 1, 64, 16), _t(1, 4, 16, 16)
    return f"""
func.func @f(%q: {q}, %k: {kv}, %v: {kv}) -> {q}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %kt = torch.operator "onnx.Transpose"(%k) {{torch.onnx.perm = [0 : si64, 1 : si64, 3 : si64, 2 : si64]}} : ({kv}) -> {kt}
  %s = torch.operator "onnx.MatMul"(%q, %kt) : ({q}, {kt}) -> {p}
  %a = torch.operator "onnx.Softmax"(%s) {{torch.onnx.axis = -1 : si64}} : ({p}) -> {p}
  %o = torch.operator "onnx.MatMul"(%a, %v) : ({p}, {kv}) -> {q}
  return %o : {q}
}}
"""


def test_multi_query_attention_broadcast_by_its_matmuls_is_raised_with_k_and_v_expanded():
    from tuner.rewrite.attention import raise_attention

    with ir.Context():
        module = ir.Module.parse(_multi_query())
        assert raise_attention(module) == ["1x4x16x16x64x64"]
        text = str(module)
    assert text.count('"onnx.Expand"') == 2 and "torch.aten.scaled_dot_product_attention" in text
    assert '"onnx.Softmax"' not in text and '"onnx.MatMul"' not in text


def test_multi_query_keys_and_values_are_read_as_one_head_for_every_query_head():
    made, changed, text = _rewritten(_multi_query())
    assert made[0].kv_heads == 1 and made[0].h == 4 and changed[0].startswith("1x4x16x16x64x64_f16_gqa1 ")
    assert '"onnx.Expand"' not in text
    call = next(line for line in text.splitlines() if "call @attention_1x4x16x16x64x64_f16_gqa1(" in line)
    assert call.count("tensor<1x1x16x64xf16>") == 2


def _raised_against_spelled(tmp_path, program: str, arguments: list) -> float:
    """The relative error of `program`'s attention raised (the GPU rewrite) against it as spelled
    out, both built for llvm-cpu and run on `arguments` (numpy arrays)."""
    from tests.conftest import iree_compile
    from tuner.evaluation.runtime_tools import ModuleRun, relative_error, run_once
    from tuner.rewrite import RAISE_ATTENTION_GPU, rewrite_program
    from tuner.targets import parse_target

    spelled, raised = tmp_path / "spelled.mlir", tmp_path / "raised.mlir"
    spelled.write_text(program)
    assert len(rewrite_program(spelled, RAISE_ATTENTION_GPU, raised)) == 1
    inputs = [tmp_path / f"arg{i}.npy" for i in range(len(arguments))]
    for path, array in zip(inputs, arguments):
        np.save(path, array)
    outputs = {}
    for name, built in (("spelled", spelled), ("raised", raised)):
        iree_compile(str(built), *parse_target("llvm-cpu").compile_flags, "-o", str(tmp_path / f"{name}.vmfb"))
        run = run_once(tmp_path / f"{name}.vmfb", ModuleRun("local-task", "f", tuple(inputs)), tmp_path / f"{name}.npy")
        assert run.ok, run.stderr
        outputs[name] = np.load(tmp_path / f"{name}.npy").astype(np.float32)
    return relative_error(outputs["raised"], outputs["spelled"])


@pytest.mark.slow
def test_raised_multi_query_attention_computes_the_spelled_out_one_on_llvm_cpu(tmp_path):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(shape).astype(np.float16) for shape in [(1, 4, 16, 64), (1, 1, 16, 64), (1, 1, 16, 64)])
    assert _raised_against_spelled(tmp_path, _multi_query(), [q, k, v]) < 2e-3


def _upcast_scores(mask_first: bool = False) -> str:
    """GPT-J's eager attention as exported: Q and K [1, 4, 16, 64] f16 cast to f32, Kᵀ by a
    Transpose, the scores divided by √64 and an f32 causal mask added in f32, the softmax's
    result cast back to f16 for the MatMul with V; `mask_first`: the mask added before the
    division (CodeGen's)."""
    q, q32, kt32, p32, p = _t(1, 4, 16, 64), _t(1, 4, 16, 64, element="f32"), _t(1, 4, 64, 16, element="f32"), \
        _t(1, 4, 16, 16, element="f32"), _t(1, 4, 16, 16)
    m32, s32 = _t(1, 1, 16, 16, element="f32"), _t(element="f32")
    scored = (f'  %a = torch.operator "onnx.Add"(%s, %m) : ({p32}, {m32}) -> {p32}\n'
              f'  %l = torch.operator "onnx.Div"(%a, %c) : ({p32}, {s32}) -> {p32}' if mask_first else
              f'  %d = torch.operator "onnx.Div"(%s, %c) : ({p32}, {s32}) -> {p32}\n'
              f'  %l = torch.operator "onnx.Add"(%d, %m) : ({p32}, {m32}) -> {p32}')
    return f"""
func.func @f(%q: {q}, %k: {q}, %v: {q}, %m: {m32}) -> {q}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %c = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<8.0> : tensor<f32>}} : () -> {s32}
  %q32 = torch.operator "onnx.Cast"(%q) {{torch.onnx.to = 1 : si64}} : ({q}) -> {q32}
  %k32 = torch.operator "onnx.Cast"(%k) {{torch.onnx.to = 1 : si64}} : ({q}) -> {q32}
  %kt = torch.operator "onnx.Transpose"(%k32) {{torch.onnx.perm = [0 : si64, 1 : si64, 3 : si64, 2 : si64]}} : ({q32}) -> {kt32}
  %s = torch.operator "onnx.MatMul"(%q32, %kt) : ({q32}, {kt32}) -> {p32}
{scored}
  %w = torch.operator "onnx.Softmax"(%l) {{torch.onnx.axis = -1 : si64}} : ({p32}) -> {p32}
  %w16 = torch.operator "onnx.Cast"(%w) {{torch.onnx.to = 10 : si64}} : ({p32}) -> {p}
  %o = torch.operator "onnx.MatMul"(%w16, %v) : ({p}, {q}) -> {q}
  return %o : {q}
}}
"""


@pytest.mark.parametrize("mask_first", [False, True])
def test_scores_computed_in_f32_from_q_and_k_cast_up_are_raised_from_the_f16_q_and_k(mask_first):
    from tuner.rewrite.attention import raise_attention

    with ir.Context():
        module = ir.Module.parse(_upcast_scores(mask_first))
        assert raise_attention(module) == ["1x4x16x16x64x64"]
        text = str(module)
    sdpa = next(line for line in text.splitlines() if "torch.aten.scaled_dot_product_attention" in line)
    assert sdpa.count("!torch.vtensor<[1,4,16,64],f16>") == 4 and "!torch.vtensor<[1,1,16,16],f16>" in sdpa
    assert '"onnx.Softmax"' not in text and '"onnx.MatMul"' not in text
    assert text.count('"onnx.Div"') == 1 + mask_first  # Q divided; and the mask, where it came first


@pytest.mark.slow
@pytest.mark.parametrize("mask_first", [False, True])
def test_raised_f32_scores_compute_the_spelled_out_attention_on_llvm_cpu(tmp_path, mask_first):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 4, 16, 64)).astype(np.float16) for _ in range(3))
    causal = np.triu(np.full((16, 16), -3.0e38, np.float32), 1).reshape(1, 1, 16, 16)
    assert _raised_against_spelled(tmp_path, _upcast_scores(mask_first), [q, k, v, causal]) < 2e-3


def _sdpa_with_gqa(kv: int, gqa: str) -> str:
    q, k = _t(1, 4, 16, 64), _t(1, kv, 16, 64)
    return f"""
func.func @f(%q: {q}, %k: {k}, %v: {k}) -> {q} {{
  %none = torch.constant.none
  %zero = torch.constant.float 0.000000e+00
  %true = torch.constant.bool true
  %gqa = torch.constant.bool {gqa}
  %r = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %zero, %true, %none, %gqa : {q}, {k}, {k}, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> {q}
  return %r : {q}
}}
"""


def test_an_sdpa_with_enable_gqa_reads_each_kv_head_for_its_group_of_query_heads():
    """As iree-turbine carries torch's F.scaled_dot_product_attention(..., enable_gqa=True): K and
    V of 2 heads for Q's 4, the scale left to 1/sqrt(64)."""
    made, changed, text = _rewritten(_sdpa_with_gqa(2, "true"))
    assert made == [AttentionProblem(1, 4, 16, 16, 64, 64, causal=True, scale=0.125, kv_heads=2)]
    assert changed[0].startswith("1x4x16x16x64x64_f16_causal_gqa2 ")
    assert "scaled_dot_product_attention" not in text
    # without the flag, K and V of other heads than Q's are no attention the kernel computes
    made, changed, _ = _rewritten(_sdpa_with_gqa(2, "false"))
    assert made == [] and changed == []
