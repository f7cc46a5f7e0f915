"""Depthwise convolutions as external kernels, in an ONNX model's import (tuner.external).

Each `onnx.Conv` whose every filter reads one channel (`group` = input channels = filters, as
ConvNeXt's 7x7 and MobileNet's and EfficientNet's 3x3 and 5x5 convolutions are) of a static
4-d f16, bf16 or f32 input becomes a call of a function whose body is one `hal.dispatch.extern`
of Triton's depthwise kernel (tuner.external.triton_depthwise), its PTX embedded in the program,
the bias in the kernel:

    Conv(X[n, c, h, w], W[c, 1, kh, kw], B[c]) {group = c}  ->  depthwise(X, W, B)

and the activation after it too (tuner.rewrite.activations.activation_of: MobileNet's and
EfficientNet's SiLU, a Relu, a Gelu).

Any kernel size, stride, dilation and explicit padding (auto_pad NOTSET or VALID). One function
per problem, called by every convolution of that shape. The PTX names sm_90a, as the other
external kernels' do: the driver of any other GPU refuses it at load, and the flag stage, which
runs every variant, drops the rewrite there."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.depthwise_kernel import DepthwiseProblem, DepthwiseTiles, depthwise_tiles_for
from tuner.rewrite.activations import activation_of
from tuner.rewrite.extern_call import Kernels, call_in_place
from tuner.rewrite.torch_ops import conv2d, element_type, onnx_sites, static_shape

KernelSource = Callable[[DepthwiseProblem, DepthwiseTiles], ExternKernel]
ELEMENTS = ("f16", "bf16", "f32")


def problem_of(conv: ir.Operation) -> Optional[DepthwiseProblem]:
    """The depthwise convolution `conv` computes, or None where it is not one the kernel takes."""
    a = conv2d(conv)
    if a is None:
        return None
    n, c, h, w = a.x
    element = element_type(conv.result)
    if a.group != c or a.weight[:2] != [c, 1] or a.auto_pad not in ("NOTSET", "VALID") or element not in ELEMENTS:
        return None
    if {element_type(v) for v in conv.operands} != {element}:
        return None
    problem = DepthwiseProblem(n, c, h, w, *a.weight[2:], tuple(a.strides), tuple(a.pads), tuple(a.dilations),
                               element, len(conv.operands) > 2)
    return problem if static_shape(conv.result) == [n, c, *problem.out] else None


def external_depthwise_convs(module: ir.Module, source: Optional[KernelSource] = None) -> list[str]:
    """Rewrite every depthwise `onnx.Conv` of `module` the kernel takes (in place, inside its
    context) as a call of it; `source` makes the kernels (Triton's by default). Returns each
    rewritten convolution's problem and tiles, then each problem whose kernel could not be made
    (its convolutions left as they were; nothing where no kernel was)."""
    if source is None:
        from tuner.external.triton_depthwise import triton_depthwise as source
    kernels, done = Kernels(source), []
    for conv in onnx_sites(module, "Conv", problem_of, at_run_time=True):
        found = activation_of(conv.result)
        problem = replace(problem_of(conv), activation=found[0]) if found else problem_of(conv)
        after = found[1] if found else []
        kernel = call_in_place(module, conv, after, problem, depthwise_tiles_for(problem), kernels,
                               f"{problem.name.removeprefix('depthwise_')} left as it was")
        if kernel is None:
            continue
        done.append(f"{problem.name.removeprefix('depthwise_')} ({kernel.label})")
    if not done:
        return []
    module.operation.verify()
    return done + kernels.failed
