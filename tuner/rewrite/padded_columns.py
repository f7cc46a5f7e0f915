"""Convolutions whose output rows no MMA tile divides, computed on rows padded in the program, in
an ONNX model's import.

IREE 3.13's implicit GEMM on GPUs takes a convolution's output columns as a side of the MMA tile
(channels last: M, whose tiles are multiples of 16 on cuda). A row of 14 or 7 columns (ResNet's
last two stages) is padded to 16 by the config (`padding`, `padding_conv`), and then every
element of the gathered operand is loaded alone: 64 `ld.global.nc.b16` per K step in the PTX of
ResNet-50's 14x14 3x3 convolution, where an unpadded one loads `ld.global.nc.v4.b32` (16 bytes).
On the H100 such convolutions ran at 6-10 TFLOP/s (BENCHMARKS.md). Written as

    Conv(X, W, B, pads=[t, l, b, r])  ->  Slice(Conv(X, W, B, pads=[t, l, b, r + e * stride]), [0:OW] on axis 3)

the convolution computes e more columns per row (OW + e a multiple of MULTIPLE), which the
compiler tiles without padding, and the slice drops them. The result is the same to the bit:
the extra columns read only the added zero padding and are never kept. Taken: 2-D NCHW
convolutions with static shapes whose output width is not a multiple of MULTIPLE, with explicit
pads (or none)."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import (ONNX_OP, element_type, int_list, is_onnx, keep_leading, replace_op,
                                     rewrite_sites, si64_array, static_shape)

MULTIPLE = 16  # the largest MMA tile side along the output columns among the GPU targets' intrinsics


def _extra(conv: ir.Operation) -> int:
    """The columns a convolution this rewrite takes gets added per output row, else 0."""
    attrs = {name: conv.attributes[name] for name in conv.attributes}
    x, y = static_shape(conv.operands[0]), static_shape(conv.result)
    weight = static_shape(conv.operands[1]) if len(conv.operands) > 1 else None
    auto_pad = str(attrs["torch.onnx.auto_pad"]).strip('"') if "torch.onnx.auto_pad" in attrs else "NOTSET"
    strides = int_list(attrs["torch.onnx.strides"]) if "torch.onnx.strides" in attrs else [1, 1]
    if (x is None or y is None or weight is None or len(x) != 4 or len(y) != 4 or auto_pad != "NOTSET"
            or weight[2:] == [1, 1] or strides != [1, 1]):
        return 0
    return -y[3] % MULTIPLE


def _column_wise(op: ir.Operation, value: ir.Value) -> bool:
    """Whether `op` computes each output column from the same column of `value` alone (so it may
    run on the widened rows): a Relu, or a 1x1 convolution of it with unit stride, no padding."""
    if is_onnx(op, "Relu"):
        return True
    if not is_onnx(op, "Conv") or op.operands[0] != value:
        return False
    attrs = {name: op.attributes[name] for name in op.attributes}
    weight = static_shape(op.operands[1]) if len(op.operands) > 1 else None
    return (weight is not None and weight[2:] == [1, 1]
            and (int_list(attrs["torch.onnx.strides"]) if "torch.onnx.strides" in attrs else [1, 1]) == [1, 1]
            and not any(int_list(attrs["torch.onnx.pads"]) if "torch.onnx.pads" in attrs else [0])
            and "torch.onnx.auto_pad" not in attrs)


def _widen_consumers(value: ir.Value, width: int) -> ir.Value:
    """Run the chain of column-wise ops that alone consume `value` (a widened result) on the
    widened rows too, and return the last widened value: the slice goes after it, so that no
    consumer reads the narrow rows out of the wide ones (such a consumer, the 1x1 convolution
    after a ResNet 3x3 one, ran 2.3x slower on the H100)."""
    while True:
        uses = list(value.uses)
        if len(uses) != 1 or not _column_wise(uses[0].owner, value):
            return value
        result = uses[0].owner.results[0]
        shape = static_shape(result)
        result.set_type(ir.Type.parse(f"!torch.vtensor<[{','.join(map(str, shape[:3] + [width]))}],"
                                      f"{element_type(result)}>"))
        value = result


def pad_convolution_columns(module: ir.Module) -> list[str]:
    """Rewrite every `onnx.Conv` of `module` this rewrite takes in place (inside its context);
    returns each one's output shape and the columns it computes."""
    return rewrite_sites(module, "Conv", _extra, _widened)


def _widened(conv: ir.Operation) -> str:
    extra = _extra(conv)
    ip, loc = ir.InsertionPoint(conv), conv.location
    attrs = {name: conv.attributes[name] for name in conv.attributes}
    strides = int_list(attrs["torch.onnx.strides"]) if "torch.onnx.strides" in attrs else [1, 1]
    top, left, bottom, right = int_list(attrs["torch.onnx.pads"]) if "torch.onnx.pads" in attrs else [0, 0, 0, 0]
    attrs["torch.onnx.pads"] = si64_array([top, left, bottom, right + extra * strides[1]])
    n, o, oh, ow = static_shape(conv.result)
    element = element_type(conv.result)
    wide = ir.Operation.create(ONNX_OP, results=[ir.Type.parse(f"!torch.vtensor<[{n},{o},{oh},{ow + extra}],{element}>")],
                               operands=list(conv.operands), attributes=attrs, loc=loc, ip=ip).result
    replace_op(conv, wide)
    last = _widen_consumers(wide, ow + extra)
    kept = keep_leading(last, ow, ir.InsertionPoint.after(last.owner), loc)
    last.replace_all_uses_except(kept, kept.owner.operation)
    return f"{n}x{o}x{oh}x{ow} computed {ow + extra} wide"
