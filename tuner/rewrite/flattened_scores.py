"""DeBERTa's attention (disentangled: relative-position terms added to the scores over heads
flattened into the batch) brought to the form tuner.rewrite.attention raises.

transformers' DeBERTa-v2/v3 computes Q K^T per flattened head, adds its content-to-position and
position-to-content terms there (computed from the same flattened Q and K), views the sum per
head, masks it with a boolean Where, and takes the softmax's product with V flattened again;
torch.onnx.export writes:

    Q3 = Reshape(Q [z, h, m, d], [z*h, m, d]);  K3 = Reshape(K [z, h, n, d], [z*h, n, d])
    L3 = Add(MatMul(Q3, Div(Transpose(K3, [0, 2, 1]), c)), B [z*h, m, n])
    P  = Softmax(Where(C, v, Reshape(L3, [z, h, m, n])))
    O3 = MatMul(Reshape(P, [z*h, m, n]), Reshape(V [z, h, n, dv], [z*h, n, dv]))  -> Reshape(O3, [z, h, m, dv])

which no attention form matches (the scores flattened, a boolean mask over a sum). Rewritten per
head: L = Add(MatMul(Q, Div(Transpose(K, [0, 1, 3, 2]), c)), Where(C, v, Reshape(B, [z, h, m, n])))
and O = MatMul(Softmax(L), V): the bias and the mask one additive mask, which the raise reads as
any other. The same probabilities wherever a row keeps a key: where C masks a score, the export
has v (the type's lowest value) and this S + v, whose exponent is 0 in the softmax alike. Q3 and
K3 stay where the relative terms read them."""

from __future__ import annotations

from typing import Optional

from iree.compiler import ir

from tuner.rewrite.attention_site import scalar_side
from tuner.rewrite.torch_ops import (element_type, int64_literal, int_list, is_onnx, matched_sites, onnx_op, producer,
                                     replace_op, si64_array, single_use, static_shape, zero_literal)


def heads_of(value: ir.Value, z: int, h: int) -> Optional[ir.Value]:
    """X where `value` is Reshape(X [z, h, s, d], [z*h, s, d]), else None."""
    reshape = producer(value)
    if not is_onnx(reshape, "Reshape"):
        return None
    x = reshape.operands[0]
    shape, flat = static_shape(x), static_shape(value)
    return x if shape is not None and flat is not None and shape == [z, h, *flat[1:]] and flat[0] == z * h else None


def _site(softmax: ir.Operation) -> Optional[tuple]:
    """The chain above around `softmax`: (its Where, the Add L3, the scores' MatMul, the scale op
    and its scalar's side, Q, K, V, the bias B, the probabilities' MatMul, the Reshape after it,
    the Reshape of L3 to heads)."""
    if not is_onnx(softmax, "Softmax") or not single_use(softmax.results[0]):
        return None
    where, probs = producer(softmax.operands[0]), softmax.results[0]
    scores4 = static_shape(probs)
    if not (is_onnx(where, "Where") and single_use(softmax.operands[0]) and scores4 is not None and len(scores4) == 4):
        return None
    z, h, m, n = scores4
    reshape = producer(where.operands[2])
    add = producer(reshape.operands[0]) if is_onnx(reshape, "Reshape") and single_use(where.operands[2]) else None
    if not ((is_onnx(add, "Add") or is_onnx(add, "MatMul")) and single_use(reshape.operands[0])
            and static_shape(add.results[0]) == [z * h, m, n]):
        return None
    flat_probs = next(iter(probs.uses)).owner
    pv = next(iter(flat_probs.results[0].uses)).owner if is_onnx(flat_probs, "Reshape") \
        and single_use(flat_probs.results[0]) and static_shape(flat_probs.results[0]) == [z * h, m, n] else None
    v = heads_of(pv.operands[1], z, h) if is_onnx(pv, "MatMul") and pv.operands[0] == flat_probs.results[0] else None
    after = next(iter(pv.results[0].uses)).owner if v is not None and single_use(pv.results[0]) else None
    if not is_onnx(after, "Reshape") or static_shape(after.results[0]) != [z, h, m, static_shape(v)[-1]]:
        return None
    # The scores with the relative terms added (DeBERTa-v3), or alone (DeBERTa-v2 without them)
    pairs = [(add, None)] if is_onnx(add, "MatMul") else [(producer(add.operands[s]), add.operands[1 - s]) for s in (0, 1)]
    for matmul, bias in pairs:
        if bias is not None and not (is_onnx(matmul, "MatMul") and single_use(matmul.results[0])
                                     and static_shape(bias) in ([z * h, m, n], [z * h, 1, n])):
            continue
        scaled = producer(matmul.operands[1])
        scalar = scalar_side(scaled) if is_onnx(scaled, "Div") or is_onnx(scaled, "Mul") else None
        transpose = producer(scaled.operands[1 - scalar]) if scalar is not None and single_use(matmul.operands[1]) else None
        if not (is_onnx(transpose, "Transpose") and int_list(transpose.attributes["torch.onnx.perm"]) == [0, 2, 1]):
            continue
        q, k = heads_of(matmul.operands[0], z, h), heads_of(transpose.operands[0], z, h)
        if q is not None and k is not None and static_shape(q)[-1] == static_shape(k)[-1]:
            return where, add, matmul, scaled, scalar, q, k, v, bias, pv, after, reshape
    return None


def unflatten_disentangled_scores(module: ir.Module) -> list[str]:
    """Every chain above in `module` rewritten per head (in place, inside its context), the old
    scores and product erased: each one's scores as z x h x m x n."""
    done = []
    for softmax, found in matched_sites(module, _site):
        where, add, matmul, scaled, scalar, q, k, v, bias, pv, after, reshape = found
        # what the per-head form leaves unread, users first (each taken while all are alive)
        stale = [pv, producer(pv.operands[0]), producer(pv.operands[1]), reshape, *([add] if bias is not None else []),
                 matmul, scaled, producer(scaled.operands[1 - scalar])]
        ip, loc = ir.InsertionPoint(where), where.location
        z, h, m, d = static_shape(q)
        n, e = static_shape(k)[2], element_type(q)
        kt = onnx_op("Transpose", [k], [z, h, d, n], e, ip, loc, perm=si64_array([0, 1, 3, 2]))
        operands = [kt, scaled.operands[scalar]] if scalar == 1 else [scaled.operands[scalar], kt]
        kt_scaled = onnx_op("Div" if is_onnx(scaled, "Div") else "Mul", operands, [z, h, d, n], e, ip, loc)
        scores = onnx_op("MatMul", [q, kt_scaled], [z, h, m, n], e, ip, loc)
        if bias is None:  # the mask alone: v where C holds, else 0
            bias4 = zero_literal(e, ip, loc)
        else:
            rows = static_shape(bias)[1]
            bias4 = onnx_op("Reshape", [bias, int64_literal([z, h, rows, n], ip, loc)], [z, h, rows, n],
                            element_type(bias), ip, loc)
        mask = onnx_op("Where", [where.operands[0], where.operands[1], bias4], [z, h, m, n], e, ip, loc)
        replace_op(where, onnx_op("Add", [scores, mask], [z, h, m, n], e, ip, loc))
        dv = static_shape(v)[-1]
        replace_op(after, onnx_op("MatMul", [softmax.results[0], v], [z, h, m, dv], e, ir.InsertionPoint(after),
                                  after.location))
        for gone in stale:
            if gone is not None and not any(list(r.uses) for r in gone.results):
                gone.erase()
        done.append(f"{z}x{h}x{m}x{n}x{d} scores per head ("
                    + (f"a bias of {'x'.join(map(str, static_shape(bias)))} and " if bias is not None else "")
                    + "a boolean mask as one additive mask)")
    if done:
        module.operation.verify()
    return done
