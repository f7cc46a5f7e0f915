"""Linear layers that read the same activation as one wider matrix product, in an ONNX model's import.

Transformers export their query, key and value projections (and a gated MLP's gate and up
projections) as MatMuls of one activation by separate weights, `X[.., K] x Wq[K, Nq]`,
`x Wk[K, Nk]`, `x Wv[K, Nv]`, each usually followed by the Add of its bias. IREE 3.13 fuses them
into one dispatch of several contractions sharing A (ViT-B on the H200: 0.075 ms a layer for its
QKV, on TileAndFuse), which no kernel of this tuner takes whole. Rewritten, they are one MatMul
by the weights side by side, each result a slice of it:

    MatMul(X, Wi) (+ Bi)  ->  Slice(MatMul(X, Concat(W1, ..., Wn, axis=1)) (+ Concat(B1, ..., Bn)), Ni columns)

Where a result is split into heads right after (an attention's `Reshape([.., N] -> [.., N/d, d])`),
the product is split into heads once and that result is a slice of whole heads: a slice of the
product's columns was copied in a dispatch of its own (`slow_memcpy`), one of whole heads is
read by the transpose that follows it (compile only, a BERT-base-sized QKV on cuda).

The concatenated weights are constants IREE folds at compile time; each column of the product is
the same sum in the same order as before, so the rewritten program computes the same result (the
tests compare both with torch's output). The biases are joined only where every sibling has one
(Whisper's key projection has none: its siblings' Adds then stay after their slices). Only
MatMuls with static shapes, a rank-2 B and one element type are taken, two or more reading the
same value."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import (element_type, int64_literal, is_onnx, onnx_op, onnx_sites, producer, replace_op,
                                     si64, single_use, static_shape)


def _linear(matmul: ir.Operation) -> bool:
    """A MatMul of a static activation by a static rank-2 weight."""
    x, w = (static_shape(v) for v in matmul.operands)
    return x is not None and w is not None and len(w) == 2 and len(x) >= 2 and x[-1] == w[0]


def fuse_sibling_linears(module: ir.Module) -> list[str]:
    """Join every group of two or more linear `onnx.MatMul`s of `module` that read the same
    activation (in place, inside its context); returns each group's shapes."""
    groups: dict[tuple, list[ir.Operation]] = {}
    for op in onnx_sites(module, "MatMul", _linear):
        x, w = op.operands
        groups.setdefault((x, static_shape(w)[0], element_type(w)), []).append(op)
    done = [_join(ops) for ops in groups.values() if len(ops) > 1 and _defined_before(ops)]
    if done:
        module.operation.verify()
    return done


def _defined_before(matmuls: list[ir.Operation]) -> bool:
    """Whether every weight, and every bias `_bias` finds, is defined before the first MatMul of
    the group in its block (the joined MatMul takes the first one's place), as an exporter's
    constants are."""
    first = matmuls[0].operation
    before = set()
    for op in first.block.operations:
        if op.operation == first:
            break
        before.add(op.operation)
    values = [m.operands[1] for m in matmuls] + [b[1] for b in map(_bias, matmuls) if b is not None]
    return all(producer(v) is None or producer(v).operation in before for v in values)


def _join(matmuls: list[ir.Operation]) -> str:
    first = matmuls[0]
    ip, loc = ir.InsertionPoint(first), first.location
    x = first.operands[0]
    lead, k = static_shape(x)[:-1], static_shape(x)[-1]
    widths = [static_shape(m.operands[1])[1] for m in matmuls]
    element = element_type(first.result)
    weights = onnx_op("Concat", [m.operands[1] for m in matmuls], [k, sum(widths)], element_type(first.operands[1]),
                      ip, loc, axis=si64(1))
    product = onnx_op("MatMul", [x, weights], [*lead, sum(widths)], element, ip, loc)
    biases = [_bias(m) for m in matmuls]
    outputs = matmuls
    if all(b is not None for b in biases):
        joined = onnx_op("Concat", [b[1] for b in biases], [sum(widths)], element_type(biases[0][1]), ip, loc, axis=si64(0))
        product = onnx_op("Add", [product, joined], [*lead, sum(widths)], element, ip, loc)
        outputs = [b[0] for b in biases]
    starts = [sum(widths[:i]) for i in range(len(widths))]
    heads: dict[int, ir.Value] = {}  # the product with its columns split into heads of each width
    replaced = []
    for out, start, width in zip(outputs, starts, widths):
        split = _head_split(out, lead, width)
        if split is not None and start % split == 0 and sum(widths) % split == 0:
            # The product split into heads first, each result a slice of whole heads: a slice of
            # the columns before the split was copied in a dispatch of its own (BERT-base on the
            # H200, three `slow_memcpy`s); of whole heads it is read by the transpose after it.
            if split not in heads:
                heads[split] = _reshape(product, [*lead, sum(widths) // split, split], ip, loc)
            piece = _slice(heads[split], start // split, width // split, len(lead), ip, loc)
            replaced.append((next(iter(out.result.uses)).owner, piece, out))  # the split, then its input
        else:
            replaced.append((out, _slice(product, start, width, len(lead), ip, loc), None))
    for old, piece, split_input in replaced:  # all made first: the insertion point is before the first MatMul
        replace_op(old, piece)
        if split_input is not None:
            split_input.erase()
    if outputs is not matmuls:  # the bias Adds were replaced: their MatMuls are left without a use
        for m in matmuls:
            m.erase()
    return f"{'x'.join(map(str, [*lead, k]))} by {' + '.join(f'{k}x{w}' for w in widths)}"


def _head_split(out: ir.Operation, lead: list[int], width: int) -> int | None:
    """The head size where `out`'s one use is a Reshape of its columns into heads,
    [*lead, width] -> [*lead, width // size, size] (an attention's Q, K or V); else None."""
    if not single_use(out.result):
        return None
    reshape = next(iter(out.result.uses)).owner
    shape = static_shape(reshape.result) if is_onnx(reshape, "Reshape") else None
    if shape is None or len(shape) != len(lead) + 2 or shape[:len(lead)] != lead or shape[-2] * shape[-1] != width:
        return None
    return shape[-1]


def _reshape(value: ir.Value, shape: list[int], ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    return onnx_op("Reshape", [value, int64_literal(shape, ip, loc)], shape, element_type(value), ip, loc)


def _slice(value: ir.Value, start: int, size: int, axis: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`size` entries of `value` from `start` along `axis`."""
    shape = static_shape(value)
    shape[axis] = size
    return onnx_op("Slice", [value, int64_literal([start], ip, loc), int64_literal([start + size], ip, loc),
                             int64_literal([axis], ip, loc), int64_literal([1], ip, loc)], shape, element_type(value), ip, loc)


def _bias(matmul: ir.Operation) -> tuple[ir.Operation, ir.Value] | None:
    """The Add of a bias of the MatMul's width right after it (its only use), and the bias."""
    if not single_use(matmul.result):
        return None
    add = next(iter(matmul.result.uses)).owner
    if not is_onnx(add, "Add") or len(add.operands) != 2:
        return None
    other = add.operands[1] if add.operands[0] == matmul.result else add.operands[0]
    width = static_shape(matmul.operands[1])[1]
    if static_shape(other) != [width] or static_shape(add.result) != static_shape(matmul.result):
        return None
    definer = producer(other)
    if definer is not None and not is_onnx(definer, "Constant"):
        return None  # only a constant bias: it is then defined before the first MatMul too
    return add, other
