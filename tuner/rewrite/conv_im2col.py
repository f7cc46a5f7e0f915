"""Convolutions as an explicit im2col and a matrix product, in an ONNX model's import.

IREE 3.13 computes a GPU convolution as an implicit GEMM (TileAndFuse gathers the patches as it
goes), and none of its own pipelines feeds the MMAs with `ldmatrix` or `cp.async`; the tuner's
mma.sync kernel (pipelines.llvmgpu_mma_sync) does, but takes a contraction of plain operands. 3.13
has a conversion to an explicit im2col of its own (`iree-linalg-ext-convert-conv-to-im2col-op`),
but its `iree_linalg_ext.im2col` dispatch does not compile for cuda (`LinalgExtToLoopsPass`
fails), and `--iree-global-opt-use-im2col-for-convs` emits invalid IR for f16 convolutions that
accumulate in f32. Written in the program instead, for an NCHW convolution of a KH x KW filter:

    Conv(X, W, B)  ->  Reshape(Transpose(Reshape(
                           MatMul(Reshape(W, [F, C*KH*KW]),
                                  Reshape(Transpose(Where(INSIDE, Gather(Reshape(X, [N, C, H*W]), TAPS, axis=2), 0)),
                                          [C*KH*KW, N*OH*OW])) + Reshape(B, [F, 1]),
                           [F, N, OH*OW])), [N, F, OH, OW])

TAPS is a constant [KH*KW, OH*OW] of pixel indices (tap (i, j) of output pixel (r, q) reads
pixel (i*dh - top + r*sh, j*dw - left + q*sw)) and INSIDE a constant mask of the taps that fall
inside the image: a tap in the padding reads pixel 0 and is zeroed by the Where. IREE forms the
gather and the mask into one dispatch (a `linalg.generic` of `tensor.extract`s) that reads the
image as it is; a Pad of the image before the gather made IREE copy the image into a padded
one first, where the producer could not write it in place (a `slow_memcpy` dispatch: ResNet-50's
tuned build on the H200 spent 0.28 ms of its 2.62 in dispatches of that name). Nine slices joined by a
Concat cost nine strided copies a convolution instead: on the H100 the UNet ResNet block with
them ran 1.24x the default against 1.46x without the rewrite. The patches are
laid out as the filter is (channel, then the taps in row order), so the filter is only reshaped;
the images stand side by side in the patches' columns, so the product is one 2-D matmul with the
filter first (M = output channels, N = every image's output pixels, K = C x KH x KW), its result
transposed back to NCHW. A batch matmul of a 2-D filter by each image's patches made IREE copy
the filter once per image on every call (ResNet-50 at batch 8 on the H200:
`elementwise_broadcast_8x2359296_f16` 0.137 ms, 4% of the tuned model). The sums are the same
products in another order. Each patch tensor holds KH x KW copies of the input. The columns
and K are padded to what the mma.sync kernel's tiles divide (PIXELS, DEPTH: extra pixels and
taps are masked like the padding, extra taps meet zero filter columns, extra pixels are sliced
off). Only 2-D convolutions with a filter over 1x1, one group and static shapes are
rewritten. `apart_only`: only those whose windows do not overlap (stride at least the dilated
window along each axis: a patchify stem, a 2x2/2 downsample), whose patches are the image's own
values rearranged, no pixel read twice."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import (bool_literal, conv2d, element_type, int64_literal, keep_leading, onnx_op, replace_op,
                                     rewrite_sites, si64, si64_array, static_shape, zero_literal)

# The matmul's columns (its N) are padded to a multiple of PIXELS and its K to one of DEPTH: the
# mma.sync kernel pads neither (rows only), and its smallest tiles are 64 wide and 16 deep
# (pipelines.llvmgpu_mma_sync: BLOCK_N, BLOCK_K). ResNet's 28x28, 14x14 and 7x7 stages (784, 196
# and 49 pixels) and its stem (K = 3 x 49) would not be taken otherwise; an SD UNet's (4096, 1024,
# 256 pixels; K = 9 x 320 and up) need none.
PIXELS, DEPTH = 64, 16


def _geometry(conv: ir.Operation, apart_only: bool = False) -> tuple[list[int], list[int], list[int]] | None:
    """The strides, dilations and pads (top, left, bottom, right) of a convolution this rewrite
    takes, else None; `apart_only`: None too where its windows overlap."""
    a = conv2d(conv)
    if (a is None or static_shape(conv.result) is None or a.weight[2:] == [1, 1] or a.group != 1
            or a.auto_pad not in ("NOTSET", "VALID") or a.weight[1] != a.x[1]):
        return None
    if apart_only and any((k - 1) * d + 1 > s for k, d, s in zip(a.weight[2:], a.dilations, a.strides)):
        return None
    return a.strides, a.dilations, a.pads


def convs_as_im2col_matmuls(module: ir.Module, apart_only: bool = False) -> list[str]:
    """Rewrite every convolution of `module` this rewrite takes in place (inside its context);
    returns each one's input and filter shapes. `apart_only`: only those whose windows do not
    overlap."""
    return rewrite_sites(module, "Conv", lambda op: _geometry(op, apart_only) is not None, _as_im2col)


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

    # The matmul's columns (every image's pixels) and K made whole multiples of PIXELS and
    # DEPTH: the extra taps meet zero filter columns, the extra pixels' results are dropped.
    taps = kh * kw
    wide_taps = next(t for t in range(taps, taps + DEPTH + 1) if (c * t) % DEPTH == 0)
    wide_pixels = next(p for p in range(oh * ow, oh * ow + PIXELS + 1) if (n * p) % PIXELS == 0)
    # One gather from the image's own pixels by constant indices: tap (i, j) of output pixel
    # (r, q) reads pixel (i*d - top + r*s, j*d' - left + q*s'); the taps come before the pixels.
    # A tap in the padding (or an extra tap or pixel) reads pixel 0 and is masked to zero after:
    # the image is never copied into a padded one.
    rows = [[(i * dilations[0] - pads[0] + r * strides[0], j * dilations[1] - pads[1] + q * strides[1])
             for r in range(oh) for q in range(ow)] for i in range(kh) for j in range(kw)]
    inside = [[0 <= y < h and 0 <= x_ < width for y, x_ in row] + [False] * (wide_pixels - oh * ow) for row in rows]
    inside += [[False] * wide_pixels] * (wide_taps - taps)
    pixels = [[y * width + x_ if ok else 0 for (y, x_), ok in zip(row, keep)] + [0] * (wide_pixels - oh * ow)
              for row, keep in zip(rows, inside)]
    pixels += [[0] * wide_pixels] * (wide_taps - taps)
    flat = op("Reshape", [x, lit([n, c, h * width])], [n, c, h * width])
    gathered = op("Gather", [flat, int64_literal(pixels, ip, loc)], [n, c, wide_taps, wide_pixels], axis=si64(2))
    if not all(all(row) for row in inside):
        gathered = op("Where", [bool_literal(inside, ip, loc), gathered, zero_literal(element, ip, loc)],
                      [n, c, wide_taps, wide_pixels])
    k, columns = c * wide_taps, n * wide_pixels
    if n > 1:  # the images side by side: K = (channel, tap) on the rows, (image, pixel) the columns
        gathered = op("Transpose", [gathered], [c, wide_taps, n, wide_pixels], perm=si64_array([1, 2, 0, 3]))
    patches = op("Reshape", [gathered, lit([k, columns])], [k, columns])
    weight = op("Reshape", [w, lit([f, c, taps])], [f, c, taps])
    if wide_taps > taps:
        weight = op("Pad", [weight, lit([0, 0, 0, 0, 0, wide_taps - taps])], [f, c, wide_taps])
    y = op("MatMul", [op("Reshape", [weight, lit([f, k])], [f, k]), patches], [f, columns])
    if len(conv.operands) > 2:
        y = op("Add", [y, op("Reshape", [conv.operands[2], lit([f, 1])], [f, 1])], [f, columns])
    y = op("Reshape", [y, lit([f, n, wide_pixels])], [f, n, wide_pixels])
    if n > 1:  # back to the convolution's order, every image's channels
        y = op("Transpose", [y], [n, f, wide_pixels], perm=si64_array([1, 0, 2]))
    if wide_pixels > oh * ow:
        y = keep_leading(y, oh * ow, ip, loc)
    replace_op(conv, op("Reshape", [y, lit([n, f, oh, ow])], [n, f, oh, ow]))
    return f"{n}x{c}x{h}x{width} by {f}x{c}x{kh}x{kw}"
