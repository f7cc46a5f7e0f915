"""Convolutions and pools whose window leaves input unread at a one-pixel output, cut to what they
read, in an ONNX model's import.

IREE 3.13 does not compile an `onnx.Conv` whose output is one pixel along a spatial dim while the
(padded) input there is wider than the window reaches ("'linalg.generic' op inferred
input/output operand #1 has shape's dimension #2 to be 4, but found 3"): a ResNet at CIFAR's
32x32 (its last 3x3 stride-2 convolution on a 2x2 map, padding 1: one pixel out, 3 of 4 read), a
tiny Inception-v3, ShuffleNetV2 and ResNeXt on the CPU sweep of the twenty-seventh session.
Measured on llvm-cpu: [4 -> 1] with a 3-window at stride 2, [5 -> 1] at stride 3, [6 -> 1] at
stride 4 and [2 + 2 pad -> 1] fail; a 1-wide window, or any output of 2 or more pixels, compiles.

The input those windows never read is dropped: first the end padding that lies past the last
window, then, where that is not enough, the input's own last pixels (an `onnx.Slice`). The
convolution then reads every value it is given and computes the same result to the bit. Max and
average pools (Inception's 3x3 stride-2 pool on a 4x4 map) fail alike and are cut alike (padding
that no window reaches counts in no average). Only 2-d ops of static shapes with explicit padding
(`auto_pad` NOTSET; pools with `ceil_mode` 0) are rewritten, each one whose output is one pixel
along a dim that the window does not cover."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from iree.compiler import ir

from tuner.rewrite.torch_ops import (conv2d, element_type, int64_literal, onnx_ints, onnx_op, onnx_string, rewrite_sites,
                                     si64_array, static_shape)


@dataclass(frozen=True)
class _Window:
    """A 2-d window op's input shape, window, strides, dilations and pads (top, left, bottom, right)."""

    x: list[int]
    kernel: list[int]
    strides: list[int]
    dilations: list[int]
    pads: list[int]


def _window(op: ir.Operation) -> Optional[_Window]:
    """An onnx.Conv, MaxPool or AveragePool of a static 4-d input with explicit padding (and, for
    pools, the output's size rounded down), or None."""
    name = ir.StringAttr(op.attributes["name"]).value.removeprefix("onnx.")
    if name == "Conv":
        c = conv2d(op)
        return None if c is None or c.auto_pad != "NOTSET" else _Window(c.x, c.weight[2:], c.strides, c.dilations, c.pads)
    x = static_shape(op.operands[0])
    ceil = ir.IntegerAttr(op.attributes["torch.onnx.ceil_mode"]).value if "torch.onnx.ceil_mode" in op.attributes else 0
    if x is None or len(x) != 4 or onnx_string(op, "auto_pad", "NOTSET") != "NOTSET" or ceil:
        return None
    return _Window(x, onnx_ints(op, "kernel_shape", []), onnx_ints(op, "strides", [1, 1]),
                   onnx_ints(op, "dilations", [1, 1]), onnx_ints(op, "pads", [0] * 4))


def _excess(op: ir.Operation) -> Optional[list[int]]:
    """For each spatial dim, how many trailing (padded) input pixels no window reads where the
    output is one pixel along it and the window is wider than one; None where the op reads all
    it is given (or is not one this rewrite reads)."""
    w = _window(op)
    out = static_shape(op.results[0])
    if w is None or out is None or len(out) != 4 or len(w.kernel) != 2:
        return None
    excess = []
    for i in range(2):
        extent = w.x[2 + i] + w.pads[i] + w.pads[2 + i]
        used = (out[2 + i] - 1) * w.strides[i] + (w.kernel[i] - 1) * w.dilations[i] + 1
        excess.append(extent - used if out[2 + i] == 1 and w.kernel[i] > 1 and extent > used else 0)
    return excess if any(excess) else None


def fit_conv_windows(module: ir.Module) -> list[str]:
    """Rewrite every convolution or pool of `module` that leaves input unread at a one-pixel
    output (in place, inside its context); returns each one's input shape and what was dropped."""
    return [change for name in ("Conv", "MaxPool", "AveragePool")
            for change in rewrite_sites(module, name, lambda op: _excess(op) is not None, _fitted)]


def _fitted(op: ir.Operation) -> str:
    excess, w = _excess(op), _window(op)
    pads = list(w.pads)
    cut = []
    for i in range(2):
        from_pad = min(excess[i], pads[2 + i])
        pads[2 + i] -= from_pad
        cut.append(excess[i] - from_pad)  # still to drop: the input's own last pixels
    op.attributes["torch.onnx.pads"] = si64_array(pads)
    if any(cut):
        ip, loc, x = ir.InsertionPoint(op), op.location, op.operands[0]
        ends = [w.x[2 + i] - cut[i] for i in range(2)]
        op.operands[0] = onnx_op("Slice", [x, int64_literal([0, 0], ip, loc), int64_literal(ends, ip, loc),
                                           int64_literal([2, 3], ip, loc), int64_literal([1, 1], ip, loc)],
                                 [*w.x[:2], *ends], element_type(x), ip, loc)
    kind = ir.StringAttr(op.attributes["name"]).value.removeprefix("onnx.")
    dropped = [f"{e} of {w.x[2 + i] + w.pads[i] + w.pads[2 + i]}" for i, e in enumerate(excess) if e]
    return f"{kind} {'x'.join(map(str, w.x))} by {'x'.join(map(str, w.kernel))}: {' and '.join(dropped)} unread dropped"
