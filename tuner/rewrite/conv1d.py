"""1-D convolutions as matrix products of the filter by gathered taps, in an ONNX model's import.

Whisper's two input convolutions and wav2vec2's feature extractor are `onnx.Conv` over [N, C, L]
(kernel k, stride s, padding p0 and p1, one group). Written as

    Conv(X, W[O, C, k], B)  ->  MatMul(Reshape(W, [O, C*k]), Reshape(Concat_j(Unsqueeze(Slice(Pad(X), j, step s), 2)), [N, C*k, L']))
                                + Reshape(B, [O, 1])

(the k taps of every output position side by side under each channel, as W[O, C, k] lays out its
row), the convolution is a 2-D filter by each image's taps, the form the external GEMM kernel
takes (tuner.rewrite.external_gemm) with the bias per filter in its epilogue. Exact: each output
is the same products summed. Only static 3-d inputs, unit dilation, one group and explicit
padding (auto_pad NOTSET or VALID) are rewritten."""

from __future__ import annotations

from typing import Callable

from iree.compiler import ir

from tuner.rewrite.torch_ops import (element_type, group_count, int64_literal, onnx_ints, onnx_op, onnx_string,
                                     replace_op, rewrite_sites, static_shape)


def conv1d_taken(conv: ir.Operation) -> bool:
    """Whether `conv` is a 1-D convolution this rewrite takes."""
    x, w = static_shape(conv.operands[0]), static_shape(conv.operands[1]) if len(conv.operands) > 1 else None
    if x is None or w is None or len(x) != 3 or len(w) != 3 or w[1] != x[1] or group_count(conv) != 1:
        return False
    if onnx_string(conv, "auto_pad", "NOTSET") not in ("NOTSET", "VALID") or onnx_ints(conv, "dilations", [1]) != [1]:
        return False
    return static_shape(conv.result) is not None and (len(conv.operands) < 3 or static_shape(conv.operands[2]) == [w[0]])


def conv1ds_as_matmuls(module: ir.Module, only: Callable[[ir.Operation], bool] = lambda conv: True) -> list[str]:
    """Rewrite every 1-D `onnx.Conv` of `module` the rewrite takes (and `only` does) in place
    (inside its context) as a MatMul of its taps; returns each one's input and filter shapes."""
    return rewrite_sites(module, "Conv", lambda conv: conv1d_taken(conv) and only(conv), _as_matmul)


def _as_matmul(conv: ir.Operation) -> str:
    ip, loc = ir.InsertionPoint(conv), conv.location
    x, w = conv.operands[0], conv.operands[1]
    (n, c, length), (o, _, k) = static_shape(x), static_shape(w)
    out = static_shape(conv.result)[-1]
    stride, (before, after) = onnx_ints(conv, "strides", [1])[0], onnx_ints(conv, "pads", [0, 0])
    element = element_type(conv.result)

    def op(name: str, operands: list[ir.Value], shape: list[int], **attributes: ir.Attribute) -> ir.Value:
        return onnx_op(name, operands, shape, element, ip, loc, **attributes)

    padded = x
    if before or after:
        padded = op("Pad", [x, int64_literal([0, 0, before, 0, 0, after], ip, loc)], [n, c, length + before + after])
    taps = []
    for j in range(k):
        tap = op("Slice", [padded, int64_literal([j], ip, loc), int64_literal([j + stride * (out - 1) + 1], ip, loc),
                           int64_literal([2], ip, loc), int64_literal([stride], ip, loc)], [n, c, out])
        taps.append(op("Unsqueeze", [tap, int64_literal([2], ip, loc)], [n, c, 1, out]))
    gathered = op("Concat", taps, [n, c, k, out], axis=ir.IntegerAttr.get(ir.IntegerType.get_signed(64), 2)) \
        if k > 1 else taps[0]
    columns = op("Reshape", [gathered, int64_literal([n, c * k, out], ip, loc)], [n, c * k, out])
    y = op("MatMul", [op("Reshape", [w, int64_literal([o, c * k], ip, loc)], [o, c * k]), columns], [n, o, out])
    if len(conv.operands) > 2:
        y = op("Add", [y, op("Reshape", [conv.operands[2], int64_literal([o, 1], ip, loc)], [o, 1])], [n, o, out])
    replace_op(conv, y)
    return f"{n}x{c}x{length} by {o}x{c}x{k}"
