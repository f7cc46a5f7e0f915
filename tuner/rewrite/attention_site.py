"""Finding spelled-out attentions in an ONNX model's import (tuner.rewrite.attention raises them):
each one's ops, from the probabilities' MatMul back to Q, K and V, as the exporters write them
(the forms are listed in tuner.rewrite.attention's docstring)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.torch_ops import element_type, int_list, is_onnx, producer, single_use, static_shape
from tuner.rewrite.window_mask import WindowChain, window_chain


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
    # Whether the scores are computed in f32 from Q and K cast up from half precision, the
    # softmax's result cast back (GPT-J's and CodeGen's eager attention): the op then reads the
    # half-precision Q and K, and the f32 mask and scale cast down.
    upcast: bool = False
    # Whether the mask is added before the scale (CodeGen's (S + M) / c): the op's mask is then M
    # scaled likewise, softmax(S / c + M / c) being the same.
    scaled_mask: bool = False

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
    softmax, casts, upcast = producer(probs), (), False
    if is_onnx(softmax, "Cast") and single_use(probs):  # an f32 softmax: Cast -> Softmax -> Cast back
        inner = producer(softmax.operands[0])
        before = producer(inner.operands[0]) if is_onnx(inner, "Softmax") else None
        if not (is_onnx(inner, "Softmax") and single_use(softmax.operands[0])):
            return None
        if is_onnx(before, "Cast") and single_use(inner.operands[0]) and str(before.operands[0].type) == str(probs.type):
            casts, softmax = (softmax, before), inner
        else:  # the scores in f32 all along, from Q and K cast up (checked at the MatMul)
            casts, softmax, upcast = (softmax,), inner, True
    if not is_onnx(softmax, "Softmax") or len(list(probs.uses)) != (2 if guard else 1):
        return None
    rank = len(static_shape(probs) or [])
    axis = (ir.IntegerAttr(softmax.attributes["torch.onnx.axis"]).value if "torch.onnx.axis" in softmax.attributes
            else _default_softmax_axis(softmax))
    if rank < 3 or axis not in (-1, rank - 1):
        return None
    logits = casts[1].operands[0] if len(casts) == 2 else softmax.operands[0]  # what the softmax reads
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
        scalar = scalar_side(scores)
        if scalar is None:
            return None
        scale = scores
        scores = producer(scores.operands[1 - scalar])
        if not single_use(scale.operands[1 - scalar]):
            return None
    elif mask is None and not single_use(logits):
        return None
    scaled_mask = False
    if mask is None and scale is not None and is_onnx(scores, "Add"):  # the mask added before the scale (CodeGen's)
        found = _mask_side(scores, static_shape(probs))
        if found is None or not single_use(scores.operands[found]):
            return None
        mask, mask_value, scores, scaled_mask = scores, scores.operands[1 - found], producer(scores.operands[found]), True
    if not is_onnx(scores, "MatMul"):
        return None
    query, key_t = scores.operands[0], scores.operands[1]
    if upcast:
        query = _cast_up(query)
        if query is None:
            return None
    transpose, key_scale = producer(key_t), None
    if (is_onnx(transpose, "Mul") or is_onnx(transpose, "Div")) and single_use(key_t):
        scalar = scalar_side(transpose)
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
    if upcast:  # K as it was before its cast, under the same Transpose (and no scale on Kᵀ)
        key = None if flattened is not None or key_scale is not None else _cast_up(key)
        if key is None:
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
    if mask_value is not None and str(mask_value.type).rsplit(",", 1)[-1] not in dtypes and not upcast:
        return None
    return AttentionSite(op, softmax, scale, mask, mask_value, scores, transpose, query, key, value, key_perm,
                         key_scale, casts, guard, key_reshape, window, broadcast, upcast, scaled_mask)


def _cast_up(value: ir.Value) -> Optional[ir.Value]:
    """x where `value` is onnx.Cast(x) to f32 of a half-precision x that only the cast reads
    from here (the scores' MatMul reads it), else None."""
    cast = producer(value)
    if not (is_onnx(cast, "Cast") and single_use(value)) or element_type(value) != "f32":
        return None
    return cast.operands[0] if element_type(cast.operands[0]) in ("f16", "bf16") else None


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


def scalar_side(op: ir.Operation) -> Optional[int]:
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
