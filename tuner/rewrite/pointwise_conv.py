"""1x1 convolutions as matrix products, in an ONNX model's import.

IREE 3.13 turns an NCHW 1x1 convolution with unit stride into a `linalg.generic` that reads the
input as its first operand, `X[n, c, p]`, and the filter as its second, `W[o, c]`, writing
`Y[n, o, p]`: the contraction's M is the pixels and its N the output channels, so its result is
written transposed (N outer, M inner). On CUDA (sm_80 target, run on an H100) every f16
convolution of this form computes a wrong result, whatever its config: relative error 1.0-1.5
against torch's float32 conv2d on 8 shapes of 64-256 channels, every one of 12 configs of the
tuner the same (benchmarks/conv_numerics.py; f32 and 3x3 convolutions are right). ResNet-50's
result is wrong from its first bottleneck on (BENCHMARKS.md). Written as

    Conv(X, W, B, 1x1)  ->  Reshape(MatMul(Reshape(W, [O, C]), Reshape(X, [N, C, H*W])) + Reshape(B, [O, 1]), [N, O, H, W])

the convolution is a batch matmul with the filter as its first operand (M = output channels,
N = pixels, the result in its natural order), which IREE computes right on CUDA (the same 8
shapes: relative error 4e-4 to 7e-4, as llvm-cpu's) with f32 accumulation, as the convolution had.
The filter is broadcast over the batch: IREE hoists the copy into the module's initializer where
it is small, and makes it on every call where it is not (ResNet-50 at batch 8 on the H200:
`elementwise_broadcast_8x1048576_f16`, a 2048x512 filter of the last stage copied per image, 0.105 ms a call). Where the
filter is larger than the pixels' input and output together, the images are put side by side
instead, so that no copy of the filter is made:

    Reshape(Transpose(Reshape(MatMul(Reshape(W, [O, C]), Reshape(Transpose(Reshape(X, [N, C, H*W])), [C, N*H*W]))
                              + Reshape(B, [O, 1]), [O, N, H*W])), [N, O, H, W])

one 2-D matmul (M = output channels, N = every image's pixels) and two transposes of the
activations (C + O values a pixel) in place of a copy of the filter per image. Only convolutions
with a 1x1 kernel, unit stride and dilation, no padding, one group and a 4-d static input are
rewritten."""

from __future__ import annotations

from typing import Callable, Optional

from iree.compiler import ir

from tuner.rewrite.torch_ops import (conv2d, element_type, int64_literal, onnx_op, replace_op, rewrite_sites, si64_array,
                                     static_shape)


def _pointwise(conv: ir.Operation) -> bool:
    """Whether the convolution is one this rewrite takes."""
    a = conv2d(conv)
    return (a is not None and a.weight[2:] == [1, 1] and a.strides == [1, 1] and not any(a.pads)
            and a.dilations == [1, 1] and a.group == 1 and a.auto_pad in ("NOTSET", "VALID"))


Layout = Callable[[int, int, int, int], bool]  # (images, channels, outputs, pixels) -> side by side


def pointwise_convs_as_matmuls(module: ir.Module, only: Callable[[ir.Operation], bool] = lambda conv: True,
                               side_by_side: Optional[Layout] = None) -> list[str]:
    """Rewrite every 1x1 unit-stride `onnx.Conv` of `module` (that `only` takes) in place (inside
    its context) as a MatMul, the images side by side where `side_by_side` says (default: where
    the filter a batch matmul copies per image is the larger, `copies_filter`); returns each
    rewritten convolution's input and filter shapes."""
    layout = side_by_side or copies_filter
    return rewrite_sites(module, "Conv", lambda conv: _pointwise(conv) and only(conv),
                         lambda conv: _as_matmul(conv, layout))


def _as_matmul(conv: ir.Operation, layout: Layout) -> str:
    ip, loc = ir.InsertionPoint(conv), conv.location
    x, w = conv.operands[0], conv.operands[1]
    n, c, h, width = static_shape(x)
    o = static_shape(w)[0]
    element = element_type(conv.result)

    def op(name: str, operands: list[ir.Value], shape: list[int], **attributes: ir.Attribute) -> ir.Value:
        return onnx_op(name, operands, shape, element, ip, loc, **attributes)

    def reshape(value: ir.Value, shape: list[int]) -> ir.Value:
        return op("Reshape", [value, int64_literal(shape, ip, loc)], shape)

    pixels = h * width
    side_by_side = layout(n, c, o, pixels)
    if side_by_side:  # [C, N*P]: every image's pixels in the columns
        columns = reshape(op("Transpose", [reshape(x, [n, c, pixels])], [c, n, pixels], perm=si64_array([1, 0, 2])),
                          [c, n * pixels])
        shape = [o, n * pixels]
    else:  # [N, C, P]: a batch matmul, the filter broadcast over the images
        columns, shape = reshape(x, [n, c, pixels]), [n, o, pixels]
    y = op("MatMul", [reshape(w, [o, c]), columns], shape)
    if len(conv.operands) > 2:
        y = op("Add", [y, reshape(conv.operands[2], [o, 1])], shape)
    if side_by_side:
        y = op("Transpose", [reshape(y, [o, n, pixels])], [n, o, pixels], perm=si64_array([1, 0, 2]))
    replace_op(conv, reshape(y, [n, o, h, width]))
    return f"{n}x{c}x{h}x{width} by {o}x{c}x1x1"


def copies_filter(images: int, channels: int, outputs: int, pixels: int) -> bool:
    """Whether the images go side by side in one 2-D matmul for IREE: where the filter a batch
    matmul would copy per image is larger than the input and output pixels the two transposes
    move."""
    return images > 1 and outputs * channels > pixels * (channels + outputs)
