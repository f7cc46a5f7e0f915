"""A batch of narrow images convolved as one wide image, in an ONNX model's import: an experiment
(tuner.rewrite.EXPERIMENTS), not offered by the flag stage until it is timed on a GPU.

IREE 3.13's GPU convolutions tile a row's output columns by whole MMA tiles (16 on cuda): ResNet's
last stage, 7 columns wide, computes 16 per row (2.3x the work), in its direct form too
(BENCHMARKS.md). Side by side, each image with two zero columns after it, the batch of 8 is one
image 72 columns wide, computed as 80 (1.1x):

    Conv(X[N,C,H,W], Wt, B, pads=[1,1,1,1])  ->
    Transpose(Slice(Reshape(Conv(Reshape(Transpose(Pad(X, 2 columns after each row), [1,2,0,3]),
                                         [1,C,H,N*(W+2)]), Wt, B, pads=[1,1,1,1]),
                            [K,H,N,W+2]), columns 0:W), [2,0,1,3])

Each output column reads its own image's columns and zeros only (the two added columns, or the
convolution's own padding at the ends), so the result is the same to the bit. Taken: 2-D NCHW
3x3 convolutions with unit stride and dilation, one group, padding 1 all round, static shapes,
whose rows compute over 1.5x their width and where the side-by-side row wastes less."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import (group_count, ONNX_OP, element_type, int64_literal, int_list, keep_leading, onnx_op, pad_end,
                                     replace_op, rewrite_sites, si64_array, static_shape)

MULTIPLE = 16  # the largest MMA tile side along the output columns among the GPU targets' intrinsics


def _up(n: int) -> int:
    return -(-n // MULTIPLE) * MULTIPLE


def _taken(conv: ir.Operation) -> bool:
    attrs = {name: conv.attributes[name] for name in conv.attributes}
    x, y = static_shape(conv.operands[0]), static_shape(conv.result)
    weight = static_shape(conv.operands[1]) if len(conv.operands) > 1 else None
    if x is None or y is None or weight is None or len(x) != 4 or weight[2:] != [3, 3] or x[2:] != y[2:]:
        return False
    ones = [1, 1]
    if ((int_list(attrs["torch.onnx.strides"]) if "torch.onnx.strides" in attrs else ones) != ones
            or (int_list(attrs["torch.onnx.dilations"]) if "torch.onnx.dilations" in attrs else ones) != ones
            or group_count(conv) != 1
            or (int_list(attrs["torch.onnx.pads"]) if "torch.onnx.pads" in attrs else None) != [1, 1, 1, 1]
            or "torch.onnx.auto_pad" in attrs):
        return False
    n, w = x[0], x[3]
    # Only rows that compute over half again their width (ResNet's 7: 16; not 14, 28 or 56, whose
    # rows lose an eighth, less than the two copies the rewrite adds could cost), and only where
    # side by side wastes less.
    return n > 1 and _up(w) * 2 > w * 3 and _up(n * (w + 2)) * w < _up(w) * n * w


def batch_to_width(module: ir.Module) -> list[str]:
    """Rewrite every `onnx.Conv` of `module` this rewrite takes in place (inside its context);
    returns each one's input shape and the row it computes instead."""
    return rewrite_sites(module, "Conv", _taken, _side_by_side)


def _side_by_side(conv: ir.Operation) -> str:
    ip, loc = ir.InsertionPoint(conv), conv.location
    n, c, h, w = static_shape(conv.operands[0])
    k = static_shape(conv.result)[1]
    element = element_type(conv.result)
    wide = n * (w + 2)
    padded = pad_end(conv.operands[0], 2, ip, loc)
    side = onnx_op("Transpose", [padded], [c, h, n, w + 2], element, ip, loc, perm=si64_array([1, 2, 0, 3]))
    row = onnx_op("Reshape", [side, int64_literal([1, c, h, wide], ip, loc)], [1, c, h, wide], element, ip, loc)
    attrs = {name: conv.attributes[name] for name in conv.attributes}
    out = ir.Operation.create(ONNX_OP, results=[ir.Type.parse(f"!torch.vtensor<[1,{k},{h},{wide}],{element}>")],
                              operands=[row, *conv.operands[1:]], attributes=attrs, loc=loc, ip=ip).result
    split = onnx_op("Reshape", [out, int64_literal([k, h, n, w + 2], ip, loc)], [k, h, n, w + 2], element, ip, loc)
    kept = keep_leading(split, w, ip, loc)
    replace_op(conv, onnx_op("Transpose", [kept], [n, k, h, w], element, ip, loc, perm=si64_array([2, 0, 1, 3])))
    return f"{n}x{c}x{h}x{w} as one row of {wide} ({_up(wide)} computed, not {n}x{_up(w)})"
