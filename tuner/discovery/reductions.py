"""Reduction dispatches (softmax, normalizations, row sums) read as tunable dispatches: the root
op's loops (parallel ones as M, reduced ones as K), its result type, and the dispatch's other
ops that the compiler configures, each with the path a spec takes from the root to reach it."""

from __future__ import annotations

from collections import deque
from typing import Optional

from iree.compiler import ir

from pipelines import REDUCTION_KINDS, DispatchKind, FusedOp
from tuner.discovery.other_kinds import classify, iterators

Step = tuple[str, int]


def is_reduction_root(op: ir.Operation) -> bool:
    """A linalg op with one result whose loops include a reduction (contractions and
    convolutions are read as such before this is asked)."""
    return op.name in ("linalg.generic", "linalg.reduce") and "reduction" in iterators(op) and len(op.results) == 1


def _is_linalg(op: ir.OpView | ir.Operation) -> bool:
    return op.operation.name.startswith("linalg.") and op.operation.name != "linalg.fill"


def _neighbours(op: ir.Operation) -> list[tuple[Step, ir.Operation]]:
    """The ops a spec can step to from `op`: the producer of each input (transform.match.structured.input)
    and the single user of its result (transform.match.structured.result {single})."""
    out: list[tuple[Step, ir.Operation]] = []
    if hasattr(op.opview, "inputs"):
        for i, value in enumerate(op.opview.inputs):
            owner = value.owner
            if isinstance(owner, ir.Operation) or isinstance(owner, ir.OpView):
                owner = owner.operation
                if _is_linalg(owner):
                    out.append((("input", i), owner))
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


def configured_ops(func: ir.Operation) -> list[ir.Operation]:
    """The func's linalg ops that carry a lowering_config, in program order."""
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name.startswith("linalg.") and o.name != "linalg.fill" and "lowering_config" in o.attributes:
            found.append(o)
        return ir.WalkResult.ADVANCE

    func.walk(visit)
    return found


def reduction_parts(root: ir.Operation, func: ir.Operation, loops: tuple[int, ...]
                    ) -> tuple[DispatchKind, str, tuple[FusedOp, ...]] | str:
    """The dispatch's kind, the root's result type and its other configured ops; or why a spec
    could not configure them (an op no path from the root reaches)."""
    named = classify(root, func, loops).kind
    if named not in {k.value for k in REDUCTION_KINDS}:
        return f"a {named} dispatch"
    kind = DispatchKind(named)
    paths = _paths(root)
    fused = []
    for op in configured_ops(func):
        if op == root:
            continue
        path: Optional[tuple[Step, ...]] = paths.get(op)
        if path is None:
            return f"its {op.name} is configured but no matcher step from the root reaches it"
        fused.append(FusedOp(op_name=op.name, result_type=str(op.results[0].type), path=path,
                             default_lowering_config=str(op.attributes["lowering_config"])))
    return kind, str(root.results[0].type), tuple(fused)
