"""Matchers for dispatches whose ops the compiler configures one by one (reductions: softmax,
normalizations, row sums). The root is matched by its structure (op name, loop extents,
operand counts, result type); the dispatch's other configured ops are reached from it step by
step (the producer of an input, the single user of the result) and checked the same way. The
action gives the root its compilation_info and each other op its lowering_config.

IREE 3.13's Python bindings have no classes for `transform.match.structured` and its body ops,
so those are created as generic operations (their names and properties as the dialect defines
them); the module is verified when the spec is built."""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import preprocessing_transform as match
from iree.compiler.dialects import transform

from pipelines import Dispatch
from tuner.discovery.by_structure import STORES

APPLY_FUSED = "apply_fused_op_config"  # then _<number of other ops>


def _op(name: str, operands: list[ir.Value], results: list[ir.Type], attributes: dict | None = None,
        regions: int = 0) -> ir.Operation:
    return ir.Operation.create(name, results=results, operands=operands, attributes=attributes or {},
                               regions=regions)


def _structured(target: ir.Value, results: list[ir.Type], body) -> list[ir.Value]:
    """`transform.match.structured` on `target`: `body(op)` emits its checks and returns what the
    region yields; a failing check fails the match (failures propagate)."""
    i32 = ir.IntegerType.get_signless(32)
    region_op = _op("transform.match.structured", [target], results,
                    {"failure_propagation_mode": ir.IntegerAttr.get(i32, 1)}, regions=1)
    block = region_op.regions[0].blocks.append(transform.AnyOpType.get())
    with ir.InsertionPoint(block):
        _op("transform.match.structured.yield", body(block.arguments[0]), [])
    return list(region_op.results)


def _require_equal(param: ir.Value, value: int) -> None:
    i64 = ir.IntegerType.get_signless(64)
    want = transform.ParamConstantOp(transform.ParamType.get(i64), ir.IntegerAttr.get(i64, value)).result
    transform.MatchParamCmpIOp(param, want, transform.MatchCmpIPredicate.eq)


def _param(name: str, op: ir.Value, attributes: dict | None = None) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    return _op(name, [op], [transform.ParamType.get(i64)], attributes).result


def _result(op: ir.Value) -> ir.Value:
    i64 = ir.IntegerType.get_signless(64)
    return _op("transform.match.structured.result", [op], [transform.AnyValueType.get()],
               {"position": ir.IntegerAttr.get(i64, 0)}).result


def _step(op: ir.Value, step: tuple[str, int]) -> ir.Value:
    """The op one step away: the producer of input i, or the single user of the result."""
    kind, index = step
    i64 = ir.IntegerType.get_signless(64)
    if kind == "input":
        return _op("transform.match.structured.input", [op], [transform.AnyOpType.get()],
                   {"raw_position_list": ir.DenseI64ArrayAttr.get([index])}).result
    return _op("transform.match.structured.result", [op], [transform.AnyOpType.get()],
               {"position": ir.IntegerAttr.get(i64, index), "single": ir.UnitAttr.get()}).result


def _has_type(value: ir.Value, type_text: str) -> None:
    match.MatchCastCompatibleTypesOp(value, ir.TypeAttr.get(ir.Type.parse(type_text)))


def match_stored_through(root: ir.Value, generics: int) -> None:
    """Checks that the root's result reaches the dispatch's store through exactly `generics`
    linalg.generic ops, each the single user of the one before: 0, nothing fused after the root;
    1, one op (a bias, an activation, a narrowing cast)."""
    op = root
    for _ in range(generics):
        (op,) = _structured(op, [transform.AnyOpType.get()], lambda o: [_step(o, ("result", 0))])
        transform.MatchOperationNameOp(op, ["linalg.generic"])
    (user,) = _structured(op, [transform.AnyOpType.get()], lambda o: [_step(o, ("result", 0))])
    transform.MatchOperationNameOp(user, list(STORES))


def match_fused(dispatch: Dispatch, root: ir.Value) -> list[ir.Value]:
    """Checks that succeed only on this dispatch's root op; returns handles to its other
    configured ops (Dispatch.fused, in order)."""
    transform.MatchOperationNameOp(root, [dispatch.op_name])
    inputs = len(dispatch.indexing_maps) - 1

    def root_checks(op: ir.Value) -> list[ir.Value]:
        _require_equal(_param("transform.match.structured.rank", op), len(dispatch.loop_bounds))
        _require_equal(_param("transform.match.structured.num_inputs", op), inputs)
        _require_equal(_param("transform.match.structured.num_inits", op), 1)
        for d, size in enumerate(dispatch.loop_bounds):
            _require_equal(_param("transform.match.structured.dim", op,
                                  {"raw_dim_list": ir.DenseI64ArrayAttr.get([d])}), size)
        return [_result(op)]

    (value,) = _structured(root, [transform.AnyValueType.get()], root_checks)
    _has_type(value, dispatch.result_type)
    handles = []
    for fused in dispatch.fused:
        handle = root
        for step in fused.path:
            (handle,) = _structured(handle, [transform.AnyOpType.get()], lambda op, s=step: [_step(op, s)])
        transform.MatchOperationNameOp(handle, [fused.op_name])
        (value,) = _structured(handle, [transform.AnyValueType.get()], lambda op: [_result(op)])
        _has_type(value, fused.result_type)
        handles.append(handle)
    return handles


def apply_fused(others: int) -> transform.NamedSequenceOp:
    """The action: the root's compilation_info, then each other op's lowering_config."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    readonly = {"transform.readonly": ir.UnitAttr.get()}
    seq = transform.NamedSequenceOp(f"{APPLY_FUSED}_{others}", [any_op] * (1 + others) + [any_param] * (1 + others),
                                    [], arg_attrs=[readonly] * (2 + 2 * others))
    with ir.InsertionPoint(seq.body):
        args = list(seq.body.arguments)
        ops, params = args[:1 + others], args[1 + others:]
        transform.AnnotateOp(ops[0], "compilation_info", param=params[0])
        for op, param in zip(ops[1:], params[1:]):
            transform.AnnotateOp(op, "lowering_config", param=param)
        transform.YieldOp([])
    return seq
