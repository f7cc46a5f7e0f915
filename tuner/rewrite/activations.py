"""The activation after a value, as one step an external kernel computes on its sums
(`activation_of`): an onnx.Relu or onnx.Gelu, SiLU as the exporter writes it (x * Sigmoid(x)),
and GELU's tanh form spelled out.

GPT-2's `gelu_new` (transformers' NewGELUActivation) is Python arithmetic, not `F.gelu`, so
torch.onnx.export writes it op by op:

    0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
    ->  Mul(Mul(x, 0.5), Add(Tanh(Mul(Add(x, Mul(Pow(x, 3), 0.044715)), 0.7978...)), 1))

which is GELU's tanh form (onnx.Gelu with approximate = "tanh"); IREE makes it a dispatch of its
own after an external GEMM. `tanh_gelu` finds that chain on a value; each constant is matched
within f16's rounding of it."""

from __future__ import annotations

import math
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.constant_eval import scalar_constant
from tuner.rewrite.torch_ops import is_onnx, only_user, onnx_string

TOLERANCE = 2e-3  # f16 holds 0.044715 as 0.04471 and sqrt(2 / pi) as 0.7979


def _near(value: Optional[float], want: float) -> bool:
    return value is not None and abs(value - want) <= TOLERANCE * abs(want)


def _other(op: ir.Operation, value: ir.Value) -> Optional[ir.Value]:
    """The operand of a two-operand op that is not `value` (None where neither or both are)."""
    a, b = op.operands[0], op.operands[1]
    return b if a == value and b != value else a if b == value and a != value else None


def _by_constant(op: Optional[ir.Operation], name: str, value: ir.Value, want: float) -> bool:
    """Whether `op` is onnx.NAME of `value` and a scalar constant near `want`, either way round."""
    if not is_onnx(op, name) or len(op.operands) != 2:
        return False
    other = _other(op, value)
    return other is not None and _near(scalar_constant(other), want)


def tanh_gelu(x: ir.Value) -> Optional[list[ir.Operation]]:
    """The ops of GELU's tanh form spelled out on `x` (x's only users, each intermediate used
    once), in program order, the last one's result the GELU; None where `x` is not used so."""
    users = [use.owner for use in x.uses]
    by_name = {}
    for op in users:
        for name in ("Mul", "Pow", "Add"):
            if is_onnx(op, name):
                by_name[name] = op
    if len(users) != 3 or len(by_name) != 3:
        return None
    half, cube, inner = by_name["Mul"], by_name["Pow"], by_name["Add"]
    if not _by_constant(half, "Mul", x, 0.5) or not _near(scalar_constant(cube.operands[1]), 3.0) \
            or cube.operands[0] != x:
        return None
    scaled_cube = only_user(cube.result)
    if not _by_constant(scaled_cube, "Mul", cube.result, 0.044715) or only_user(scaled_cube.result) != inner \
            or _other(inner, x) != scaled_cube.result:
        return None
    scaled = only_user(inner.result)
    if not _by_constant(scaled, "Mul", inner.result, math.sqrt(2 / math.pi)):
        return None
    tanh = only_user(scaled.result)
    if not is_onnx(tanh, "Tanh"):
        return None
    plus_one = only_user(tanh.result)
    if not _by_constant(plus_one, "Add", tanh.result, 1.0):
        return None
    last = only_user(plus_one.result)
    if not is_onnx(last, "Mul") or only_user(half.result) != last or _other(last, plus_one.result) != half.result:
        return None
    return [half, cube, scaled_cube, inner, scaled, tanh, plus_one, last]


def silu(x: ir.Value) -> Optional[list[ir.Operation]]:
    """[Sigmoid(x), Mul(x, Sigmoid(x))] where those two are x's only users (torch's SiLU as the
    exporter writes it: EfficientNet's, YOLO's), else None."""
    users = [use.owner for use in x.uses]
    sigmoid = next((op for op in users if is_onnx(op, "Sigmoid")), None)
    if len(users) != 2 or sigmoid is None:
        return None
    mul = only_user(sigmoid.result)
    if not is_onnx(mul, "Mul") or mul not in users or _other(mul, x) != sigmoid.result:
        return None
    return [sigmoid, mul]


def activation_of(x: ir.Value, through_reshape: bool = False) -> Optional[tuple[str, list[ir.Operation]]]:
    """The activation x goes through, as a kernel's epilogue step and the ops that compute it
    (the last one's result the activation's): "relu" and "gelu" (an onnx.Relu or exact onnx.Gelu
    that is x's only use), "gelu_tanh" (onnx.Gelu's tanh form, or tanh_gelu's chain), "silu"
    (silu's pair); None where it goes through none of them. `through_reshape`: also after a
    Reshape that is x's only use (a Gemm's 2-D result viewed as the model's rows), the Reshape
    first in the ops."""
    user = only_user(x)
    if through_reshape and is_onnx(user, "Reshape"):
        found = activation_of(user.result)
        return (found[0], [user, *found[1]]) if found else None
    if is_onnx(user, "Relu"):
        return "relu", [user]
    if is_onnx(user, "Gelu"):
        approximate = onnx_string(user, "approximate", "none")
        return {"none": ("gelu", [user]), "tanh": ("gelu_tanh", [user])}.get(approximate)
    for step, match in (("gelu_tanh", tanh_gelu), ("silu", silu)):
        ops = match(x)
        if ops is not None:
            return step, ops
    return None
