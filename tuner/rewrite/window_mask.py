"""Shifted-window attention's second mask, read and folded into one (tuner.rewrite.attention).

Swin's shifted windows (torchvision's `shifted_window_attention`, as torch.onnx.export writes it)
add a mask per window between the scores (with their relative-position bias added) and the
softmax, through a view that splits the windows from the images:

    S' = Reshape(Add(Reshape(S + R, [B, nW, h, N, N]), Mk[1, nW, 1, N, N]), [B*nW, h, N, N])

`window_chain` reads that chain back from the softmax's operand; `folded_mask` builds the one
additive mask the attention op takes in its place, the same adds without the scores:

    Reshape(Add(Reshape(Expand(R, [B*nW, h, N, N]), [B, nW, h, N, N]), Mk), [B*nW, h, N, N])

a mask of the scores' full shape (its operands constants in an export: IREE folds it at compile
time). S + (R + Mk) rounds where (S + R) + Mk did: off by an ulp of the sum at most, and the
masked entries (-100) are as masked either way."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.torch_ops import element_type, int64_literal, is_onnx, onnx_op, producer, single_use, static_shape


@dataclass(frozen=True)
class WindowChain:
    """Reshape back to the scores' shape, the Add of the window mask, the Reshape that split the
    windows (in that order: the softmax's side first), and the window mask."""

    back: ir.Operation
    add: ir.Operation
    split: ir.Operation
    mask: ir.Value

    @property
    def ops(self) -> tuple[ir.Operation, ...]:
        return self.back, self.add, self.split

    @property
    def inner(self) -> ir.Value:
        """What the chain reads: the scores with the first mask added."""
        return self.split.operands[0]


def window_chain(logits: ir.Value) -> Optional[WindowChain]:
    """The chain where `logits` (what the softmax reads) is `Reshape(Add(Reshape(X, 5-D), Mk))`
    back to X's shape, each value used once, Mk broadcasting to the 5-D split; else None."""
    back = producer(logits)
    if not is_onnx(back, "Reshape") or not single_use(back.operands[0]):
        return None
    add = producer(back.operands[0])
    if not is_onnx(add, "Add") or len(add.operands) != 2:
        return None
    for side in (0, 1):
        split = producer(add.operands[side])
        if not is_onnx(split, "Reshape") or not single_use(add.operands[side]):
            continue
        scores, five, mask = (static_shape(v) for v in (split.operands[0], split.results[0], add.operands[1 - side]))
        if None in (scores, five, mask) or len(five) != len(scores) + 1 or static_shape(logits) != scores:
            continue
        if math.prod(five[:2]) != scores[0] or five[2:] != scores[1:] or len(mask) > len(five) \
                or not all(m in (1, f) for m, f in zip(mask[::-1], five[::-1])) or element_type(add.operands[1 - side]) \
                != element_type(logits):
            continue
        return WindowChain(back, add, split, add.operands[1 - side])
    return None


def folded_mask(chain: WindowChain, first: Optional[ir.Value], ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """The one mask of the scores' shape: the first mask (`first`, None where there is none)
    broadcast to the scores, split into windows, the window mask added, joined back."""
    scores, five = static_shape(chain.inner), static_shape(chain.split.results[0])
    element = element_type(chain.mask)

    def reshape(value: ir.Value, shape: list[int]) -> ir.Value:
        return onnx_op("Reshape", [value, int64_literal(shape, ip, loc)], shape, element, ip, loc)

    if first is None:
        total = onnx_op("Expand", [chain.mask, int64_literal(five, ip, loc)], five, element, ip, loc)
    else:
        broadcast = onnx_op("Expand", [first, int64_literal(scores, ip, loc)], scores, element, ip, loc)
        total = onnx_op("Add", [reshape(broadcast, five), chain.mask], five, element, ip, loc)
    return reshape(total, scores)
