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
is dropped; a mask added before the scale is not taken. IREE 3.13 broadcasts a smaller mask in a
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
mask between the mask and the softmax (Swin's) is folded into the first (tuner.rewrite.window_mask). Keys and values repeated
for grouped-query heads (`Unsqueeze`, `Expand`, `Reshape`) stay as the model writes them: the
attention op reads the repeated operands.

With `pad_heads` (the GPU rewrite), a head dim that is not a power of two (Stable Diffusion
1.x's 40, or 80 or 96) is padded with zeros in Q, K and V up to the next one and the result sliced
back: IREE 3.13 lays out a promoted tile only when its rows are whole 16-byte vectors over lanes
that divide a subgroup (pipelines.llvmgpu_vector_distribute_attention.lays_out), so no MMA config
of such an attention compiles, and the compiler's own config for it is a scalar one (3.85 ms
against 0.02 ms tuned for a cross-attention over 77 keys on the H100). The scores are unchanged
(the added zeros add nothing to Q K^T, and the scale is the model's own, carried in Q), and the
added value columns are dropped, so the result is the same to rounding."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.torch_ops import (ONNX_OP, element_type, int64_literal, int_list, is_onnx, keep_leading, onnx_op,
                                     pad_end, producer, si64_array, single_use, static_shape, zero_constant)
from tuner.rewrite.window_mask import WindowChain, folded_mask, window_chain

SDPA = "torch.aten.scaled_dot_product_attention"


@dataclass(frozen=True)
class AttentionSite:
    """One spelled-out attention: the ops that go and what replaces them."""

    output: ir.Operation  # MatMul(P, V)
    softmax: ir.Operation
    scale: Optional[ir.Operation]  # Mul or Div by a scalar between the scores and the softmax
    mask: Optional[ir.Operation]  # Add of a mask between the (scaled) scores and the softmax
    mask_value: Optional[ir.Value]  # the operand of `mask` that is the mask
    scores: ir.Operation  # MatMul(Q, K^T)
    transpose: ir.Operation  # Transpose(K0) giving K^T (perhaps scaled by key_scale), or the export's Reshape of it
    query: ir.Value
    key: ir.Value  # K0: K is it under `key_perm`, or reshaped to `key_reshape`
    value: ir.Value
    key_perm: tuple[int, ...] = ()  # the permutation of K0 that gives K (empty: K is K0)
    key_scale: Optional[ir.Operation] = None  # Mul or Div of K^T by a scalar
    casts: tuple[ir.Operation, ...] = ()  # the Casts around an f32 softmax
    guard: tuple[ir.Operation, ...] = ()  # IsNaN and Where of the export's Where(IsNaN(P), 0, P)
    key_reshape: tuple[int, ...] = ()  # K's shape where K0 has other leading dims (GQA's repeated heads)
    window: Optional[WindowChain] = None  # a shifted window's second mask, between the mask and the softmax
    # Q's leading dims where K's and V's broadcast to them in the MatMuls (multi-query attention as
    # Falcon's export writes it: K and V of one head against Q's heads); empty where they are Q's.
    broadcast: tuple[int, ...] = ()

    @property
    def key_shape(self) -> list[int]:
        """K's shape as the scores' MatMul reads it (before any broadcast to Q's heads)."""
        if self.key_reshape:
            return list(self.key_reshape)
        k0 = static_shape(self.key)
        return [k0[i] for i in self.key_perm] if self.key_perm else k0

    @property
    def shape(self) -> str:
        q, k, v = static_shape(self.query), self.key_shape, static_shape(self.value)
        return f"{'x'.join(map(str, q[:-2]))}x{q[-2]}x{k[-2]}x{q[-1]}x{v[-1]}"


def _site(op: ir.Operation) -> Optional[AttentionSite]:
    """The attention that ends in `op` (an onnx.MatMul), or None."""
    if not is_onnx(op, "MatMul"):
        return None
    probs, value = op.operands[0], op.operands[1]
    guard = _nan_guard(probs)
    if guard:
        probs = guard[1].operands[2]
    softmax, casts = producer(probs), ()
    if is_onnx(softmax, "Cast") and single_use(probs):  # an f32 softmax: Cast -> Softmax -> Cast back
        inner = producer(softmax.operands[0])
        before = producer(inner.operands[0]) if is_onnx(inner, "Softmax") else None
        if not (is_onnx(before, "Cast") and single_use(softmax.operands[0]) and single_use(inner.operands[0])
                and str(before.operands[0].type) == str(probs.type)):
            return None
        casts, softmax = (softmax, before), inner
    if not is_onnx(softmax, "Softmax") or len(list(probs.uses)) != (2 if guard else 1):
        return None
    rank = len(static_shape(probs) or [])
    axis = (ir.IntegerAttr(softmax.attributes["torch.onnx.axis"]).value if "torch.onnx.axis" in softmax.attributes
            else _default_softmax_axis(softmax))
    if rank < 3 or axis not in (-1, rank - 1):
        return None
    logits = casts[1].operands[0] if casts else softmax.operands[0]  # what the softmax reads, in the model's type
    window = window_chain(logits)
    logits = window.inner if window is not None else logits
    scores, mask, mask_value = producer(logits), None, None
    if is_onnx(scores, "Add") and single_use(logits):
        found = _mask_side(scores, static_shape(probs))
        if found is None:
            return None
        mask, mask_value, scores = scores, scores.operands[1 - found], producer(scores.operands[found])
        if not single_use(mask.operands[found]):
            return None
    scale = None
    if (is_onnx(scores, "Mul") or is_onnx(scores, "Div")) and single_use(logits):
        scalar = _scalar_side(scores)
        if scalar is None:
            return None
        scale = scores
        scores = producer(scores.operands[1 - scalar])
        if not single_use(scale.operands[1 - scalar]):
            return None
    elif mask is None and not single_use(logits):
        return None
    if not is_onnx(scores, "MatMul"):
        return None
    query, key_t = scores.operands[0], scores.operands[1]
    transpose, key_scale = producer(key_t), None
    if (is_onnx(transpose, "Mul") or is_onnx(transpose, "Div")) and single_use(key_t):
        scalar = _scalar_side(transpose)
        if scalar is None or not single_use(transpose.operands[1 - scalar]):
            return None
        key_scale, transpose = transpose, producer(transpose.operands[1 - scalar])
    flattened, key_reshape = _flattened_transpose(transpose, rank), ()
    if flattened is not None:
        perm, key = list(range(rank - 2)) + [rank - 1, rank - 2], flattened
        if len(static_shape(key)) != rank:  # K0 [b, kv, rep, s, d] flattened as [b*kv*rep, s, d]
            out = static_shape(transpose.results[0])
            key_reshape = (*out[:-2], out[-1], out[-2])
    elif is_onnx(transpose, "Transpose") and "torch.onnx.perm" in transpose.attributes:
        perm, key = int_list(transpose.attributes["torch.onnx.perm"]), transpose.operands[0]
    else:
        return None
    if sorted(perm) != list(range(rank)):
        return None
    key_perm = (*perm[:-2], perm[-1], perm[-2])  # K0 -> K
    key_perm = () if key_perm == tuple(range(rank)) else key_perm
    k0 = static_shape(key)
    q, v = static_shape(query), static_shape(value)
    k = list(key_reshape) if key_reshape else [k0[i] for i in key_perm] if key_perm and k0 is not None else k0
    if None in (q, k, v) or not (len(q) == len(k) == len(v) == rank) or k[:-2] != v[:-2] \
            or q[-1] != k[-1] or k[-2] != v[-2]:
        return None
    if q[:-2] != k[:-2] and not all(a == b or b == 1 for a, b in zip(q[:-2], k[:-2])):
        return None
    broadcast = tuple(q[:-2]) if q[:-2] != k[:-2] else ()  # K and V broadcast to Q's heads by the MatMuls
    dtypes = {str(x.type).rsplit(",", 1)[-1] for x in (query, key, value)}
    if len(dtypes) != 1:
        return None
    if mask_value is not None and str(mask_value.type).rsplit(",", 1)[-1] not in dtypes:
        return None
    return AttentionSite(op, softmax, scale, mask, mask_value, scores, transpose, query, key, value, key_perm,
                         key_scale, casts, guard, key_reshape, window, broadcast)


def _default_softmax_axis(softmax: ir.Operation) -> int:
    """ONNX Softmax's axis where the op names none: -1 from opset 13 on, 1 before (softmax over the
    flattened dims from axis 1 on: an attention's last dim only where the scores are rank 2),
    by the opset its function was imported at (`torch.onnx_meta.opset_version`; 13 or later
    where it names none)."""
    op = softmax
    while op is not None and op.name != "func.func":
        op = op.parent
    attrs = op.attributes if op is not None else None
    opset = (ir.IntegerAttr(attrs["torch.onnx_meta.opset_version"]).value
             if attrs is not None and "torch.onnx_meta.opset_version" in attrs else 13)
    return -1 if opset >= 13 else 1


def _nan_guard(probs: ir.Value) -> tuple[ir.Operation, ...]:
    """(IsNaN, Where) where `probs` is the export's `Where(IsNaN(P), c, P)` (c a scalar, 0 as the
    exporter writes it) and both read the same P, which nothing else reads; else (). What c is
    does not matter: the guard is dropped only where P holds no NaN, and then it returns P."""
    where = producer(probs)
    if not (is_onnx(where, "Where") and single_use(probs) and len(where.operands) == 3):
        return ()
    isnan, zero, p = producer(where.operands[0]), where.operands[1], where.operands[2]
    if not (is_onnx(isnan, "IsNaN") and isnan.operands[0] == p and single_use(where.operands[0])
            and static_shape(zero) in ([], [1])):
        return ()
    return isnan, where


def _flattened_transpose(op: Optional[ir.Operation], rank: int) -> Optional[ir.Value]:
    """K0 where `op` is the export's Kᵀ: Reshape(Transpose(Reshape(K0, [p, s, d]), [0, 2, 1]),
    [..., d, s]) with K0 of shape [..., s, d] and p the product of its leading dims, which are
    those of Kᵀ or (grouped-query heads repeated, [b, kv, rep, s, d]) hold as many entries; else None."""
    if not is_onnx(op, "Reshape") or not single_use(op.operands[0]):
        return None
    inner = producer(op.operands[0])
    if not (is_onnx(inner, "Transpose") and "torch.onnx.perm" in inner.attributes
            and int_list(inner.attributes["torch.onnx.perm"]) == [0, 2, 1] and single_use(inner.operands[0])):
        return None
    first = producer(inner.operands[0])
    if not is_onnx(first, "Reshape"):
        return None
    k0, flat, out = static_shape(first.operands[0]), static_shape(first.results[0]), static_shape(op.results[0])
    if k0 is None or flat is None or out is None or len(k0) < rank or len(out) != rank or len(flat) != 3:
        return None
    if flat != [math.prod(k0[:-2]), *k0[-2:]] or out[-2:] != [k0[-1], k0[-2]] or math.prod(out[:-2]) != flat[0] \
            or (len(k0) == rank and out[:-2] != k0[:-2]):
        return None
    return first.operands[0]


def _scalar_side(op: ir.Operation) -> Optional[int]:
    """Which operand of a Mul or Div is the scalar (a Div's must be its divisor), or None."""
    scalar = [i for i, x in enumerate(op.operands) if static_shape(x) in ([], [1])]
    if not scalar or (is_onnx(op, "Div") and scalar != [1]):
        return None
    return scalar[0]


def _mask_side(add: ir.Operation, scores: Optional[list[int]]) -> Optional[int]:
    """Which operand of an Add before the softmax is the scores (the other is the mask): the one
    of the scores' full shape made by a MatMul, Mul or Div; the mask must broadcast to it, over
    every key (a causal mask [.., M, N], a padding mask [.., 1, N])."""
    for side in (0, 1):
        made_by = producer(add.operands[side])
        mask = static_shape(add.operands[1 - side])
        if scores and static_shape(add.operands[side]) == scores and mask is not None and 2 <= len(mask) <= len(scores) \
                and mask[-1] == scores[-1] and all(m in (1, s) for m, s in zip(mask[::-1], scores[::-1])) \
                and any(is_onnx(made_by, n) for n in ("MatMul", "Mul", "Div")):
            return side
    return None


def find_attention(module: ir.Module) -> list[AttentionSite]:
    """Every spelled-out attention of the module's functions that the rewrite takes."""
    sites: list[AttentionSite] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        site = _site(op)
        if site is not None:
            sites.append(site)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return sites


def _constant(name: str, result: str, ip: ir.InsertionPoint, loc: ir.Location, **attrs: ir.Attribute) -> ir.Value:
    op = ir.Operation.create(name, results=[ir.Type.parse(result)], attributes=attrs, loc=loc, ip=ip)
    return op.result


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
        scalar = site.key_scale.operands[_scalar_side(site.key_scale)]
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


def padded_width(width: int) -> int:
    """The head dim an attention of head dim `width` is computed at on GPUs: the next power of
    two, at least 16 (the MMA intrinsics' K)."""
    return max(16, 1 << (width - 1).bit_length())


def _padded_head(value: ir.Value, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`value` with zeros added to its last dim up to padded_width, or itself where it is that
    wide already."""
    width = static_shape(value)[-1]
    return pad_end(value, padded_width(width) - width, ip, loc) if padded_width(width) != width else value


def raise_attention(module: ir.Module, pad_heads: bool = False) -> list[str]:
    """Rewrite every site of `find_attention` in place (inside the module's context); returns
    each rewritten attention's shape (batch x M x N x K1 x K2), and with `pad_heads` the head
    dims it padded (padded_width)."""
    done = []
    for site in find_attention(module):
        ip, loc = ir.InsertionPoint(site.output), site.output.location
        query = site.query
        if site.scale is not None:
            scalar = next(x for x in site.scale.operands if static_shape(x) in ([], [1]))
            query = ir.Operation.create(ONNX_OP, results=[site.query.type], operands=[site.query, scalar],
                                        attributes={"name": site.scale.attributes["name"]}, loc=loc, ip=ip).result
        key = _key_operand(site, ip, loc)
        none = _constant("torch.constant.none", "!torch.none", ip, loc)
        rank = len(static_shape(site.output.results[0]))
        zero_mask = site.mask_value is not None and site.window is None and zero_constant(site.mask_value)
        mask = none if site.mask_value is None or zero_mask else _mask_operand(site.mask_value, rank, ip, loc)
        if site.window is not None:
            mask = folded_mask(site.window, site.mask_value, ip, loc)
        zero = _constant("torch.constant.float", "!torch.float", ip, loc, value=ir.FloatAttr.get_f64(0.0))
        one = _constant("torch.constant.float", "!torch.float", ip, loc, value=ir.FloatAttr.get_f64(1.0))
        false = _constant("torch.constant.bool", "!torch.bool", ip, loc, value=ir.BoolAttr.get(False))
        value, out_type, padded = _expanded(site.value, site.broadcast, ip, loc), site.output.results[0].type, ""
        widths = (static_shape(query)[-1], static_shape(value)[-1])
        if pad_heads and any(padded_width(w) != w for w in widths):
            query, key, value = (_padded_head(x, ip, loc) for x in (query, key, value))
            shape = [*static_shape(site.output.results[0])[:-1], static_shape(value)[-1]]
            out_type = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{element_type(value)}>")
            padded = f" (heads {static_shape(site.query)[-1]}/{static_shape(site.value)[-1]} padded to " \
                     f"{static_shape(query)[-1]}/{shape[-1]})"
        sdpa = ir.Operation.create(SDPA, results=[out_type], operands=[query, key, value, mask, zero, false, one, false],
                                   loc=loc, ip=ip)
        result = sdpa.result
        if padded:  # the added value columns dropped
            result = keep_leading(result, static_shape(site.output.results[0])[-1], ip, loc)
        site.output.results[0].replace_all_uses_with(result)
        done.append(site.shape + padded + (" (a zero mask dropped)" if zero_mask else "")
                    + (" (shifted windows' mask folded)" if site.window else ""))
        for op in (site.output, *site.guard[::-1], *site.casts[:1], site.softmax, *site.casts[1:],
                   *(site.window.ops if site.window else ()), site.mask, site.scale, site.scores, site.key_scale):
            if op is not None:
                op.erase()
        _erase_unused_chain(site.transpose)
    if done:
        module.operation.verify()
    return done
