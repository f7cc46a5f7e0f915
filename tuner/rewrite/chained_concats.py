"""Concatenations of growing lists as a chain, in an ONNX model's import.

A DenseNet's dense block gives each layer the block's input and every earlier layer's output,
`torch.cat(features, 1)`, which torch.onnx.export writes as one `onnx.Concat` of k + 1 operands
for the k-th layer. IREE 3.13 copies each operand into the result with a dispatch of its own (a
channel slice of an NCHW tensor is strided: `slow_memcpy`), and no producer can write its result
in place, for every result is an operand of each later concatenation: DenseNet-121 at batch 8
with the external kernels ran 594 such dispatches on the H200, 1.72 ms of its 3.88 (twenty-fourth
session). Written as a chain, each concatenation has two operands, the one before it and what
it adds:

    Concat(x0, ..., xk, y)  ->  Concat(Concat(x0, ..., xk), y)      (Concat(x0, ..., xk) computed already)

so a block of n layers makes n copies of the concatenation so far (the same bytes as before, in
n dispatches instead of n(n+1)/2), and each new feature has one use. Exact: values are only
moved. Only concatenations along one axis whose operands begin with all of an earlier one's (in
the same block, in order) are rewritten, each onto the longest such."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import element_type, onnx_op, onnx_sites, replace_op, si64, static_shape


def chain_concats(module: ir.Module) -> list[str]:
    """Rewrite every concatenation of `module` that extends an earlier one (in place, inside its
    context); returns for each its operand count before and after and its result's shape."""
    done: list[str] = []
    # (the op holding its block, axis, operands as written) -> that concatenation's result
    earlier: dict[tuple, ir.Value] = {}
    for op in onnx_sites(module, "Concat", lambda op: static_shape(op.result) is not None):
        operands = tuple(op.operands)
        key = (op.parent, _axis(op))
        prefix = max((n for n in range(2, len(operands)) if (*key, operands[:n]) in earlier), default=0)
        earlier[(*key, operands)] = op.result
        if not prefix:
            continue
        chained = onnx_op("Concat", [earlier[(*key, operands[:prefix])], *operands[prefix:]], static_shape(op.result),
                          element_type(op.result), ir.InsertionPoint(op), op.location, axis=si64(key[1]))
        earlier[(*key, operands)] = chained
        replace_op(op, chained)
        done.append(f"{len(operands)} -> {len(operands) - prefix + 1} operands, {'x'.join(map(str, static_shape(chained)))}")
    if done:
        module.operation.verify()
    return done


def _axis(concat: ir.Operation) -> int:
    """The concatenation's axis, counted from the front."""
    axis = ir.IntegerAttr(concat.attributes["torch.onnx.axis"]).value
    return axis + len(static_shape(concat.result)) if axis < 0 else axis
