"""An external kernel in an ONNX model's import: a private function whose body is one
`hal.dispatch.extern` of the kernel (its PTX embedded), and calls of it from the torch program
(tuner.external; used by tuner.rewrite.external_gemm and tuner.rewrite.external_attention).

The op is built through the bindings: its `workgroup_size` and `workgroup_local_memory` are
properties IREE 3.13's custom assembly cannot carry. The object names a path that is never read
(`data` wins) because 3.13 prints an object with data and no path as `<{, data = ...}>`, which
does not parse. The function carries the import's `torch.onnx_meta.*` attributes: the ONNX input
conversion wants an opset on every function."""

from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Hashable, Iterator, Optional

from iree.compiler import ir

from tuner.core.settings import usable_cores
from tuner.external.abi import ExternKernel

# The executable target the objects are given for: the CUDA backend's format, which every cuda
# target of the program matches (the driver, not IREE, compiles the PTX for the GPU at hand).
TARGET = '#hal.executable.target<"cuda", "cuda-nvptx-fb">'


def tensor_type(shape: list[int], element: str) -> ir.Type:
    return ir.Type.parse(f"tensor<{'x'.join(map(str, shape))}x{element}>")


def _layout(bindings: int, written: int = 1) -> ir.Attribute:
    """Every binding read-only but the last `written` (the result, and a kernel's scratch)."""
    read = ["#hal.pipeline.binding<storage_buffer, ReadOnly>"] * (bindings - written)
    write = ["#hal.pipeline.binding<storage_buffer>"] * written
    return ir.Attribute.parse(f"#hal.pipeline.layout<bindings = [{', '.join([*read, *write])}]>")


def onnx_meta(op: ir.Operation) -> dict[str, ir.Attribute]:
    """The `torch.onnx_meta.*` attributes of the function holding `op`."""
    func = op.parent
    while func.name != "func.func":
        func = func.parent
    return {name: func.attributes[name] for name in func.attributes if name.startswith("torch.onnx_meta.")}


def define_extern(module: ir.Module, kernel: ExternKernel, arguments: list[ir.Type], result: ir.Type,
                  meta: dict[str, ir.Attribute]) -> None:
    """`func.func private @KERNEL(arguments...) -> result` at the top of `module`, whose body is
    the kernel's `hal.dispatch.extern` (one binding per argument, then the result's, then, where
    the kernel has one, its scratch's: a second result of i8 that nothing reads)."""
    index = ir.IndexType.get()
    ptx = kernel.ptx.encode()
    obj = ir.Attribute.parse(f'#hal.executable.object<{{path = "{kernel.name}.ptx", '
                             f'data = dense<"0x{ptx.hex().upper()}"> : vector<{len(ptx)}xi8>}}>')
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
        func = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(kernel.name), "sym_visibility": ir.StringAttr.get("private"),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get(arguments, [result])), **meta})
        body = func.regions[0].blocks.append(*arguments)
        scratch = [tensor_type([kernel.scratch_bytes], "i8")] if kernel.scratch_bytes else []
        with ir.InsertionPoint(body):
            extern = ir.Operation.create("hal.dispatch.extern", results=[result, *scratch], operands=list(body.arguments),
                                         regions=2, attributes={
                "export_name": ir.StringAttr.get(kernel.name), "layout": _layout(kernel.bindings, 1 + len(scratch)),
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, len(arguments), 0, 0]),
                "targets": ir.ArrayAttr.get([ir.Attribute.parse(TARGET)]),
                "target_ordinals": ir.ArrayAttr.get([ir.IntegerAttr.get(index, 0)]),
                "target_objects": ir.ArrayAttr.get([ir.ArrayAttr.get([obj])]),
                "tied_operands": ir.ArrayAttr.get([ir.IntegerAttr.get(index, -1)] * (1 + len(scratch))),
                "workgroup_size": ir.ArrayAttr.get([ir.IntegerAttr.get(index, v) for v in (kernel.threads, 1, 1)]),
                "workgroup_local_memory": ir.IntegerAttr.get(index, kernel.shared_bytes)})
            count = extern.regions[0].blocks.append(ir.Type.parse("!hal.device"))
            with ir.InsertionPoint(count):
                grid = [ir.Operation.create("arith.constant", results=[index],
                                            attributes={"value": ir.IntegerAttr.get(index, g)}).result for g in kernel.grid]
                ir.Operation.create("hal.return", operands=grid)
            ir.Operation.create("func.return", operands=[extern.results[0]])


def _declared(name: str, ip: ir.InsertionPoint) -> Optional[tuple[list[list[int]], list[int]]]:
    """The argument and result shapes of the function `name` in the module around `ip` (None
    where it is not defined there)."""
    op = ip.block.owner.operation  # (an OpView's .name is its symbol's, where it has one)
    while op is not None and op.name != "builtin.module":
        op = op.parent
    if op is None:
        return None
    for f in op.regions[0].blocks[0].operations:
        if f.operation.name == "func.func" and ir.StringAttr(f.attributes["sym_name"]).value == name:
            kind = ir.FunctionType(ir.TypeAttr(f.attributes["function_type"]).value)
            return ([list(ir.RankedTensorType(t).shape) for t in kind.inputs],
                    list(ir.RankedTensorType(kind.results[0]).shape))
    return None


def call_extern(name: str, operands: list[ir.Value], shape: list[int], element: str, ip: ir.InsertionPoint,
                loc: ir.Location) -> ir.Value:
    """A call of the function `name` on the torch values `operands` (each made a builtin tensor
    of its static shape), its builtin result made a `!torch.vtensor<[shape],element>`. Where the
    function was defined for another site of the same problem whose operands had other shapes
    of the same values ([1, 16, 64] rows for [16, 64]: OPT's layer norms, one before a Reshape,
    one after), each operand and the result are reshaped to and from the function's own."""
    from tuner.rewrite.torch_ops import element_type, int64_literal, onnx_op, static_shape

    def builtin(value: ir.Value) -> ir.Value:
        return ir.Operation.create("torch_c.to_builtin_tensor", operands=[value], loc=loc, ip=ip,
                                   results=[tensor_type(static_shape(value), element_type(value))]).result

    def reshaped(value: ir.Value, have: list[int], want: list[int]) -> ir.Value:
        if have == want:
            return value
        if math.prod(have) != math.prod(want):
            raise ValueError(f"@{name} takes {want}, not {have}")
        return onnx_op("Reshape", [value, int64_literal(want, ip, loc)], want, element_type(value), ip, loc)

    declared = _declared(name, ip)
    takes, gives = declared if declared else ([static_shape(v) for v in operands], shape)
    operands = [reshaped(v, static_shape(v), want) for v, want in zip(operands, takes)]
    product = ir.Operation.create("func.call", results=[tensor_type(gives, element)], loc=loc, ip=ip,
                                  operands=[builtin(v) for v in operands],
                                  attributes={"callee": ir.FlatSymbolRefAttr.get(name)}).result
    torch_type = ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, gives))}],{element}>")
    result = ir.Operation.create("torch_c.from_builtin_tensor", operands=[product], results=[torch_type], loc=loc,
                                 ip=ip).result
    return reshaped(result, gives, shape)


class Kernels:
    """Each problem's kernel, made once by `make(problem, tiles)` and its function defined once;
    a kernel that cannot be made is data: its problem's sites are left as they were, and
    `failed` says why (a Triton error, a kernel its ABI refuses)."""

    def __init__(self, make: Callable[[Hashable, object], ExternKernel]):
        self.make = make
        self.made: dict[Hashable, Optional[ExternKernel]] = {}
        self.failed: list[str] = []

    def get(self, problem: Hashable, tiles: object, define: Callable[[ExternKernel], None],
            what: str) -> Optional[ExternKernel]:
        """The problem's kernel (None: it cannot be made; `what` names it in `failed`). While
        `recording`, the kernel is only asked for (None: its site is left as it is)."""
        asked = getattr(_RECORDING, "requests", None)
        if asked is not None:
            asked.append((self.make, problem, tiles))
            return None
        if problem not in self.made:
            try:
                kernel = self.make(problem, tiles)
            except Exception as error:  # a failing kernel is data, never a traceback
                self.made[problem] = None
                self.failed.append(f"{what}: {str(error).splitlines()[0] if str(error) else type(error).__name__}")
                return None
            define(kernel)
            self.made[problem] = kernel
        return self.made[problem]


_RECORDING = threading.local()


@contextmanager
def recording() -> Iterator[list[tuple[Callable, Hashable, object]]]:
    """While the block runs (on this thread), the rewrites' kernels are asked for, not made: the
    list gets each (source, problem, tiles), for `prebuild`."""
    _RECORDING.requests = []
    try:
        yield _RECORDING.requests
    finally:
        del _RECORDING.requests


def prebuild(requests: list[tuple[Callable, Hashable, object]]) -> None:
    """Make the kernels asked for, several at a time (Triton's compilation lets go of the GIL: two
    threads compiled four GEMMs 1.8x as fast as one on 2 cores); each source keeps what it made
    (Triton's are `functools.cache`d), so the rewrite that asks again gets them at once. A kernel
    that cannot be made is left for that rewrite to report."""
    unique = list(dict.fromkeys(requests))
    workers = min(len(unique), 8, usable_cores())
    if workers < 2:
        return

    def make(request) -> None:
        source, problem, tiles = request
        try:
            source(problem, tiles)
        except Exception:  # said by the rewrite when it asks again
            pass

    with ThreadPoolExecutor(workers, "kernels") as pool:
        list(pool.map(make, unique))


def replace_chain(first: ir.Operation, after: list[ir.Operation], value: Callable[[ir.InsertionPoint], ir.Value]) -> None:
    """`first` and the ops `after` it (an epilogue a kernel takes in, in program order, each used
    only by the next) replaced by `value(ip)`, made where the last of them was."""
    from tuner.rewrite.torch_ops import replace_op

    last = after[-1] if after else first
    replace_op(last, value(ir.InsertionPoint(last)))
    for op in [*after[:-1][::-1], *([first] if after else [])]:
        op.erase()


def call_in_place(module: ir.Module, op: ir.Operation, after: list[ir.Operation], problem, tiles: object,
                  kernels: Kernels, what: str, operands: Optional[list[ir.Value]] = None) -> Optional[ExternKernel]:
    """`op` (and the ops `after` it) replaced by a call of `problem`'s kernel on `operands`
    (default: op's own), its function defined once (`kernels`; `what` names it where it cannot be
    made); the kernel, or None where it could not be made (op left as it was). `problem` has
    `.name` and `.element` (the result's; each operand is taken as its own type: Gemma's RMS norm
    reads an f32 weight)."""
    from tuner.rewrite.torch_ops import element_type, static_shape

    operands = list(op.operands) if operands is None else operands
    arguments = [tensor_type(static_shape(v), element_type(v)) for v in operands]
    result = tensor_type(static_shape(op.result), problem.element)
    kernel = kernels.get(problem, tiles, lambda k: define_extern(module, k, arguments, result, onnx_meta(op)), what)
    if kernel is not None:
        replace_chain(op, after, lambda ip: call_extern(problem.name, operands, static_shape(op.result),
                                                        problem.element, ip, op.location))
    return kernel
