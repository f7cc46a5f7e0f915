"""Convolutions as external implicit-GEMM kernels, in an ONNX model's import (tuner.external).

Each dense or grouped `onnx.Conv` (every group at least two channels: a depthwise one is
tuner.rewrite.external_depthwise's) of a static 4-d f16 or bf16 input becomes a call of a
function whose body is one `hal.dispatch.extern` of Triton's implicit-GEMM kernel
(tuner.external.triton_conv), its PTX embedded in the program, with the convolution's bias and
the activation after it (tuner.rewrite.activations.activation_of: Relu, Gelu, SiLU) computed by
the kernel:

    Relu(Conv(X, W, B))  ->  conv_bias_relu(X, Transpose(W, [0, 2, 3, 1]), B)

(the filter given tap-major where the kernel steps one tap's channels at a time,
tuner.external.conv_kernel.tap_major: a constant filter's transpose IREE folds at compile time).
There the image is given NHWC too, `Transpose(X, [0, 2, 3, 1])`, a dispatch of IREE's (or fused
into X's producer), so that the kernel loads a tap's channels as vectors, 16 bytes at a time. On
the H200, on the 3x3 convolutions of ResNet-50, DenseNet-121, VGG-16, an SD UNet and YOLOv8 (torch's
cuDNN on NCHW tensors 1.0x): the kernel alone 0.72-3.58x, with torch's transpose of X added
0.65-2.05x, where the NCHW form, one value a load, ran 0.19-1.07x; in the model, DenseNet-121
5.99 -> 3.88 ms and ResNet-50 (fed) 1.27 -> 1.12 ms (docs/benchmarks/external-kernels.md).
`channels_last=False` keeps the image NCHW (the experiment `external-hopper-conv-nchw`).

IREE 3.13 computes a GPU convolution as an implicit GEMM on mma.sync at best (ResNet-50's 3x3
convolutions at batch 8 ran 0.06-0.42 ms each on the H200), its strided 1x1 ones as a reduction
that took ResNet-50's default 270 ms of its 278, and NCHW f16 1x1 ones wrong. Written as patches
and a matrix product in the program instead (tuner.rewrite.conv_im2col, then the external GEMM),
the patches are a tensor of taps x the image written and read again: DenseNet-121's gathers took
longer than its GEMMs. This kernel gathers the patches as it goes and writes only Y.

Any kernel size, stride, dilation, group count and explicit padding (auto_pad NOTSET or VALID).
One function per problem, called by every convolution of that shape. The PTX names sm_90a, as
the other external kernels' do: the driver of any other GPU refuses it at load, and the flag
stage, which runs every variant, drops the rewrite there."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.conv_kernel import ConvProblem, conv_tiles_for, tap_major
from tuner.external.gemm_kernel import GemmTiles
from tuner.rewrite.extern_call import Kernels, call_in_place
from tuner.rewrite.activations import activation_of
from tuner.rewrite.torch_ops import conv2d, element_type, onnx_op, onnx_sites, producer, si64_array, static_shape

KernelSource = Callable[[ConvProblem, GemmTiles], ExternKernel]
ELEMENTS = ("f16", "bf16")


def problem_of(conv: ir.Operation) -> Optional[ConvProblem]:
    """The convolution `conv` computes (its bias in the epilogue; the activation after it is added
    by external_convs),
    or None where it is not one the kernel takes."""
    a = conv2d(conv)
    if a is None:
        return None
    n, c, h, w = a.x
    f, cg = a.weight[:2]
    element = element_type(conv.result)
    if (a.group < 1 or c % a.group or f % a.group or cg != c // a.group or cg < 2
            or a.auto_pad not in ("NOTSET", "VALID") or element not in ELEMENTS
            or {element_type(v) for v in conv.operands} != {element}):
        return None
    problem = ConvProblem(n, c, h, w, f, *a.weight[2:], tuple(a.strides), tuple(a.pads), tuple(a.dilations), a.group,
                          element, ("row_bias",) if len(conv.operands) > 2 else ())
    return problem if static_shape(conv.result) == [n, f, *problem.out] else None


def external_convs(module: ir.Module, source: Optional[KernelSource] = None, channels_last: bool = True,
                   tiles: Callable[[ConvProblem], GemmTiles] = conv_tiles_for) -> list[str]:
    """Rewrite every `onnx.Conv` of `module` the kernel takes (in place, inside its context) as a
    call of it, the activation after it too; `source` makes the kernels (Triton's by default);
    `channels_last`: the image given NHWC wherever the kernel steps one tap's channels (else NCHW);
    `tiles`: each problem's tiles (tuner.stages.kernel_tiles tries others in the model).
    Returns each rewritten convolution's problem and tiles, then each problem whose kernel could
    not be made (its convolutions left as they were; nothing where no kernel was)."""
    if source is None:
        from tuner.external.triton_conv import triton_conv as source
    kernels, done = Kernels(source), []
    for conv in onnx_sites(module, "Conv", problem_of, at_run_time=True):
        found = activation_of(conv.result)
        problem = problem_of(conv)
        after = found[1] if found else []
        if found:
            problem = replace(problem, epilogue=(*problem.epilogue, found[0]))
        chosen, operands = tiles(problem), list(conv.operands)
        if tap_major(problem, chosen):  # the filter tap-major, [F, KH, KW, CG]: a constant IREE folds
            operands[1] = _channels_last(operands[1], conv)
            if channels_last:
                operands[0] = _channels_last(operands[0], conv)
                problem = replace(problem, channels_last=True)
        kernel = call_in_place(module, conv, after, problem, chosen, kernels,
                               f"{problem.name.removeprefix('conv_')} left as it was", operands)
        if kernel is None:
            for made, given in zip(operands, conv.operands):
                if made != given:
                    producer(made).erase()
            continue
        done.append(f"{problem.name.removeprefix('conv_')} ({kernel.label})")
    if not done:
        return []
    module.operation.verify()
    return done + kernels.failed


def _channels_last(value: ir.Value, before: ir.Operation) -> ir.Value:
    """`Transpose(value, [0, 2, 3, 1])` of a 4-d value, made before `before`: NCHW to NHWC (an
    image) or OIHW to OHWI (a filter, tap-major)."""
    a, b, c, d = static_shape(value)
    return onnx_op("Transpose", [value], [a, c, d, b], element_type(value), ir.InsertionPoint(before), before.location,
                   perm=si64_array([0, 2, 3, 1]))
