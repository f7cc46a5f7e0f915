"""Means and sums over a length IREE's GPU reduction pipeline cannot split, padded with zeros to
one it can, in an ONNX model's import.

IREE 3.13 configures a row reduction on CUDA with VectorDistribute (a workgroup a row, its
subgroups and lanes splitting the row) only where the reduced length is a multiple of the lanes'
loads; any other length (784 = 28 x 28, 196, 49, wav2vec2's 3199 frames) falls to TileAndFuse with
128 rows a workgroup of 32 threads, each thread summing its rows alone: 512 rows of 3199 are then
4 workgroups on the whole GPU (wav2vec2-base's GroupNorm took 4.1 ms of the model's 4.6 on an
H200). Padded to a multiple of 64 with zeros, the same sum is a VectorDistribute reduction, which
the tuner's reduction pipeline then tunes:

    ReduceMean(X, trailing axes)  ->  Reshape(Mul(ReduceSum(Pad(Reshape(X, [..., L]), L' - L), [-1]), 1 / L), ...)

Zeros add nothing to a sum, so the result is the same sum (in another order) divided by the true
length. An `InstanceNormalization` (how the exporter writes GroupNorm with a group a channel) is
written as its two means, each padded alike, in f32 as IREE's own lowering computes it:

    InstanceNormalization(X, s, b)  ->  (X - m) / sqrt(mean((X - m)^2) + eps) * s + b,  m = mean(X)

Only reductions over the input's trailing axes (a pool over H x W, a norm over the last axis),
with static shapes and constant axes, are taken."""

from __future__ import annotations

from functools import partial
from math import prod
from typing import Callable, Optional

from iree.compiler import ir

from tuner.rewrite.constant_eval import evaluate
from tuner.rewrite.f32_reductions import FLOAT, HALF
from tuner.rewrite.torch_ops import (element_type, float_literal, int64_literal, is_onnx, onnx_op, pad_end, replace_op,
                                     si64, static_shape)

# The multiple the reduced length is padded to: IREE 3.13 gave 512 x 832, 3200 and 3264 rows
# VectorDistribute configs and 784 and 3199 TileAndFuse ones (iree-compile for sm_80, configurations dumped).
MULTIPLE = 64


def _padded(length: int) -> int:
    return -(-length // MULTIPLE) * MULTIPLE


def _trailing(op: ir.Operation) -> Optional[tuple[int, int]]:
    """(how many trailing axes, their length) where `op` (a ReduceMean or ReduceSum) reduces its
    input's trailing axes, given as a constant, and the length is no multiple of MULTIPLE; else None."""
    shape = static_shape(op.operands[0])
    if shape is None or static_shape(op.result) is None or len(op.operands) < 2:
        return None
    axes = evaluate(op.operands[1])
    if axes is None or axes.size == 0:
        return None
    rank = len(shape)
    axes = sorted({int(a) % rank for a in axes.flatten()})
    if axes != list(range(rank - len(axes), rank)):
        return None
    length = prod(shape[rank - len(axes):])
    return (len(axes), length) if _unsplit(length) else None


def _unsplit(length: int) -> bool:
    """Whether a reduction of `length` values needs padding (no multiple of MULTIPLE)."""
    return length % MULTIPLE != 0 and length > 1


def _padded_sum(x: ir.Value, length: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """The sum of `x` [..., length] over its last dim, keeping it ([..., 1]), of `x` padded with
    zeros to a multiple of MULTIPLE."""
    shape = static_shape(x)
    padded = pad_end(x, _padded(length) - length, ip, loc)
    return onnx_op("ReduceSum", [padded, int64_literal([-1], ip, loc)], [*shape[:-1], 1], element_type(x), ip, loc,
                   keepdims=si64(1))


def _padded_mean(x: ir.Value, length: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    total = _padded_sum(x, length, ip, loc)
    return onnx_op("Mul", [total, float_literal(1.0 / length, element_type(x), ip, loc)], static_shape(total),
                   element_type(x), ip, loc)


def _reduction(op: ir.Operation, mean: bool, count: int, length: int) -> str:
    """`op` over its `count` trailing axes, `length` values, as a sum of padded rows."""
    x, loc, ip = op.operands[0], op.location, ir.InsertionPoint(op)
    shape = static_shape(x)
    lead = shape[:len(shape) - count]
    rows = onnx_op("Reshape", [x, int64_literal([*lead, length], ip, loc)], [*lead, length], element_type(x), ip, loc)
    reduced = (_padded_mean if mean else _padded_sum)(rows, length, ip, loc)
    out = static_shape(op.result)
    replace_op(op, onnx_op("Reshape", [reduced, int64_literal(out, ip, loc)], out, element_type(x), ip, loc))
    return f"{'ReduceMean' if mean else 'ReduceSum'} of {'x'.join(map(str, shape))}: {length} -> {_padded(length)}"


def _instance_norm_length(op: ir.Operation) -> Optional[int]:
    shape = static_shape(op.operands[0])
    if shape is None or len(shape) < 3 or static_shape(op.result) != shape:
        return None
    length = prod(shape[2:])
    return length if _unsplit(length) else None


def _instance_norm(op: ir.Operation, length: int) -> str:
    x, scale, bias = list(op.operands)[:3]
    loc, ip = op.location, ir.InsertionPoint(op)
    shape, element = static_shape(x), element_type(x)
    n, c = shape[:2]
    eps = ir.FloatAttr(op.attributes["torch.onnx.epsilon"]).value if "torch.onnx.epsilon" in op.attributes else 1e-5
    wide = onnx_op("Cast", [x], shape, "f32", ip, loc, to=si64(FLOAT)) if element in HALF else x
    work = "f32" if element in HALF else element
    rows = onnx_op("Reshape", [wide, int64_literal([n, c, length], ip, loc)], [n, c, length], work, ip, loc)
    centred = onnx_op("Sub", [rows, _padded_mean(rows, length, ip, loc)], [n, c, length], work, ip, loc)
    square = onnx_op("Mul", [centred, centred], [n, c, length], work, ip, loc)
    variance = _padded_mean(square, length, ip, loc)
    std = onnx_op("Sqrt", [onnx_op("Add", [variance, float_literal(eps, work, ip, loc)], [n, c, 1], work, ip, loc)],
                  [n, c, 1], work, ip, loc)
    normed = onnx_op("Div", [centred, std], [n, c, length], work, ip, loc)

    def per_channel(v: ir.Value) -> ir.Value:
        v = onnx_op("Cast", [v], [c], work, ip, loc, to=si64(FLOAT)) if element_type(v) != work else v
        return onnx_op("Reshape", [v, int64_literal([c, 1], ip, loc)], [c, 1], work, ip, loc)

    y = onnx_op("Add", [onnx_op("Mul", [normed, per_channel(scale)], [n, c, length], work, ip, loc), per_channel(bias)],
                [n, c, length], work, ip, loc)
    y = onnx_op("Reshape", [y, int64_literal(shape, ip, loc)], shape, work, ip, loc)
    if element in HALF:
        y = onnx_op("Cast", [y], shape, element, ip, loc, to=si64(HALF[element]))
    replace_op(op, y)
    return f"InstanceNormalization of {'x'.join(map(str, shape))}: {length} -> {_padded(length)}"


def pad_reductions(module: ir.Module) -> list[str]:
    """Every mean or sum over trailing axes of a length no multiple of MULTIPLE in `module`, and
    every InstanceNormalization over such a length, computed over zero-padded rows (in place,
    inside its context). Returns one entry per rewritten op."""
    sites: list[Callable[[], str]] = []  # each site's rewrite, what was read of it bound

    def visit(op: ir.Operation) -> ir.WalkResult:
        if is_onnx(op, "ReduceMean") or is_onnx(op, "ReduceSum"):
            found = _trailing(op)
            if found:
                sites.append(partial(_reduction, op, is_onnx(op, "ReduceMean"), *found))
        elif is_onnx(op, "InstanceNormalization"):
            length = _instance_norm_length(op)
            if length:
                sites.append(partial(_instance_norm, op, length))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    done = [rewrite() for rewrite in sites]
    if done:
        module.operation.verify()
    return done
