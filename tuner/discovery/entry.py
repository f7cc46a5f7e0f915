"""Which public function of a program runs each dispatch, and what that function takes and
returns: read through the bindings from the program as the compiler configured it (after its ABI
lowering), so torch and linalg inputs, `func.func` and `util.func` entries all look alike.

A public synchronous function's `!hal.buffer_view` arguments are imported as tensors
(`stream.tensor.import`, whose `result_encoding` is the tensor type), maybe in a function it calls
(torch's `main` calls `main$async`); its results are exported the same way. Scalars are plain
arguments. The dispatches a function runs are the `stream.cmd.dispatch` ops in it and in every
function it calls.

IREE's dispatch benchmark files are already lowered to HAL: their one public function (marked
`iree.benchmark = "dispatch"`) takes the number of dispatches to record (an i32) and looks up the
executable export it dispatches (`hal.executable.lookup.function`). Run with 1, it runs it once."""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import replace
from typing import Optional

from iree.compiler import ir

from tuner.discovery.workload import DimHint, TensorSpec, Workload
from tuner.core.names import shown, why_not_a_file_name

_DISPATCH = "stream.cmd.dispatch"
_CALL = "util.call"
_LOOKUP = "hal.executable.lookup.function"  # how a dispatch benchmark names what it dispatches


def is_dispatch_benchmark_function(op: ir.Operation) -> bool:
    """A function IREE marked as a dispatch benchmark (iree.reflection: iree.benchmark)."""
    attrs = op.attributes
    return "iree.reflection" in attrs and "iree.benchmark" in ir.DictAttr(attrs["iree.reflection"])


def _name(op: ir.Operation) -> str:
    return ir.StringAttr(op.attributes["sym_name"]).value


def _functions(module: ir.Module) -> dict[str, ir.Operation]:
    return {_name(op.operation): op.operation for op in module.body.operations
            if op.operation.name in ("util.func", "func.func") and "sym_name" in op.operation.attributes}


def _is_entry(op: ir.Operation) -> bool:
    """Public, with a body, and callable without fences (not the coarse-fences async wrapper)."""
    attrs = op.attributes
    public = "sym_visibility" not in attrs or ir.StringAttr(attrs["sym_visibility"]).value == "public"
    model = ir.StringAttr(attrs["iree.abi.model"]).value if "iree.abi.model" in attrs else ""
    return public and len(op.regions) > 0 and len(op.regions[0].blocks) > 0 and model != "coarse-fences"


def walk_ops(op: ir.Operation, names: tuple[str, ...]) -> list[ir.Operation]:
    found: list[ir.Operation] = []

    def visit(o: ir.Operation) -> ir.WalkResult:
        if o.name in names:
            found.append(o)
        return ir.WalkResult.ADVANCE

    op.walk(visit)
    return found


def _dispatched(func: ir.Operation, functions: dict[str, ir.Operation], seen: set[str]) -> Counter:
    """How many times this function runs each dispatch (executable export), itself or through
    the functions it calls: one per dispatch op on the way (host code has no loops here)."""
    counts: Counter = Counter()
    for op in walk_ops(func, (_DISPATCH, _CALL, _LOOKUP)):
        if op.name == _DISPATCH:
            for ref in ir.ArrayAttr(op.attributes["entry_points"]):
                counts[ir.SymbolRefAttr(ref).value[-1]] += 1
        elif op.name == _LOOKUP:
            counts[ir.SymbolRefAttr(op.attributes["entry_point"]).value[-1]] += 1
        else:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in functions and callee not in seen:
                counts += _dispatched(functions[callee], functions, seen | {callee})
    return counts


def _tensor(t: ir.Type) -> Optional[TensorSpec]:
    if isinstance(t, ir.RankedTensorType):
        return TensorSpec(tuple(-1 if ir.ShapedType.is_dynamic_size(d) else d for d in t.shape), str(t.element_type))
    return None


def _imported(func: ir.Operation, index: int, functions: dict[str, ir.Operation], depth: int = 0) -> Optional[TensorSpec]:
    """The tensor argument `index` of `func` is imported as, following it into called functions."""
    if depth > 8:
        return None
    arg = func.regions[0].blocks[0].arguments[index]
    for op in walk_ops(func, ("stream.tensor.import", "hal.tensor.import", _CALL)):
        if op.name == _CALL:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            for j, operand in enumerate(op.operands):
                if operand == arg and callee in functions:
                    found = _imported(functions[callee], j, functions, depth + 1)
                    if found:
                        return found
        elif len(op.operands) and op.operands[0] == arg:
            encoding = op.attributes["result_encoding"] if "result_encoding" in op.attributes else None
            return _tensor(ir.TypeAttr(encoding).value if encoding is not None else op.results[0].type)
    if not list(arg.uses):  # never read (dead: the toy Llama's prefill and its sequence lengths)
        return TensorSpec((1,), "i8", unread=True)
    return None


_ASSUMPTION = re.compile(r"(umin|umax|udiv)\s*=\s*(\d+)")


def _assumed(op: ir.Operation, value: ir.Value) -> Optional[tuple[int, int, int]]:
    """(umin, umax, udiv) a util.assume.int op assumes of `value` (over all its alternatives)."""
    for i, operand in enumerate(op.operands):
        if operand != value:
            continue
        alternatives = [dict((k, int(v)) for k, v in _ASSUMPTION.findall(str(a)))
                        for a in ir.ArrayAttr(ir.ArrayAttr(op.attributes["assumptions"])[i])]
        if not alternatives:
            return None
        return (min(a.get("umin", 1) for a in alternatives), max(a.get("umax", 2 ** 31 - 1) for a in alternatives),
                math.gcd(*(a.get("udiv", 1) for a in alternatives)))
    return None


def _dim_hints(func: ir.Operation, index: int, functions: dict[str, ir.Operation],
               depth: int = 0) -> dict[int, DimHint]:
    """What the program assumes (util.assume.int) of each dynamic dimension of argument `index`
    of `func`, read where the dimension is read (hal.buffer_view.dim), following the argument into
    called functions (torch's `main` calls `main$async`)."""
    if depth > 8:
        return {}
    arg = func.regions[0].blocks[0].arguments[index]
    dims: dict[int, ir.Value] = {}
    hints: dict[int, DimHint] = {}
    ops = walk_ops(func, ("hal.buffer_view.dim", "util.assume.int", _CALL))
    for op in ops:
        if op.name == "hal.buffer_view.dim" and op.operands[0] == arg:
            dims[ir.IntegerAttr(op.attributes["index"]).value] = op.results[0]
        elif op.name == _CALL:
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            for j, operand in enumerate(op.operands):
                if operand == arg and callee in functions:
                    hints.update(_dim_hints(functions[callee], j, functions, depth + 1))
    for op in ops:
        if op.name != "util.assume.int":
            continue
        for dim, value in dims.items():
            assumed = _assumed(op, value)
            if assumed:
                hints[dim] = DimHint(dim, *assumed)
    return hints


def _exported(func: ir.Operation, index: int, functions: dict[str, ir.Operation], depth: int = 0) -> Optional[TensorSpec]:
    """The tensor result `index` of `func` is exported from, following it into called functions."""
    if depth > 8:
        return None
    for ret in walk_ops(func, ("util.return", "func.return")):
        value = ret.operands[index]
        owner = value.owner
        if not isinstance(owner, ir.Operation) and hasattr(owner, "operation"):
            owner = owner.operation
        if not isinstance(owner, ir.Operation):
            continue
        if owner.name in ("stream.tensor.export", "hal.tensor.export"):
            encoding = owner.attributes["source_encoding"] if "source_encoding" in owner.attributes else None
            return _tensor(ir.TypeAttr(encoding).value if encoding is not None else owner.operands[0].type)
        if owner.name == _CALL:
            callee = ir.FlatSymbolRefAttr(owner.attributes["callee"]).value
            if callee in functions:
                return _exported(functions[callee], ir.OpResult(value).result_number, functions, depth + 1)
    return None


def _signature(func: ir.Operation, functions: dict[str, ir.Operation]) -> tuple[list, list]:
    """(inputs, outputs): a TensorSpec per tensor, a scalar TensorSpec per scalar, None where the
    type could not be read."""
    ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)

    def read(types, follow) -> list:
        return [follow(func, i, functions) if str(t) == "!hal.buffer_view" or isinstance(t, ir.RankedTensorType)
                else TensorSpec((), str(t), scalar=True) for i, t in enumerate(types)]

    inputs, outputs = read(ftype.inputs, _imported), read(ftype.results, _exported)
    for i, spec in enumerate(inputs):
        if spec is not None and not spec.scalar and any(d < 0 for d in spec.shape):
            hints = _dim_hints(func, i, functions)
            inputs[i] = replace(spec, dynamic=tuple(hints.get(d, DimHint(d))
                                                    for d, n in enumerate(spec.shape) if n < 0))
    return inputs, outputs


def initializer_dispatches(module: ir.Module) -> set[str]:
    """The dispatches the module's `util.initializer`s run (once, when the module loads: a
    conversion of parameters, say), themselves or through the functions they call."""
    functions = _functions(module)
    found: set[str] = set()
    for op in module.body.operations:
        if op.operation.name == "util.initializer":
            found |= set(_dispatched(op.operation, functions, set()))
    return found


def entry_points(module: ir.Module) -> tuple[dict[str, Workload | str], dict[str, int]]:
    """For every dispatch the module runs: the first public function that runs it, as a Workload
    (its name, inputs and outputs), or a string saying why that function cannot be run; and how
    many times one call of that function runs the dispatch."""
    functions = _functions(module)
    found: dict[str, Workload | str] = {}
    runs: dict[str, int] = {}
    for name, func in functions.items():
        if not _is_entry(func):
            continue
        dispatches = _dispatched(func, functions, {name})
        if not dispatches or all(d in found for d in dispatches):
            continue
        inputs, outputs = _signature(func, functions)
        workload: Workload | str
        unnamed = why_not_a_file_name(name)
        if unnamed:  # its inputs and profile would be files named after it
            workload = f"@{shown(name)}: {unnamed}, and the function's name becomes file names; rename it"
        elif is_dispatch_benchmark_function(func):
            # Its one argument is how many times to dispatch: once per call; no results.
            workload = Workload(name, (TensorSpec((), "i32", scalar=True, value="1"),), (), dispatch_benchmark=True)
        elif any(s is None for s in inputs + outputs):
            workload = f"@{name}: an argument or result whose type could not be read"
        else:
            workload = Workload(name, tuple(inputs), tuple(outputs)).sized()  # dynamic sizes: the default
            problem = workload.unrunnable()
            if problem:
                workload = f"@{name}: {problem}"
        for d, count in dispatches.items():
            if d not in found:
                found[d], runs[d] = workload, count
    return found, runs
