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

from tuner.rewrite.torch_ops import constant_bytes, element_type, is_onnx, producer, static_shape

LIMIT = 1 << 24  # elements: a 4096 x 4096 mask
DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "si64": np.int64, "si32": np.int32,
          "i1": np.bool_, "ui8": np.uint8}
BINARY = {"And": np.logical_and, "Or": np.logical_or, "Less": np.less, "LessOrEqual": np.less_equal,
          "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "Equal": np.equal, "Add": np.add,
          "Sub": np.subtract, "Mul": np.multiply}


def _constant(op: ir.Operation, value: ir.Value) -> Optional[np.ndarray]:
    shape, dtype = static_shape(value), DTYPES.get(element_type(value))
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


def evaluate(value: ir.Value, depth: int = 16) -> Optional[np.ndarray]:
    """The value `value` holds where the program computes it from constants alone by the ops this
    module knows, else None."""
    shape = static_shape(value)
    op = producer(value)
    if op is None or shape is None or depth == 0 or int(np.prod(shape)) > LIMIT:
        return None
    if is_onnx(op, "Constant"):
        return _constant(op, value)
    if op.name == "torch.vtensor.literal" and DTYPES.get(element_type(value)) is not None:
        return np.array(ir.DenseElementsAttr(op.attributes["value"])).astype(DTYPES[element_type(value)]).reshape(shape)
    # Expand and Reshape: the result's static shape says what they make of their first operand
    taken = op.operands[:1] if is_onnx(op, "Expand") or is_onnx(op, "Reshape") else op.operands
    operands = [evaluate(v, depth - 1) for v in taken]
    if any(x is None for x in operands):
        return None
    for name, fn in BINARY.items():
        if is_onnx(op, name) and len(operands) == 2:
            return np.broadcast_to(fn(*operands), shape)
    if is_onnx(op, "Not") and len(operands) == 1:
        return np.logical_not(operands[0])
    if is_onnx(op, "Expand") or is_onnx(op, "Reshape"):
        x = operands[0]
        return np.broadcast_to(x, shape) if is_onnx(op, "Expand") else x.reshape(shape)
    if is_onnx(op, "Cast") and element_type(value) in DTYPES:
        return operands[0].astype(DTYPES[element_type(value)])
    if is_onnx(op, "Where") and len(operands) == 3:
        return np.broadcast_to(np.where(*operands), shape).astype(DTYPES.get(element_type(value), np.float32))
    return None


def mask_kind(mask: ir.Value, rows: int, columns: int) -> Optional[str]:
    """What an additive attention mask of `rows` queries by `columns` keys computed from
    constants is: "zero" (every value 0: no mask at all; BERT's export without an attention_mask
    input), "causal" (0 where the key's index is at most the query's, and elsewhere so low, -1e4
    or less: f16's finfo.min, -inf, that softmax gives it no weight in f32; transformers'
    decoders), or None (another mask, or one not computed from constants)."""
    values = evaluate(mask)
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
