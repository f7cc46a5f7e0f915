"""Strided 1x1 convolutions as a subsample and a plain 1x1 convolution, in an ONNX model's import.

A ResNet's projection shortcuts (torchvision's downsample: a 1x1 convolution with stride 2) reach
IREE 3.13 as a `linalg.generic` whose input map reads `(d2 * 2, d3 * 2)`: not a projected
permutation, so not a contraction to the compiler, which configures it as a reduction (one
output element per workgroup of 32 threads). On an H100 these three dispatches of ResNet-50 in
f16 at batch 8 took 110-137 ms each, 99% of the model (BENCHMARKS.md). Written as

    Conv(X, W, B, strides=s, 1x1, no padding)  ->  Conv(Slice(X, steps=s), W, B, strides=1)

the convolution is a 1x1 one with unit stride, which IREE turns into a matmul-like contraction
that its GPU pipelines configure with tensor cores, and the subsample is a strided copy. The
result is the same to the bit: a 1x1 convolution with stride s reads exactly the inputs at
multiples of s. Only convolutions with a 1x1 kernel, no padding, unit dilation and one group are
rewritten."""

from __future__ import annotations

import math

from iree.compiler import ir

from tuner.rewrite.torch_ops import group_count, element_type, int64_literal, int_list, onnx_op, rewrite_sites, si64_array, static_shape


def _strides(conv: ir.Operation) -> list[int] | None:
    """The strides of a convolution this rewrite takes (some above 1), else None."""
    attrs = {name: conv.attributes[name] for name in conv.attributes}
    weight = static_shape(conv.operands[1]) if len(conv.operands) > 1 else None
    x = static_shape(conv.operands[0])
    if weight is None or x is None or len(x) < 3 or any(k != 1 for k in weight[2:]):
        return None
    spatial = len(x) - 2
    strides = int_list(attrs["torch.onnx.strides"]) if "torch.onnx.strides" in attrs else [1] * spatial
    pads = int_list(attrs["torch.onnx.pads"]) if "torch.onnx.pads" in attrs else [0] * (2 * spatial)
    dilations = int_list(attrs["torch.onnx.dilations"]) if "torch.onnx.dilations" in attrs else [1] * spatial
    auto_pad = str(attrs["torch.onnx.auto_pad"]).strip('"') if "torch.onnx.auto_pad" in attrs else "NOTSET"
    if (len(strides) != spatial or any(pads) or any(d != 1 for d in dilations) or group_count(conv) != 1
            or auto_pad != "NOTSET" or all(s == 1 for s in strides)):
        return None
    return strides


def subsample_strided_pointwise_convs(module: ir.Module) -> list[str]:
    """Rewrite every strided 1x1 `onnx.Conv` of `module` in place (inside its context); returns
    each rewritten convolution's input shape and strides."""
    return rewrite_sites(module, "Conv", lambda op: _strides(op) is not None, _subsampled)


def _subsampled(conv: ir.Operation) -> str:
    strides = _strides(conv)
    ip, loc = ir.InsertionPoint(conv), conv.location
    x = conv.operands[0]
    dims = static_shape(x)
    spatial = list(range(2, len(dims)))
    sub = dims[:2] + [math.ceil(d / s) for d, s in zip(dims[2:], strides)]
    conv.operands[0] = onnx_op("Slice", [x, int64_literal([0] * len(spatial), ip, loc), int64_literal(dims[2:], ip, loc),
                                         int64_literal(spatial, ip, loc), int64_literal(strides, ip, loc)],
                               sub, element_type(x), ip, loc)
    conv.attributes["torch.onnx.strides"] = si64_array([1] * len(strides))
    return f"{'x'.join(map(str, dims))} stride {'x'.join(map(str, strides))}"
