"""BLOOM's attention scores (ALiBi) brought to the form tuner.rewrite.attention raises.

transformers' BLOOM computes its scores over heads flattened into the batch and adds its ALiBi
bias there (`alibi.baddbmm(q, k, beta, alpha)`), then views them per head and adds the causal
mask; torch.onnx.export writes:

    Q3 = Reshape(Q [z, h, m, d], [z*h, m, d]);  K3 = Reshape(K [z, h, n, d], [z*h, n, d])
    S3 = Add(Mul(MatMul(Q3, Transpose(K3, [0, 2, 1])), c), B [z*h, 1 or m, n])
    L  = Add(Reshape(S3, [z, h, m, n]), M [.., m, n]) -> Softmax -> MatMul(., V [z, h, n, d])

which no attention form matches (scores of another rank than V, two additive terms). Each such
chain is rewritten per head, the same values: L = Add(Mul(MatMul(Q, Transpose(K, [0, 1, 3, 2])),
c), Add(Reshape(B, [z, h, 1 or m, n]), M)): the one mask, the bias and the causal mask summed,
which the raise then reads as any additive mask (the kernels take it whole; IREE folds it where
both terms are constants, as an export without an attention mask input has them)."""

from __future__ import annotations

import math
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.attention_site import scalar_side
from tuner.rewrite.flattened_scores import heads_of
from tuner.rewrite.torch_ops import (element_type, int64_literal, int_list, is_onnx, matched_sites, onnx_op, producer,
                                     replace_op, si64_array, single_use, static_shape)


def _unflattened(value: ir.Value, z: int, h: int) -> Optional[ir.Value]:
    """X where `value` is Reshape(X [z, h, s, d], [z*h, s, d]) read only there, else None."""
    return heads_of(value, z, h) if single_use(value) else None


def _chain(add: ir.Operation) -> Optional[tuple]:
    """(Q, K, the scale op and its scalar's side, B, M, z, h, the Reshape to heads) where `add`
    is L above, else None."""
    if not (is_onnx(add, "Add") and len(add.operands) == 2):
        return None
    for side in (0, 1):
        reshape, mask = producer(add.operands[side]), add.operands[1 - side]
        scores4, mask_shape = static_shape(add.operands[side]), static_shape(mask)
        if not (is_onnx(reshape, "Reshape") and single_use(add.operands[side]) and scores4 is not None
                and len(scores4) == 4 and mask_shape is not None and 2 <= len(mask_shape) <= 4
                and all(a in (1, b) for a, b in zip(mask_shape[::-1], scores4[::-1]))):
            continue
        z, h, m, n = scores4
        biased = producer(reshape.operands[0])
        if not (is_onnx(biased, "Add") and single_use(reshape.operands[0])
                and static_shape(biased.results[0]) == [z * h, m, n]):
            continue
        for b_side in (0, 1):
            scaled, bias = producer(biased.operands[b_side]), biased.operands[1 - b_side]
            b_shape = static_shape(bias)
            if not ((is_onnx(scaled, "Mul") or is_onnx(scaled, "Div")) and single_use(biased.operands[b_side])
                    and b_shape is not None and len(b_shape) == 3 and b_shape[0] == z * h and b_shape[1] in (1, m)
                    and b_shape[2] == n):
                continue
            scalar = scalar_side(scaled)
            matmul = producer(scaled.operands[1 - scalar]) if scalar is not None else None
            if not (is_onnx(matmul, "MatMul") and single_use(scaled.operands[1 - scalar])):
                continue
            transpose = producer(matmul.operands[1])
            if not (is_onnx(transpose, "Transpose") and single_use(matmul.operands[1])
                    and int_list(transpose.attributes["torch.onnx.perm"]) == [0, 2, 1]):
                continue
            q, k = _unflattened(matmul.operands[0], z, h), _unflattened(transpose.operands[0], z, h)
            if q is not None and k is not None and static_shape(q)[-1] == static_shape(k)[-1]:
                return q, k, scaled, scalar, bias, mask, z, h, reshape
    return None


def unflatten_alibi_scores(module: ir.Module) -> list[str]:
    """Every chain above in `module` rewritten per head (in place, inside its context), the old
    ops erased: each one's scores as z x h x m x n."""
    done = []
    for add, (q, k, scaled, scalar, bias, mask, z, h, old) in matched_sites(module, _chain):
        ip, loc = ir.InsertionPoint(add), add.location
        m, d, n = *static_shape(q)[2:], static_shape(k)[2]
        e = element_type(q)
        kt = onnx_op("Transpose", [k], [z, h, d, n], e, ip, loc, perm=si64_array([0, 1, 3, 2]))
        scores = onnx_op("MatMul", [q, kt], [z, h, m, n], e, ip, loc)
        operands = [scores, scaled.operands[scalar]] if scalar == 1 else [scaled.operands[scalar], scores]
        scaled4 = onnx_op("Div" if is_onnx(scaled, "Div") else "Mul", operands, [z, h, m, n], e, ip, loc)
        b_rows = static_shape(bias)[1]
        bias4 = onnx_op("Reshape", [bias, int64_literal([z, h, b_rows, n], ip, loc)], [z, h, b_rows, n],
                        element_type(bias), ip, loc)
        mask_shape = static_shape(mask)
        full = [max(a, b) for a, b in zip([z, h, b_rows, n], [1] * (4 - len(mask_shape)) + mask_shape)]
        both = onnx_op("Add", [bias4, mask], full, element_type(bias), ip, loc)
        replace_op(add, onnx_op("Add", [scaled4, both], [z, h, m, n], e, ip, loc))
        _erase_unused(old)
        done.append(f"{z}x{h}x{m}x{n}x{d} scores per head (ALiBi bias {math.prod(static_shape(bias))} values)")
    if done:
        module.operation.verify()
    return done


def _erase_unused(op: Optional[ir.Operation]) -> None:
    """`op` erased where nothing reads it, then each op that produced its operands, likewise
    (the flattened chain back to Q's and K's Reshapes)."""
    if op is None or op.name != "torch.operator" or any(list(r.uses) for r in op.results):
        return
    feeding = [producer(x) for x in op.operands]
    op.erase()
    for before in feeding:
        if any(is_onnx(before, name) for name in ("Reshape", "Transpose", "MatMul", "Mul", "Div", "Add")):
            _erase_unused(before)
