"""A rotary embedding on part of each head as one elementwise product over the whole head, in an
ONNX model's import.

transformers' `apply_rotary_pos_emb` with a partial rotary (Phi-2's 32 of 80 head dims,
GPT-NeoX's and StableLM's quarter) exports, for Q and for K,

    R = Slice(X, 0:r), P = Slice(X, r:D)
    Concat(R * cos + Concat(-Slice(R, h:r), Slice(R, 0:h)) * sin,  P)          (h = r / 2)

and IREE 3.13 copies both concatenations into buffers of their own (Phi-2 tuned on the H200:
four `slow_memcpy` dispatches for Q and K, 0.049 ms of 0.293, twenty-ninth session). Written over
the whole head, with the cos and sin widened to D and the rotation a gather of X's columns,

    X * Concat(cos, 1) + Gather(X, [h..r-1, 0..h-1, r..D-1], last axis) * Concat(-sin[:h], sin[h:], 0)

it is one elementwise computation of X. Exact: on the first r columns the same products and sum
in the same order (x * -s is -(x * s)), on the rest x * 1 + x * 0 = x for every finite x.
Only static shapes, a last axis of D, an even r < D, and cos and sin of last dim r."""

from __future__ import annotations

from typing import Optional

from iree.compiler import ir

from tuner.rewrite.constant_eval import evaluate
from tuner.rewrite.torch_ops import (element_type, int64_literal, is_onnx, matched_sites, onnx_op, producer, replace_op,
                                     si64, static_shape)

BIG = 1 << 62  # an onnx.Slice end past any size: "to the end"


def _slice(value: ir.Value) -> Optional[tuple[ir.Value, int, int]]:
    """(X, start, end) where `value` is a unit-step onnx.Slice of X along its last axis."""
    op = producer(value)
    if not is_onnx(op, "Slice") or len(op.operands) < 4:
        return None
    x = op.operands[0]
    shape = static_shape(x)
    bounds = [evaluate(v, depth=2) for v in op.operands[1:]]
    if shape is None or any(b is None or b.size != 1 for b in bounds):
        return None
    start, end, axis = (int(b.reshape(-1)[0]) for b in bounds[:3])
    step = int(bounds[3].reshape(-1)[0]) if len(bounds) > 3 else 1
    if axis % len(shape) != len(shape) - 1 or step != 1:
        return None
    size = shape[-1]
    start, end = (min(max(v + size if v < 0 else v, 0), size) for v in (start, min(end, BIG)))
    return x, start, end


def _mul_of(value: ir.Value, factor: ir.Value) -> Optional[ir.Value]:
    """The other operand of the onnx.Mul `value` is, one of whose operands is `factor`."""
    op = producer(value)
    if not is_onnx(op, "Mul"):
        return None
    a, b = op.operands
    return b if a == factor else a if b == factor else None


def _rotated(value: ir.Value, r_value: ir.Value, half: int) -> bool:
    """Whether `value` is Concat(Neg(Slice(R, h:r)), Slice(R, 0:h)) along the last axis."""
    op = producer(value)
    if not is_onnx(op, "Concat") or len(op.operands) != 2:
        return False
    neg = producer(op.operands[0])
    upper = _slice(neg.operands[0]) if is_onnx(neg, "Neg") else None
    lower = _slice(op.operands[1])
    width = static_shape(r_value)[-1]
    return (upper is not None and lower is not None and upper[0] == r_value and lower[0] == r_value
            and upper[1:] == (half, width) and lower[1:] == (0, half))


def rotary_of(concat: ir.Operation) -> Optional[tuple[ir.Value, int, ir.Value, ir.Value]]:
    """Where `concat` ends a partial rotary embedding of X: (X, r, cos, sin); else None."""
    if len(concat.operands) != 2 or static_shape(concat.result) is None:
        return None
    rotated, passed = concat.operands
    tail = _slice(passed)
    add = producer(rotated)
    if tail is None or not is_onnx(add, "Add"):
        return None
    x, r, d = tail
    shape = static_shape(x)
    if d != shape[-1] or r % 2 or not 0 < r < d or static_shape(concat.result) != shape:
        return None
    for first, second in (tuple(add.operands), tuple(add.operands)[::-1]):
        product, mul = producer(first), producer(second)
        if not is_onnx(product, "Mul") or not is_onnx(mul, "Mul"):
            continue
        for r_value in (v for v in product.operands if _slice(v) == (x, 0, r)):
            cos = _mul_of(first, r_value)
            for turned, sin in (tuple(mul.operands), tuple(mul.operands)[::-1]):
                if cos is not None and _rotated(turned, r_value, r // 2) and static_shape(cos) \
                        and static_shape(cos)[-1] == r and static_shape(sin) == static_shape(cos):
                    return x, r, cos, sin
    return None


def _chain(concat: ir.Operation) -> list[ir.Operation]:
    """The ops of the rotary `concat` ends (rotary_of matched it), each once: what is erased once
    the concat is replaced, where nothing else reads them."""
    ops: list[ir.Operation] = []
    work = [producer(v) for v in concat.operands]
    while work:
        op = work.pop(0)
        if op is None or not any(is_onnx(op, k) for k in ("Add", "Mul", "Concat", "Neg", "Slice")) \
                or any(op == o for o in ops):
            continue
        ops.append(op)
        if not is_onnx(op, "Slice"):  # up to the slices of X; cos, sin and X stay
            work += [producer(v) for v in op.operands]
    return ops


def _splat(value: float, shape: list[int], element: str, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of `shape` holding `value` everywhere (one value in the IR)."""
    scalar = {"f16": ir.F16Type, "f32": ir.F32Type, "bf16": ir.BF16Type}[element].get()
    dense = ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get(shape, scalar, loc=loc),
                                           ir.FloatAttr.get(scalar, value, loc=loc))
    return ir.Operation.create("torch.vtensor.literal", attributes={"value": dense}, loc=loc, ip=ip, results=[
        ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>")]).result


def fuse_partial_rotaries(module: ir.Module) -> list[str]:
    """Rewrite every partial rotary embedding of `module` (in place, inside its context) over its
    whole head; returns each one's head width, rotated width and shape."""
    done = []
    for concat, (x, r, cos, sin) in matched_sites(module, lambda op: rotary_of(op) if is_onnx(op, "Concat") else None):
        shape, element, half = static_shape(x), element_type(x), r // 2
        if element not in ("f16", "f32", "bf16") or element_type(cos) != element or element_type(sin) != element:
            continue
        ip, loc = ir.InsertionPoint(concat), concat.location
        table, d = static_shape(cos), shape[-1]
        wide = [*table[:-1], d]
        last = si64(len(table) - 1)

        def piece(value: ir.Value, start: int, end: int) -> ir.Value:
            return onnx_op("Slice", [value, int64_literal([start], ip, loc), int64_literal([end], ip, loc),
                                     int64_literal([len(table) - 1], ip, loc), int64_literal([1], ip, loc)],
                           [*table[:-1], end - start], element, ip, loc)

        cos_wide = onnx_op("Concat", [cos, _splat(1.0, [*table[:-1], d - r], element, ip, loc)], wide, element, ip, loc,
                           axis=last)
        negated = onnx_op("Neg", [piece(sin, 0, half)], [*table[:-1], half], element, ip, loc)
        sin_wide = onnx_op("Concat", [negated, piece(sin, half, r), _splat(0.0, [*table[:-1], d - r], element, ip, loc)],
                           wide, element, ip, loc, axis=last)
        columns = [*range(half, r), *range(half), *range(r, d)]
        turned = onnx_op("Gather", [x, int64_literal(columns, ip, loc)], shape, element, ip, loc,
                         axis=si64(len(shape) - 1))
        result = onnx_op("Add", [onnx_op("Mul", [x, cos_wide], shape, element, ip, loc),
                                 onnx_op("Mul", [turned, sin_wide], shape, element, ip, loc)], shape, element, ip, loc)
        chain = _chain(concat)
        replace_op(concat, result)
        while chain:  # the unread ones erased until none is left unread (each touched while alive)
            unread = [op for op in chain if not any(list(r.uses) for r in op.results)]
            if not unread:
                break
            chain = [op for op in chain if not any(op == u for u in unread)]
            for op in unread:
                op.erase()
        done.append(f"{r} of {d} rotated, {'x'.join(map(str, shape))}")
    if done:
        module.operation.verify()
    return done
