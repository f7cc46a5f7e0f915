"""Dispatches a spec matches by structure, read as tunable dispatches: reductions (softmax,
normalizations, row sums) and all-parallel ones (transposes, elementwise work). The root op's
loops (parallel ones as M, reduced ones as K), its result type, and the dispatch's other ops
that the compiler configures (and those of a GPU reduction it should configure and leaves bare:
left_unconfigured), each with the path a spec takes from the root to reach it."""

from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from iree.compiler import ir

from pipelines import MATCHED_BY_STRUCTURE, REDUCTION_KINDS, DispatchKind, FusedOp
from tuner.discovery.other_kinds import classify, iterators

Step = tuple[str, int]


def is_reduction_root(op: ir.Operation) -> bool:
    """A linalg op with one result whose loops include a reduction (contractions and
    convolutions are read as such before this is asked)."""
    return op.name in ("linalg.generic", "linalg.reduce") and "reduction" in iterators(op) and len(op.results) == 1


def is_structural_root(op: ir.Operation) -> bool:
    """A reduction root, or a linalg.generic of parallel loops only with one result (a
    transpose, elementwise work)."""
    if is_reduction_root(op):
        return True
    its = iterators(op)
    return op.name == "linalg.generic" and bool(its) and set(its) == {"parallel"} and len(op.results) == 1


def _is_linalg(op: ir.OpView | ir.Operation) -> bool:
    return op.operation.name.startswith("linalg.") and op.operation.name != "linalg.fill"


def _neighbours(op: ir.Operation) -> list[tuple[Step, ir.Operation]]:
    """The ops a spec can step to from `op`: the producer of each input (transform.match.structured.input)
    and the single user of its result (transform.match.structured.result {single})."""
    out: list[tuple[Step, ir.Operation]] = []
    if hasattr(op.opview, "inputs"):
        for i, value in enumerate(op.opview.inputs):
            owner = value.owner  # an op (an OpView), or a Block for a block argument
            if isinstance(owner, (ir.Operation, ir.OpView)) and _is_linalg(owner):
                out.append((("input", i), owner.operation))
    users = [use.owner for use in op.results[0].uses] if op.results else []
    if len(users) == 1 and _is_linalg(users[0]):
        out.append((("user", 0), users[0].operation))
    return out


def _paths(root: ir.Operation) -> dict[ir.Operation, tuple[Step, ...]]:
    """The shortest step path from the root to every op reachable that way."""
    paths: dict[ir.Operation, tuple[Step, ...]] = {root: ()}
    queue = deque([root])
    while queue:
        op = queue.popleft()
        for step, nxt in _neighbours(op):
            if nxt not in paths:
                paths[nxt] = paths[op] + (step,)
                queue.append(nxt)
    return paths


def configured_ops(func: ir.Operation, also: Callable[[ir.Operation], bool] = lambda op: False) -> list[ir.Operation]:
    """The func's linalg ops that carry a lowering_config (and those `also` takes), in program
    order: the order the read-back lists a dispatch's configured ops in."""
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name.startswith("linalg.") and o.name != "linalg.fill" and ("lowering_config" in o.attributes or also(o)):
            found.append(o)
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return found


def left_unconfigured(op: ir.Operation, root: ir.Operation) -> bool:
    """Whether `op` is one the compiler should configure in a GPU reduction dispatch and does
    not: an all-parallel linalg.generic over the root's loops whose result the dispatch stores.
    IREE 3.13 leaves one so in a LayerNorm whose centred values are a result of their own
    (Swin-T's under O3 or aggressive fusion, `reduction_25088x96_f32`), and the dispatch then
    fails to compile ("failed to distribute"); given the reductions' layout as a `serial` tile,
    it compiles (pipelines.llvmgpu_vector_distribute_reduction)."""
    its = iterators(op) if op.name == "linalg.generic" else []
    return (bool(its) and set(its) == {"parallel"} and len(its) == len(iterators(root))
            and "lowering_config" not in op.attributes and len(op.results) == 1
            and "#iree_gpu.lowering_config" in str(root.attributes["lowering_config"])
            and any(use.owner.name in STORES for use in op.results[0].uses))


# The ops that write a dispatch's results (IREE 3.13 prints both, by configuration stage).
STORES = ("iree_codegen.store_to_buffer", "iree_tensor_ext.dispatch.tensor.store")
_BITS = {"f64": 64, "f32": 32, "i32": 32, "f16": 16, "bf16": 16, "i16": 16, "i8": 8}


def stored_element_type(func: ir.Operation, fallback: str) -> str:
    """The element type of what the dispatch writes (its narrowest, where it writes several):
    a softmax over f16 scores reduces in f32 but stores f16, and its results are compared at
    the precision they are stored in."""
    found: list[str] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name in STORES and o.operands and isinstance(o.operands[0].type, ir.ShapedType):
            found.append(str(ir.ShapedType(o.operands[0].type).element_type))
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return min(found, key=lambda t: _BITS.get(t, 32)) if found else fallback


def structural_parts(root: ir.Operation, func: ir.Operation, loops: tuple[int, ...]
                     ) -> tuple[DispatchKind, str, tuple[FusedOp, ...]] | str:
    """The dispatch's kind, the root's result type and its other configured ops; or why a spec
    could not configure them (an op no path from the root reaches)."""
    named = classify(root, func, loops).kind
    if named not in {k.value for k in MATCHED_BY_STRUCTURE}:
        return f"a {named} dispatch"
    kind = DispatchKind(named)
    paths = _paths(root)
    reduction = kind in REDUCTION_KINDS
    fused = []
    for op in configured_ops(func, lambda o: reduction and left_unconfigured(o, root)):
        if op == root:
            continue
        path: Optional[tuple[Step, ...]] = paths.get(op)
        if path is None:
            return f"its {op.name} is configured but no matcher step from the root reaches it"
        fused.append(FusedOp(op_name=op.name, result_type=str(op.results[0].type), path=path,
                             default_lowering_config=(str(op.attributes["lowering_config"])
                                                      if "lowering_config" in op.attributes else "")))
    return kind, str(root.results[0].type), tuple(fused)


NOT_COMPUTE = ("linalg.fill", "linalg.yield", "linalg.index")


def other_compute_ops(func: ir.Operation, root: ir.Operation) -> tuple[str, ...]:
    """The compute ops of a dispatch besides its root (and fills), by name: what dispatch
    formation fused with it, a bias or an activation after a matmul, say."""
    found: list[str] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if (op.name.startswith(("linalg.", "iree_linalg_ext.")) and op.name not in NOT_COMPUTE
                and op != root):
            found.append(op.name)
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return tuple(found)
