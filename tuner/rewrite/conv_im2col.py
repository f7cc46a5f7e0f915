"""Convolutions as an explicit im2col and a matrix product, in an ONNX model's import.

IREE 3.13 computes a GPU convolution as an implicit GEMM (TileAndFuse gathers the patches as it
goes), and none of its own pipelines feeds the MMAs with `ldmatrix` or `cp.async`; the tuner's
mma.sync kernel (pipelines.llvmgpu_mma_sync) does, but takes a contraction of plain operands. 3.13
has a conversion to an explicit im2col of its own (`iree-linalg-ext-convert-conv-to-im2col-op`),
but its `iree_linalg_ext.im2col` dispatch does not compile for cuda (`LinalgExtToLoopsPass`
fails), and `--iree-global-opt-use-im2col-for-convs` emits invalid IR for f16 convolutions that
accumulate in f32. Written in the program instead, for an NCHW convolution of a KH x KW filter:

    Conv(X, W, B)  ->  Reshape(MatMul(Reshape(W, [F, C*KH*KW]),
                                      Reshape(Gather(Reshape(Pad(X), [N, C, PH*PW]), TAPS, axis=2),
                                              [N, C*KH*KW, OH*OW])) + Reshape(B, [F, 1]), [N, F, OH, OW])

TAPS is a constant [KH*KW, OH*OW] of padded-pixel indices (tap (i, j) of output pixel (r, q)
reads padded pixel (i*dh + r*sh, j*dw + q*sw)): one gather, which IREE forms into one dispatch
(a `linalg.generic` of `tensor.extract`s; the pad is written by the dispatch before it). Nine
slices joined by a Concat cost nine strided copies a convolution instead: on the H100 the UNet
ResNet block with them ran 1.24x the default against 1.46x without the rewrite. The patches are
laid out as the filter is (channel, then the taps in row order), so the filter is only reshaped,
and the product is a batch matmul with the filter first (M = output channels, N = output
pixels, K = C x KH x KW), its result in NCHW order as the convolution's was; the filter is
broadcast over the batch. The sums are the same products in another order. Each patch tensor
holds KH x KW copies of the input. Only 2-D convolutions with a filter over 1x1, one group and
static shapes are rewritten."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import (element_type, group_count, int64_literal, int_list, onnx_op, replace_op, rewrite_sites,
                                     static_shape)


def _si64(value: int) -> ir.IntegerAttr:
    return ir.IntegerAttr.get(ir.IntegerType.get_signed(64), value)


def _geometry(conv: ir.Operation) -> tuple[list[int], list[int], list[int]] | None:
    """The strides, dilations and pads (top, left, bottom, right) of a convolution this rewrite
    takes, else None."""
    attrs = {name: conv.attributes[name] for name in conv.attributes}
    x, y = static_shape(conv.operands[0]), static_shape(conv.result)
    weight = static_shape(conv.operands[1]) if len(conv.operands) > 1 else None
    if x is None or y is None or weight is None or len(x) != 4 or len(weight) != 4 or weight[2:] == [1, 1]:
        return None
    if len(conv.operands) > 2 and static_shape(conv.operands[2]) != [weight[0]]:
        return None

    def ints(name: str, default: list[int]) -> list[int]:
        return int_list(attrs[name]) if name in attrs else default

    auto_pad = str(attrs["torch.onnx.auto_pad"]).strip('"') if "torch.onnx.auto_pad" in attrs else "NOTSET"
    if group_count(conv) != 1 or auto_pad not in ("NOTSET", "VALID") or weight[1] != x[1]:
        return None
    return ints("torch.onnx.strides", [1, 1]), ints("torch.onnx.dilations", [1, 1]), ints("torch.onnx.pads", [0] * 4)


def convs_as_im2col_matmuls(module: ir.Module) -> list[str]:
    """Rewrite every convolution of `module` this rewrite takes in place (inside its context);
    returns each one's input and filter shapes."""
    return rewrite_sites(module, "Conv", lambda op: _geometry(op) is not None, _as_im2col)


def _as_im2col(conv: ir.Operation) -> str:
    strides, dilations, pads = _geometry(conv)
    ip, loc = ir.InsertionPoint(conv), conv.location
    x, w = conv.operands[0], conv.operands[1]
    n, c, h, width = static_shape(x)
    f, _, kh, kw = static_shape(w)
    oh, ow = static_shape(conv.result)[2:]
    element = element_type(conv.result)

    def op(name: str, operands: list[ir.Value], shape: list[int], **attributes: ir.Attribute) -> ir.Value:
        return onnx_op(name, operands, shape, element, ip, loc, **attributes)

    def lit(values: list[int]) -> ir.Value:
        return int64_literal(values, ip, loc)

    padded, (ph, pw) = x, (h + pads[0] + pads[2], width + pads[1] + pads[3])
    if any(pads):  # ONNX: every dim's start, then every end
        padded = op("Pad", [x, lit([0, 0, pads[0], pads[1], 0, 0, pads[2], pads[3]])], [n, c, ph, pw])
    # One gather from the padded input's pixels by constant indices: tap (i, j) of output pixel
    # (r, q) reads padded pixel (i*d + r*s, j*d' + q*s'); the taps come before the pixels.
    pixels = [[(i * dilations[0] + r * strides[0]) * pw + j * dilations[1] + q * strides[1]
               for r in range(oh) for q in range(ow)] for i in range(kh) for j in range(kw)]
    flat = op("Reshape", [padded, lit([n, c, ph * pw])], [n, c, ph * pw])
    taps = op("Gather", [flat, int64_literal(pixels, ip, loc)], [n, c, kh * kw, oh * ow], axis=_si64(2))
    patches = op("Reshape", [taps, lit([n, c * kh * kw, oh * ow])], [n, c * kh * kw, oh * ow])
    y = op("MatMul", [op("Reshape", [w, lit([f, c * kh * kw])], [f, c * kh * kw]), patches], [n, f, oh * ow])
    if len(conv.operands) > 2:
        y = op("Add", [y, op("Reshape", [conv.operands[2], lit([f, 1])], [f, 1])], [n, f, oh * ow])
    replace_op(conv, op("Reshape", [y, lit([n, f, oh, ow])], [n, f, oh, ow]))
    return f"{n}x{c}x{h}x{width} by {f}x{c}x{kh}x{kw}"
