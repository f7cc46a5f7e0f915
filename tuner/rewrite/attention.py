"""Raising spelled-out attention into one attention op, in an ONNX model's import.

`iree-import-onnx` keeps a model's ops as they are written: an attention written with MatMul,
Softmax and MatMul (BERT-style exports) reaches IREE as two batch matmuls and a softmax, three
dispatches that write and read the whole score matrix, and no IREE 3.13 flag raises them into
`iree_linalg_ext.attention` (measured: BENCHMARKS.md). This rewrite does, in the torch dialect:

    MatMul(Q, [Mul(., c) | Div(., c) of] Transpose(K0, perm)) [-> Mul(., c) | Div(., c)] [-> Add(., mask)]
        -> [Cast to f32 ->] Softmax(axis=-1) [-> Cast back] -> MatMul(., V)

becomes `torch.aten.scaled_dot_product_attention(Q', K, V, mask, scale=1.0)` with Q' = Mul(Q, c)
(or Div(Q, c)): (cQ)K^T = c(QK^T), so the scale constant is carried over as the model holds it and
never read. The transpose may be any that puts K0's head dim before its sequence dim (torch's
exports of rank-4 heads write `[b, t, h, d] -> [b, h, d, t]` as one transpose): K is K0 under the
same permutation with the last two dims swapped back, a transpose of its own unless that is the
identity; a scale on K^T (torch's export of scaled_dot_product_attention splits the scale over Q
and K^T) is applied to K. A softmax taken in f32 between two casts (as transformers' eager
attention exports) is taken in the attention op's own precision (IREE's attention keeps f32
statistics); the numerics at the model's output are compared by the flag stage. An additive mask (a causal mask [.., M, N], or a padding mask [.., 1, N] broadcast
over the queries: IREE's lowering broadcasts it, right on llvm-cpu) is passed as the op's float
mask, reshaped to the scores' rank with leading 1s where it has fewer dims (the lowering takes a
mask of the same rank only); a mask that is a constant of zeros (what the exporter bakes in for
a model exported without an attention mask: ViT's and BERT's from transformers) is no mask and
is dropped; a mask added before the scale (CodeGen's) is scaled as the scores are. IREE 3.13 broadcasts a smaller mask in a
dispatch of its own unless a flag fuses it into the attention (aggressive fusion, O3: measured),
which the flag stage tries with the rewrite. IREE lowers the op to one attention dispatch that the attention pipeline tunes.
Only matches where every intermediate has no other use are rewritten.

torch.onnx.export (dynamo, torch 2.11) writes `F.scaled_dot_product_attention` (transformers' SDPA
attention: Llama, Qwen2, BERT, ViT, Whisper) in its own form, which the rewrite takes too:
Kᵀ as `Reshape(Transpose(Reshape(K, [-1, s, d]), [0, 2, 1]), [..., d, s])` (a rank-3 transpose of
the heads flattened), √scale multiplied into Q and into Kᵀ each, and the probabilities guarded by
`Where(IsNaN(P), 0, P)` (a row whose every score is masked to -inf gives NaN, which SDPA makes 0).
The guard is dropped: the attention op gives such a row no NaN-free meaning either, so the raised
model matches the exported one wherever no row is wholly masked (a causal mask, a padding mask
over some keys; checked on the model's own output by the flag stage). A shifted window's second
mask between the mask and the softmax (Swin's) is folded into the first (tuner.rewrite.window_mask).
BLOOM's scores, computed over heads flattened into the batch with its ALiBi bias added there, are
first computed per head with the bias and the causal mask summed into one mask
(tuner.rewrite.alibi_scores); DeBERTa's likewise, its relative-position terms and its boolean
`Where` mask made one additive mask (tuner.rewrite.flattened_scores). Keys and values repeated
for grouped-query heads (`Unsqueeze`, `Expand`, `Reshape`) stay as the model writes them: the
attention op reads the repeated operands; K and V of fewer heads that the MatMuls broadcast
against Q's (Falcon's multi-query attention) are expanded to Q's heads (`onnx.Expand`). Scores
computed in f32 from Q and K cast up from f16 (GPT-J's eager attention: Cast, MatMul, Div, Add
of an f32 mask, Softmax, Cast back) are taken from the f16 Q and K, the mask and scale cast down
(the op keeps f32 statistics; the products are the same).

With `pad_heads` (the GPU rewrite), a head dim that is not a power of two (Stable Diffusion
1.x's 40, or 80 or 96) is padded with zeros in Q, K and V up to the next one and the result sliced
back: IREE 3.13 lays out a promoted tile only when its rows are whole 16-byte vectors over lanes
that divide a subgroup (pipelines.llvmgpu_vector_distribute_attention.lays_out), so no MMA config
of such an attention compiles, and the compiler's own config for it is a scalar one (3.85 ms
against 0.02 ms tuned for a cross-attention over 77 keys on the H100). The scores are unchanged
(the added zeros add nothing to Q K^T, and the scale is the model's own, carried in Q), and the
added value columns are dropped, so the result is the same to rounding."""

from __future__ import annotations

from iree.compiler import ir

from tuner.external.attention_kernel import padded_width
from tuner.rewrite.alibi_scores import unflatten_alibi_scores
from tuner.rewrite.flattened_scores import unflatten_disentangled_scores
from tuner.rewrite.attention_site import AttentionSite, find_attention, scalar_side
from tuner.rewrite.torch_ops import (ONNX_OP, element_type, int64_literal, is_onnx, keep_leading, onnx_op, pad_end,
                                     producer, si64, si64_array, static_shape, zero_constant)
from tuner.rewrite.window_mask import folded_mask

SDPA = "torch.aten.scaled_dot_product_attention"


def _cast_to(value: ir.Value, element: str, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`value` cast (onnx.Cast) to `element` ("f16", "bf16" or "f32"), or itself where it is that already."""
    if element_type(value) == element:
        return value
    to = {"f16": 10, "bf16": 16, "f32": 1}[element]
    return onnx_op("Cast", [value], static_shape(value), element, ip, loc, to=si64(to))


def _constant(name: str, result: str, ip: ir.InsertionPoint, loc: ir.Location, **attrs: ir.Attribute) -> ir.Value:
    op = ir.Operation.create(name, results=[ir.Type.parse(result)], attributes=attrs, loc=loc, ip=ip)
    return op.result


def _scaled_mask(site: AttentionSite, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """The site's mask, scaled as the scores are where it is added before the scale."""
    if not site.scaled_mask:
        return site.mask_value
    scalar = _cast_to(site.scale.operands[scalar_side(site.scale)], element_type(site.mask_value), ip, loc)
    return onnx_op(ir.StringAttr(site.scale.attributes["name"]).value.removeprefix("onnx."), [site.mask_value, scalar],
                   static_shape(site.mask_value), element_type(site.mask_value), ip, loc)


def _mask_operand(mask: ir.Value, rank: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`mask`, reshaped (onnx.Reshape) to the scores' `rank` if it has fewer dims."""
    dims = static_shape(mask)
    if len(dims) == rank:
        return mask
    full = [1] * (rank - len(dims)) + dims
    element = str(mask.type).rsplit(",", 1)[-1]  # "f16>"
    reshaped = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, full))}],{element}")
    return ir.Operation.create(ONNX_OP, results=[reshaped], operands=[mask, int64_literal(full, ip, loc)],
                               attributes={"name": ir.StringAttr.get("onnx.Reshape")}, loc=loc, ip=ip).result


def _expanded(value: ir.Value, leading: tuple[int, ...], ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`value` broadcast (onnx.Expand) to the leading dims `leading` (none: itself), as the
    MatMuls broadcast K and V of fewer heads against Q's."""
    if not leading:
        return value
    shape = [*leading, *static_shape(value)[-2:]]
    return onnx_op("Expand", [value, int64_literal(shape, ip, loc)], shape, element_type(value), ip, loc)


def _key_operand(site: AttentionSite, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """K for the attention op: K0 under the site's permutation (an onnx.Transpose of its own where
    that is not the identity), broadcast to Q's heads where the MatMul broadcast it, then scaled
    as K^T was (the form transformers' repeat_kv gives: tuner.rewrite.external_attention reads K
    before the repeat)."""
    key = site.key
    element = str(key.type).rsplit(",", 1)[-1]
    if site.key_reshape:
        key = onnx_op("Reshape", [key, int64_literal(list(site.key_reshape), ip, loc)], list(site.key_reshape),
                      element_type(key), ip, loc)
    elif site.key_perm:
        perm = si64_array(list(site.key_perm))
        shape = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, site.key_shape))}],{element}")
        key = ir.Operation.create(ONNX_OP, results=[shape], operands=[key],
                                  attributes={"name": ir.StringAttr.get("onnx.Transpose"), "torch.onnx.perm": perm},
                                  loc=loc, ip=ip).result
    key = _expanded(key, site.broadcast, ip, loc)
    if site.key_scale is not None:
        scalar = site.key_scale.operands[scalar_side(site.key_scale)]
        key = ir.Operation.create(ONNX_OP, results=[key.type], operands=[key, scalar],
                                  attributes={"name": site.key_scale.attributes["name"]}, loc=loc, ip=ip).result
    return key


def _erase_unused_chain(op: ir.Operation) -> None:
    """`op` erased if nothing reads it, then the op making its first operand likewise, while that is
    a Transpose or Reshape (the export's Kᵀ chain)."""
    while op is not None and not list(op.results[0].uses):
        before = producer(op.operands[0])
        op.erase()
        op = before if is_onnx(before, "Transpose") or is_onnx(before, "Reshape") else None


def _padded_head(value: ir.Value, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`value` with zeros added to its last dim up to padded_width, or itself where it is that
    wide already."""
    width = static_shape(value)[-1]
    return pad_end(value, padded_width(width) - width, ip, loc) if padded_width(width) != width else value


def pad_heads_of(sdpa: ir.Operation) -> str:
    """A raised attention (`SDPA`) whose head dims are no power of two recomputed on Q, K and V
    padded with zeros to one (padded_width), the added value columns sliced off its result; the
    op is replaced. Says what it padded ("" where the heads are powers of two already)."""
    query, key, value = sdpa.operands[:3]
    widths = (static_shape(query)[-1], static_shape(value)[-1])
    if all(padded_width(w) == w for w in widths):
        return ""
    ip, loc = ir.InsertionPoint(sdpa), sdpa.location
    padded = [_padded_head(x, ip, loc) for x in (query, key, value)]
    shape = [*static_shape(sdpa.result)[:-1], static_shape(padded[2])[-1]]
    out_type = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{element_type(value)}>")
    wide = ir.Operation.create(SDPA, results=[out_type], operands=[*padded, *sdpa.operands[3:]], loc=loc, ip=ip)
    sdpa.result.replace_all_uses_with(keep_leading(wide.result, widths[1], ip, loc))
    sdpa.erase()
    return f" (heads {widths[0]}/{widths[1]} padded to {static_shape(padded[0])[-1]}/{shape[-1]})"


def raise_attention(module: ir.Module, pad_heads: bool = False) -> list[str]:
    """Rewrite every site of `find_attention` in place (inside the module's context); returns
    each rewritten attention's shape (batch x M x N x K1 x K2), and with `pad_heads` the head
    dims it padded (padded_width)."""
    unflatten_alibi_scores(module)  # BLOOM's: scores over flattened heads, an ALiBi bias, then a per-head mask
    unflatten_disentangled_scores(module)  # DeBERTa's: scores over flattened heads, relative terms, a boolean mask
    done = []
    for site in find_attention(module):
        ip, loc = ir.InsertionPoint(site.output), site.output.location
        query = site.query
        if site.scale is not None:
            scalar = next(x for x in site.scale.operands if static_shape(x) in ([], [1]))
            scalar = _cast_to(scalar, element_type(site.query), ip, loc)
            query = ir.Operation.create(ONNX_OP, results=[site.query.type], operands=[site.query, scalar],
                                        attributes={"name": site.scale.attributes["name"]}, loc=loc, ip=ip).result
        key = _key_operand(site, ip, loc)
        none = _constant("torch.constant.none", "!torch.none", ip, loc)
        rank = len(static_shape(site.output.results[0]))
        zero_mask = site.mask_value is not None and site.window is None and zero_constant(site.mask_value)
        mask = none if site.mask_value is None or zero_mask else _mask_operand(
            _cast_to(_scaled_mask(site, ip, loc), element_type(site.query), ip, loc), rank, ip, loc)
        if site.window is not None:
            mask = folded_mask(site.window, site.mask_value, ip, loc)
        zero = _constant("torch.constant.float", "!torch.float", ip, loc, value=ir.FloatAttr.get_f64(0.0))
        one = _constant("torch.constant.float", "!torch.float", ip, loc, value=ir.FloatAttr.get_f64(1.0))
        false = _constant("torch.constant.bool", "!torch.bool", ip, loc, value=ir.BoolAttr.get(False))
        value = _expanded(site.value, site.broadcast, ip, loc)
        sdpa = ir.Operation.create(SDPA, results=[site.output.results[0].type],
                                   operands=[query, key, value, mask, zero, false, one, false], loc=loc, ip=ip)
        site.output.results[0].replace_all_uses_with(sdpa.result)
        padded = pad_heads_of(sdpa) if pad_heads else ""
        done.append(site.shape + padded + (" (a zero mask dropped)" if zero_mask else "")
                    + (" (shifted windows' mask folded)" if site.window else ""))
        for op in (site.output, *site.guard[::-1], *site.casts[:1], site.softmax, *site.casts[1:],
                   *(site.window.ops if site.window else ()),
                   *((site.scale, site.mask) if site.scaled_mask else (site.mask, site.scale)), site.scores, site.key_scale):
            if op is not None:
                op.erase()
        _erase_unused_chain(site.transpose)
    if done:
        module.operation.verify()
    return done
