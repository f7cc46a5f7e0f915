"""Reading ops of the torch dialect as `iree-import-onnx` writes them (`torch.operator "onnx.X"`),
shared by the program rewrites."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np
from iree.compiler import ir

ONNX_OP = "torch.operator"


def is_onnx(op: Optional[ir.Operation], name: str) -> bool:
    return (op is not None and op.name == ONNX_OP
            and ir.StringAttr(op.attributes["name"]).value == f"onnx.{name}")


def rewrite_sites(module: ir.Module, name: str, taken: Callable[[ir.Operation], object],
                  rewrite: Callable[[ir.Operation], str]) -> list[str]:
    """`rewrite` applied to every `onnx.NAME` op of the module that `taken` picks (onnx_sites),
    each saying what it changed; the module verified once where anything did."""
    done = [rewrite(op) for op in onnx_sites(module, name, taken)]
    if done:
        module.operation.verify()
    return done


def only_user(value: ir.Value) -> Optional[ir.Operation]:
    """The one op that uses `value`, or None where none or several do."""
    uses = list(value.uses)
    return uses[0].owner if len(uses) == 1 else None


def replace_op(op: ir.Operation, value: ir.Value) -> None:
    """Every use of `op`'s result made a use of `value`, and `op` erased."""
    op.result.replace_all_uses_with(value)
    op.erase()


def si64(value: int) -> ir.IntegerAttr:
    """An onnx op's integer attribute (`torch.onnx.axis`, ...)."""
    return ir.IntegerAttr.get(ir.IntegerType.get_signed(64), value)


def si64_array(values: list[int]) -> ir.ArrayAttr:
    """An onnx op's integer list attribute (`torch.onnx.pads`, `perm`, ...)."""
    return ir.ArrayAttr.get([si64(v) for v in values])


def onnx_sites(module: ir.Module, name: str, taken: Callable[[ir.Operation], object],
               at_run_time: bool = False) -> list[ir.Operation]:
    """Every `onnx.NAME` op of the module that `taken` says a rewrite takes, in program order
    (collected before any is rewritten); `at_run_time`: only those whose operands are not all
    computed from constants (compile_time_only)."""
    sites: list[ir.Operation] = []
    memo: dict = {}

    def visit(op: ir.Operation) -> ir.WalkResult:
        if is_onnx(op, name) and taken(op) and not (at_run_time and compile_time_only(op, memo)):
            sites.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return sites


def matched_sites(module: ir.Module, match: Callable[[ir.Operation], object]) -> list[tuple[ir.Operation, object]]:
    """Every op of the module with what `match` found there (not None), in program order, all
    found before any is rewritten."""
    sites: list[tuple[ir.Operation, object]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        found = match(op)
        if found is not None:
            sites.append((op, found))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return sites


def compile_time_only(op: ir.Operation, memo: dict) -> bool:
    """Whether every operand of `op` is computed from constants alone (no function argument
    reaches it): IREE then evaluates the op when it compiles the model, in an initializer built
    for the host, where a call of an external GPU kernel cannot be compiled (Swin-V2's
    position-bias MLP reads a constant table: its linear layers as the GEMM kernel crashed
    iree-compile 3.13 in LLVMCPUAssignImportOrdinals). `memo`: value -> from constants alone,
    shared by the calls of one walk."""
    return all(_from_constants(v, memo) for v in op.operands)


def _from_constants(value: ir.Value, memo: dict) -> bool:
    stack = [(value, False)]
    while stack:
        v, expanded = stack.pop()
        if v in memo:
            continue
        owner = producer(v)
        if owner is None:  # an argument of the function (or of a region: taken as one)
            memo[v] = False
        elif expanded:
            memo[v] = all(memo.get(o, False) for o in owner.operands)
        else:
            stack.append((v, True))
            stack.extend((o, False) for o in owner.operands if o not in memo)
    return memo[value]


def producer(value: ir.Value) -> Optional[ir.Operation]:
    owner = value.owner
    return owner if isinstance(owner, ir.Operation) else getattr(owner, "operation", None) \
        if not isinstance(owner, ir.Block) else None


def zero_constant(value: ir.Value) -> bool:
    """Whether `value` is an `onnx.Constant` whose every element is +0 (every byte zero): a dense
    splat, or a `dense_resource` blob (constant_bytes)."""
    op = producer(value)
    if not is_onnx(op, "Constant") or "torch.onnx.value" not in op.attributes:
        return False
    text = str(op.attributes["torch.onnx.value"])
    if text.startswith("dense<"):  # a splat prints one value
        return text.startswith(("dense<0.000000e+00>", "dense<0>"))
    data = constant_bytes(op)
    return data is not None and len(data) > 0 and not any(data)


def constant_bytes(op: ir.Operation) -> Optional[bytes]:
    """The elements of an `onnx.Constant` held in a `dense_resource` blob, as stored, read by
    printing the constant alone (the printer writes the blobs an op refers to, and only those);
    None where it holds no blob."""
    text = str(op.attributes["torch.onnx.value"])
    if not text.startswith("dense_resource<"):
        return None
    key = text[len("dense_resource<"):].split(">", 1)[0]
    alone = ir.Module.create(loc=ir.Location.unknown(op.context))
    with ir.InsertionPoint(alone.body):
        op.clone()
    blob = re.search(r"\b" + re.escape(key) + r'"?\s*:\s*"0x([0-9A-Fa-f]*)"', str(alone))
    # The blob's first four bytes are its alignment; the elements follow.
    return bytes.fromhex(blob.group(1)[8:]) if blob is not None and len(blob.group(1)) >= 8 else None


def single_use(value: ir.Value) -> bool:
    return len(list(value.uses)) == 1


def static_shape(value: ir.Value) -> Optional[list[int]]:
    """The static sizes of a `!torch.vtensor<[a,b,...],dtype>` value (None if unknown or dynamic)."""
    text = str(value.type)
    if not text.startswith("!torch.vtensor<[") or "?" in text.split("]")[0]:
        return None
    dims = text[len("!torch.vtensor<["):].split("]")[0]
    return [int(d) for d in dims.split(",")] if dims else []


def int_list(attr: ir.Attribute) -> list[int]:
    return [ir.IntegerAttr(a).value for a in ir.ArrayAttr(attr)]


def onnx_ints(op: ir.Operation, name: str, default: list[int]) -> list[int]:
    """An onnx op's integer list attribute `torch.onnx.NAME` (strides, pads, ...), or `default`."""
    key = f"torch.onnx.{name}"
    return int_list(op.attributes[key]) if key in op.attributes else default


def onnx_string(op: ir.Operation, name: str, default: str) -> str:
    """An onnx op's string attribute `torch.onnx.NAME` (auto_pad, approximate), or `default`."""
    key = f"torch.onnx.{name}"
    return str(op.attributes[key]).strip('"') if key in op.attributes else default


@dataclass(frozen=True)
class Conv2d:
    """An onnx.Conv of a static 4-d input and filter (and a bias of one value per filter, if
    any), with its attributes as ONNX's defaults fill them in."""

    x: list[int]
    weight: list[int]
    strides: list[int]
    dilations: list[int]
    pads: list[int]  # top, left, bottom, right
    group: int
    auto_pad: str


def conv2d(conv: ir.Operation) -> Optional[Conv2d]:
    """The convolution read as a Conv2d, or None where its shapes are not static and 4-d."""
    x = static_shape(conv.operands[0])
    weight = static_shape(conv.operands[1]) if len(conv.operands) > 1 else None
    if x is None or weight is None or len(x) != 4 or len(weight) != 4:
        return None
    if len(conv.operands) > 2 and static_shape(conv.operands[2]) != [weight[0]]:
        return None
    return Conv2d(x, weight, onnx_ints(conv, "strides", [1, 1]), onnx_ints(conv, "dilations", [1, 1]),
                  onnx_ints(conv, "pads", [0] * 4), group_count(conv), onnx_string(conv, "auto_pad", "NOTSET"))


def group_count(op: ir.Operation) -> int:
    """An onnx.Conv's `group` (an integer attribute, 1 where absent)."""
    return ir.IntegerAttr(op.attributes["torch.onnx.group"]).value if "torch.onnx.group" in op.attributes else 1


def int64_literal(values: list, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of si64 values (a shape, axes or steps an onnx op takes; nested
    lists give a tensor of their shape: a Gather's indices)."""
    array = np.array(values, np.int64)
    return _literal(ir.DenseElementsAttr.get(array, type=ir.RankedTensorType.get(
        list(array.shape), ir.IntegerType.get_signed(64), loc=loc)), list(array.shape), "si64", ip, loc)


def bool_literal(values: list, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of booleans (an onnx.Where's condition), of the nested lists' shape."""
    array = np.array(values, np.bool_)
    # numpy's booleans: an i1 tensor of their shape
    return _literal(ir.DenseElementsAttr.get(array), list(array.shape), "i1", ip, loc)


def zero_literal(element: str, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of one zero of the element type ("f16", "f32", "bf16")."""
    return float_literal(0.0, element, ip, loc)


def float_literal(value: float, element: str, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of one `value` of the element type ("f16", "f32", "bf16", "f64")."""
    scalar = {"f16": ir.F16Type, "f32": ir.F32Type, "bf16": ir.BF16Type, "f64": ir.F64Type}[element].get()
    dense = ir.DenseElementsAttr.get_splat(ir.RankedTensorType.get([], scalar, loc=loc), ir.FloatAttr.get(scalar, value, loc=loc))
    return _literal(dense, [], element, ip, loc)


def array_literal(values: np.ndarray, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of a float16 or float32 numpy array, of its shape."""
    element = {np.dtype(np.float16): "f16", np.dtype(np.float32): "f32"}[values.dtype]
    return _literal(ir.DenseElementsAttr.get(np.ascontiguousarray(values)), list(values.shape), element, ip, loc)


def _literal(dense: ir.DenseElementsAttr, shape: list[int], element: str, ip: ir.InsertionPoint,
             loc: ir.Location) -> ir.Value:
    """A `torch.vtensor.literal` of `dense`, typed `!torch.vtensor<[shape],element>`."""
    return ir.Operation.create("torch.vtensor.literal", results=[ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>")],
                               attributes={"value": dense}, loc=loc, ip=ip).result


F16, BF16, F32 = 10, 16, 1  # onnx.Cast's `to`


def cast_of(value: ir.Value, to: int) -> Optional[ir.Value]:
    """What `value` is the onnx.Cast to type `to` (F16, BF16, F32, ...) of, or None."""
    op = producer(value)
    if is_onnx(op, "Cast") and "torch.onnx.to" in op.attributes and ir.IntegerAttr(op.attributes["torch.onnx.to"]).value == to:
        return op.operands[0]
    return None


def element_type(value: ir.Value) -> str:
    """The element type of a `!torch.vtensor<[...],TYPE>` value ("f16")."""
    return str(value.type).rsplit(",", 1)[-1].rstrip(">")


def onnx_op(name: str, operands: list[ir.Value], shape: list[int], element: str, ip: ir.InsertionPoint,
            loc: ir.Location, **attributes: ir.Attribute) -> ir.Value:
    """A new `onnx.NAME` op as `iree-import-onnx` writes one (attributes `torch.onnx.KEY`), its
    one result a `!torch.vtensor<[shape],element>`."""
    attrs = {"name": ir.StringAttr.get(f"onnx.{name}"), **{f"torch.onnx.{k}": v for k, v in attributes.items()}}
    return ir.Operation.create(ONNX_OP, results=[ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>")],
                               operands=operands, attributes=attrs, loc=loc, ip=ip).result


def keep_leading(value: ir.Value, width: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`value`'s first `width` entries along its last dim (an onnx.Slice): what a rewrite that
    computed more columns keeps."""
    shape = static_shape(value)
    return onnx_op("Slice", [value, int64_literal([0], ip, loc), int64_literal([width], ip, loc),
                             int64_literal([len(shape) - 1], ip, loc), int64_literal([1], ip, loc)],
                   [*shape[:-1], width], element_type(value), ip, loc)


def pad_end(value: ir.Value, extra: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """`value` with `extra` zeros after the entries of its last dim (an onnx.Pad)."""
    shape = static_shape(value)
    pads = [0] * len(shape) + [0] * (len(shape) - 1) + [extra]  # ONNX: every dim's start, then every end
    return onnx_op("Pad", [value, int64_literal(pads, ip, loc)], [*shape[:-1], shape[-1] + extra],
                   element_type(value), ip, loc)
