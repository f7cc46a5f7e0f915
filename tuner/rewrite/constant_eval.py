"""Values an ONNX import computes from constants alone, evaluated with numpy.

The exporter builds some tensors in the program from constants: transformers' causal attention
mask is `Where(LessOrEqual(kv_index, q_index) [And ...], 0, finfo.min)` over aranges it stores
as constants. Reading such a value (`evaluate`) lets a rewrite see what it is (a causal mask or
none at all: `mask_kind`) without knowing how each exporter spells it. Only elementwise ops with numpy's
broadcasting are evaluated (the comparisons, And, Or, Not, Where, Add, Sub, Mul, Cast), and Expand
and Reshape to their static result shapes;
anything else, a function argument or a value over LIMIT elements gives None."""

from __future__ import annotations

from typing import Optional

import numpy as np
from iree.compiler import ir

from tuner.rewrite.torch_ops import constant_bytes, element_type, is_onnx, onnx_ints, producer, static_shape

LIMIT = 1 << 24  # elements: a 4096 x 4096 mask
DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "si64": np.int64, "si32": np.int32,
          "i1": np.bool_, "ui8": np.uint8}
BINARY = {"And": np.logical_and, "Or": np.logical_or, "Less": np.less, "LessOrEqual": np.less_equal,
          "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "Equal": np.equal, "Add": np.add,
          "Sub": np.subtract, "Mul": np.multiply}


def _constant(op: ir.Operation, value: ir.Value, shape: Optional[list[int]] = None) -> Optional[np.ndarray]:
    """The elements of `op`'s value attribute, typed as `value` and of its shape (or `shape`)."""
    shape, dtype = shape or static_shape(value), DTYPES.get(element_type(value))
    if shape is None or dtype is None or "torch.onnx.value" not in op.attributes:
        return None
    attr = op.attributes["torch.onnx.value"]
    if str(attr).startswith("dense<"):
        dense = ir.DenseElementsAttr(attr)
        if dense.is_splat:
            text = str(attr)[len("dense<"):].split(">", 1)[0]
            scalar = {"true": True, "false": False}.get(text)
            return np.full(shape, scalar if scalar is not None else float(text), dtype)
        return np.array(dense).astype(dtype).reshape(shape)
    data = constant_bytes(op)
    if data is None:
        return None
    if dtype is np.bool_:
        return np.frombuffer(data, np.uint8).astype(np.bool_).reshape(shape)
    return np.frombuffer(data, dtype).reshape(shape)


def evaluate(value: ir.Value, depth: int = 16, memo: Optional[dict] = None) -> Optional[np.ndarray]:
    """The value `value` holds where the program computes it from constants alone by the ops this
    module knows, else None; each value of the graph computed once (`memo`: a graph's shared
    values, Swin's window mask reads its image mask 1090 times)."""
    memo = {} if memo is None else memo
    if value not in memo:
        memo[value] = _evaluate(value, depth, memo)
    return memo[value]


def _evaluate(value: ir.Value, depth: int, memo: dict) -> Optional[np.ndarray]:
    shape = static_shape(value)
    op = producer(value)
    if op is None or shape is None or depth == 0 or int(np.prod(shape)) > LIMIT:
        return None
    if is_onnx(op, "Constant"):
        return _constant(op, value)
    if is_onnx(op, "ConstantOfShape"):  # its value attribute is one element; the result's static shape is its shape
        one = _constant(op, op.result, [1]) if "torch.onnx.value" in op.attributes else None
        return None if one is None or one.size < 1 else np.full(shape, one.reshape(-1)[0], one.dtype)
    if op.name == "torch.vtensor.literal" and DTYPES.get(element_type(value)) is not None:
        return np.array(ir.DenseElementsAttr(op.attributes["value"])).astype(DTYPES[element_type(value)]).reshape(shape)
    # Expand, Reshape, Unsqueeze, Squeeze: the result's static shape says what they make of their first operand
    shaping = any(is_onnx(op, name) for name in ("Expand", "Reshape", "Unsqueeze", "Squeeze"))
    taken = op.operands[:1] if shaping else op.operands
    operands = [evaluate(v, depth - 1, memo) for v in taken]
    if any(x is None for x in operands):
        return None
    for name, fn in BINARY.items():
        if is_onnx(op, name) and len(operands) == 2:
            return np.broadcast_to(fn(*operands), shape)
    if is_onnx(op, "Not") and len(operands) == 1:
        return np.logical_not(operands[0])
    if shaping:
        x = operands[0]
        return np.broadcast_to(x, shape) if is_onnx(op, "Expand") else x.reshape(shape)
    if is_onnx(op, "ScatterND") and len(operands) == 3 and _reduction(op) == "none":
        data, indices, updates = operands
        out = np.array(data, copy=True)
        k = indices.shape[-1]
        out[tuple(np.moveaxis(indices.reshape(-1, k), -1, 0))] = updates.reshape(-1, *data.shape[k:])
        return out.reshape(shape)
    if is_onnx(op, "Slice") and len(operands) >= 3:
        return _slice(*operands).reshape(shape)
    if is_onnx(op, "Transpose") and len(operands) == 1:
        return np.transpose(operands[0], onnx_ints(op, "perm", list(range(operands[0].ndim))[::-1]))
    if is_onnx(op, "Cast") and element_type(value) in DTYPES:
        return operands[0].astype(DTYPES[element_type(value)])
    if is_onnx(op, "Where") and len(operands) == 3:
        return np.broadcast_to(np.where(*operands), shape).astype(DTYPES.get(element_type(value), np.float32))
    return None


def _reduction(op: ir.Operation) -> str:
    attr = op.attributes["torch.onnx.reduction"] if "torch.onnx.reduction" in op.attributes else None
    return ir.StringAttr(attr).value if attr is not None else "none"


def _slice(x: np.ndarray, starts: np.ndarray, ends: np.ndarray, axes: Optional[np.ndarray] = None,
           steps: Optional[np.ndarray] = None) -> np.ndarray:
    """ONNX's Slice of `x` (its inputs evaluated): numpy clamps the bounds as ONNX says."""
    index = [slice(None)] * x.ndim
    axes = range(len(starts)) if axes is None else axes
    steps = [1] * len(starts) if steps is None else steps
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[int(axis)] = slice(int(start), int(end), int(step))
    return x[tuple(index)]


def mask_kind(mask: ir.Value, rows: int, columns: int) -> Optional[str]:
    """What an additive attention mask of `rows` queries by `columns` keys computed from
    constants is: "zero" (every value 0: no mask at all; BERT's export without an attention_mask
    input), "causal" (0 where the key's index is at most the query's, and elsewhere so low, -1e4
    or less: f16's finfo.min, -inf, that softmax gives it no weight in f32; transformers'
    decoders), or None (another mask, or one not computed from constants)."""
    return kind_of_mask(evaluate(mask), rows, columns)


def kind_of_mask(values: Optional[np.ndarray], rows: int, columns: int) -> Optional[str]:
    """mask_kind of a mask's values already evaluated (None: not computed from constants)."""
    if values is None or values.shape[-2:] != (rows, columns):
        return None
    values = values.reshape(-1, rows, columns).astype(np.float32)
    if not np.any(values):
        return "zero"
    allowed = np.tril(np.ones((rows, columns), np.bool_))
    return "causal" if np.all(values[:, allowed] == 0) and np.all(values[:, ~allowed] <= -1e4) else None


def scalar_constant(value: ir.Value) -> Optional[float]:
    """The one value of a float constant of a single element (the exporter's scalar tensors,
    a splat or a blob), else None."""
    values = evaluate(value, depth=1)
    return float(values.reshape(-1)[0]) if values is not None and values.size == 1 and values.dtype.kind == "f" else None
