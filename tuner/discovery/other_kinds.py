"""What a dispatch that is not a contraction, convolution or attention is: softmax,
normalization, reduction, transpose or elementwise, read from every op of its dispatch function
as the compiler configured it (a dispatch that fuses several ops is named as a whole: a softmax
is a max reduction, an exp-sum reduction and a division). Discovery makes those kinds tunable
dispatches (tuner.discovery.by_structure); `dispatches` lists the rest by kind and shape."""

from __future__ import annotations

from dataclasses import dataclass

from iree.compiler import ir

_STRUCTURED = ("linalg.generic", "linalg.reduce", "linalg.transpose", "linalg.softmax", "linalg.map",
               "linalg.broadcast")


@dataclass(frozen=True)
class OtherKind:
    kind: str  # softmax, normalization, reduction, transpose (maybe fused with elementwise work), elementwise, or other
    shape: str  # the root op's loops and element type, e.g. "16x512x512_f32"
    # Whether the root writes into a buffer it does not return (a copy into a slice of another:
    # IREE's `slow_memcpy` for a concatenation off the outermost dimension, or a padding).
    in_place: bool = False


def _ops(func: ir.Operation) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        found.append(o)
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return found


def iterators(op: ir.Operation) -> list[str]:
    if "iterator_types" not in op.attributes:
        return []
    return [str(a).split("<")[-1].rstrip(">") for a in ir.ArrayAttr(op.attributes["iterator_types"])]


def _permutes(op: ir.Operation) -> bool:
    """An op that reads some input of the output's rank in another order than it writes (a
    transpose, maybe fused with elementwise work: IREE names those `elementwise_transpose`)."""
    if op.name == "linalg.transpose":
        return True
    if op.name != "linalg.generic":
        return False
    maps = [ir.AffineMapAttr(m).value for m in ir.ArrayAttr(op.attributes["indexing_maps"])]
    out = maps[-1]
    return any(m.is_permutation and out.is_permutation and str(m) != str(out) for m in maps[:-1])


def classify(root: ir.Operation, func: ir.Operation, loops: tuple[int, ...] = ()) -> OtherKind:
    """The kind of the dispatch `func` whose configured root op is `root` (its loop extents
    `loops`, where known, name its shape; else its first result's)."""
    ops = _ops(func)
    names = {o.name for o in ops}
    structured = [o for o in ops if o.name in _STRUCTURED]
    reductions = [o for o in structured if "reduction" in iterators(o) or o.name == "linalg.reduce"]
    if "linalg.softmax" in names or (reductions and "math.exp" in names and "arith.divf" in names
                                     and names & {"arith.maximumf", "arith.maxnumf"}):
        kind = "softmax"
    elif reductions and names & {"math.rsqrt", "math.sqrt"}:
        kind = "normalization"
    elif reductions:
        kind = "reduction"
    elif any(_permutes(o) for o in structured):
        kind = "transpose"
    elif structured:
        kind = "elementwise"
    else:
        kind = "other"
    shape = ""
    results = list(root.results)
    if results and isinstance(results[0].type, ir.ShapedType):
        t = ir.ShapedType(results[0].type)
        loops = loops or tuple(t.shape)
        shape = "x".join("D" if d < 0 else str(d) for d in loops) + f"_{t.element_type}"
    return OtherKind(kind, shape)
