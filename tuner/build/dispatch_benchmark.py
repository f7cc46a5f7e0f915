"""What a GPU candidate is timed by: the dispatch benchmark module IREE dumps for the tuned
dispatch (`--iree-hal-dump-executable-benchmarks-to`), or, where a split-K config made two
dispatches of the op, one module that runs both (the split op's, then the one that adds the
parts), so that the figure stands for the whole op as the default's one dispatch does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Optional

from iree.compiler import ir

from pipelines import Config
from pipelines.parts import SplitReduction
from tuner.discovery.entry import is_dispatch_benchmark_function
from tuner.run_dir import write_file

COMBINED_FUNCTION = "tuned_op_dispatches"
_EXECUTABLE = re.compile(r"hal\.executable private @(\S+)_dispatch_(\d+) ")


def benchmark_sources(directory: Path, dispatch_name: str, config: Config) -> list[Path]:
    """The dumped benchmark modules (one per executable) that time the tuned op: the one that
    dispatches `dispatch_name`; for a split-K config, the one whose op carries the config and
    the next dispatch of the program, which adds the parts (checked by `check_split`). Empty
    where none is found. Reads file text only (no MLIR context: any thread may call it)."""
    paths = sorted(directory.glob("*.mlir"))
    if config.split_ways == 1:  # (a model dumps one per dispatch: read up to the one)
        return next(([p] for p in paths if f"@{dispatch_name}" in p.read_text()), [])
    texts = {path: path.read_text() for path in paths}
    split = next((p for p, text in texts.items() if f"lowering_config = {config.expect_lowering_config}" in text), None)
    found = _EXECUTABLE.search(texts[split]) if split else None
    if found is None:
        return []
    following = f"hal.executable private @{found.group(1)}_dispatch_{int(found.group(2)) + 1} "
    combiner = next((p for p, text in texts.items() if following in text), None)
    return [split, combiner] if combiner else []


def benchmark_function(text: str, ctx: ir.Context) -> Optional[str]:
    """The function IREE marked as a dispatch benchmark (iree.reflection: iree.benchmark) in the
    text of a dumped dispatch benchmark module."""
    with ctx:
        module = ir.Module.parse(text)
        for op in module.body.operations:
            if is_dispatch_benchmark_function(op.operation):
                return ir.StringAttr(op.operation.attributes["sym_name"]).value
    return None


def _symbol(op: ir.Operation) -> Optional[str]:
    return ir.StringAttr(op.attributes["sym_name"]).value if "sym_name" in op.attributes else None


def combine(sources: list[Path], out: Path) -> Path:
    """One dispatch benchmark module from several: every executable, buffer and function of each
    (symbols they share, the device global, taken once), and a function `COMBINED_FUNCTION` that
    runs each one's benchmark function in turn with the same batch size. Its time per batch item
    is the sum of theirs. Builds in a context of its own (any thread may call it)."""
    with ir.Context():
        modules = [ir.Module.parse(p.read_text()) for p in sources]
        first, calls = modules[0], []
        symbols = {_symbol(op.operation) for op in first.body.operations} - {None}
        for module in modules:
            for op in list(module.body.operations):
                op = op.operation
                if is_dispatch_benchmark_function(op):
                    calls.append(_symbol(op))
                    del op.attributes["iree.reflection"]  # only the combined function is one
                if module is first:
                    continue
                if _symbol(op) in symbols:  # (initializers have no name: each module's is kept)
                    continue  # the device global: equal in every dumped module of one compile
                op.detach_from_parent()
                first.body.append(op)
        # Parsed beside declarations of what it calls (it must verify alone); only it moves over.
        declared = "".join(f"util.func private @{name}(i32)\n" for name in calls)
        body = "".join(f"    util.call @{name}(%batch) : (i32) -> ()\n" for name in calls)
        wrapper = ir.Module.parse(
            f'{declared}util.func public @{COMBINED_FUNCTION}(%batch: i32) attributes {{iree.abi.stub, '
            f'iree.reflection = {{iree.benchmark = "dispatch"}}}} {{\n{body}    util.return\n  }}')
        combined = list(wrapper.body.operations)[-1].operation
        combined.detach_from_parent()
        first.body.append(combined)
        first.operation.verify()
        write_file(out, str(first))
    return out


def check_split(config: Config, text: str, ctx: ir.Context) -> Optional[str]:
    """Why the combined module of a split-K candidate does not time its op (None: it does): the
    second dispatch must add up the split op's parts, a linalg op with one reduction loop, of
    `config.split_ways` iterations, whose result has as many elements as the op's."""
    split = config.part(SplitReduction)
    parts = config.split_ways
    bounds = split.loop_bounds if split else ()
    whole = 1
    for b in bounds[1:]:
        whole *= b
    k = bounds[-1] if bounds else 1
    wanted = whole // k  # the op's result: every loop but the split and K
    with ctx:
        module = ir.Module.parse(text)
        found = []

        def visit(op: ir.Operation) -> ir.WalkResult:
            if op.name == "linalg.generic":
                kinds = [str(a) for a in ir.ArrayAttr(op.attributes["iterator_types"])]
                result = op.results[0].type if len(op.results) == 1 else None
                if (kinds.count("#linalg.iterator_type<reduction>") == 1 and isinstance(result, ir.ShapedType)
                        and result.has_static_shape):
                    found.append((_reduction_extent(op, kinds), result))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    for extent, result in found:
        elements = 1
        for size in result.shape:
            elements *= size
        if extent == parts and elements == wanted:
            return None
    return (f"no dispatch after the split op adds up its {parts} parts into {wanted} elements "
            f"(reductions found: {[(e, list(r.shape)) for e, r in found]})")


def _reduction_extent(op: ir.Operation, kinds: list[str]) -> Optional[int]:
    """The static extent of the op's one reduction loop, from the operand it indexes."""
    dim = kinds.index("#linalg.iterator_type<reduction>")
    for amap, operand in zip(ir.ArrayAttr(op.attributes["indexing_maps"]), op.operands):
        amap = ir.AffineMapAttr(amap).value
        shape = operand.type.shape if isinstance(operand.type, ir.ShapedType) else []
        for expr, size in zip(amap.results, shape):
            if isinstance(expr, ir.AffineDimExpr) and expr.position == dim:
                return size
    return None
