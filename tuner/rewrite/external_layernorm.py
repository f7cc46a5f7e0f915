"""Layer normalizations as external kernels, in an ONNX model's import (tuner.external).

Each `onnx.LayerNormalization` over the last dim (f16, bf16 or f32, static shapes, a scale and
an optional bias of one value per channel, its normalized result its only output) becomes a call of a
function whose body is one `hal.dispatch.extern` of Triton's layer norm
(tuner.external.triton_layernorm), its PTX embedded in the program. Where its input is a
`Transpose(0, 2, 3, 1)` of an NCHW tensor (ConvNeXt's blocks and downsamplings, as torch exports
`x.permute(0, 2, 3, 1)` before nn.LayerNorm), the kernel reads the NCHW tensor itself and writes
the NHWC result: one pass where IREE 3.13 made a transpose and a reduction (ConvNeXt-T's
`reduction_8x3136x96` dispatches, 0.076-0.094 ms each on the H200, the largest after the
external kernels). One function per problem.

An experiment (tuner.rewrite.EXPERIMENTS): built and timed by name (benchmarks/export_vs_torch.py
--only ...+external-layer-norm), not offered by the flag stage until it has won on a GPU."""

from __future__ import annotations

import math
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.layernorm_kernel import LayerNormProblem, LayerNormTiles, layernorm_tiles_for
from tuner.rewrite.extern_call import Kernels, call_in_place
from tuner.rewrite.torch_ops import element_type, is_onnx, onnx_ints, onnx_sites, producer, static_shape

KernelSource = Callable[[LayerNormProblem, LayerNormTiles], ExternKernel]
ELEMENTS = ("f16", "bf16", "f32")
CHANNELS_LAST = [0, 2, 3, 1]


def _channels_first_source(x: ir.Value) -> Optional[ir.Value]:
    """The NCHW tensor `x` is the `Transpose(0, 2, 3, 1)` of, or None."""
    op = producer(x)
    if is_onnx(op, "Transpose") and onnx_ints(op, "perm", []) == CHANNELS_LAST \
            and len(static_shape(op.operands[0]) or []) == 4:
        return op.operands[0]
    return None


def problem_of(ln: ir.Operation) -> Optional[LayerNormProblem]:
    """The normalization `ln` computes, or None where the kernel does not take it."""
    if len(ln.results) != 1:  # its mean and inverse deviation asked for too
        return None
    x = ln.operands[0]
    shape, element = static_shape(x), element_type(x)
    if shape is None or len(shape) < 2 or element not in ELEMENTS:
        return None
    axis = ir.IntegerAttr(ln.attributes["torch.onnx.axis"]).value if "torch.onnx.axis" in ln.attributes else -1
    if axis not in (-1, len(shape) - 1) or any(static_shape(v) != [shape[-1]] for v in ln.operands[1:]):
        return None
    if {element_type(v) for v in ln.operands} != {element} or static_shape(ln.results[0]) != shape:
        return None
    eps = ir.FloatAttr(ln.attributes["torch.onnx.epsilon"]).value if "torch.onnx.epsilon" in ln.attributes else 1e-5
    source = _channels_first_source(x)
    pixels = shape[1] * shape[2] if source is not None else 0
    return LayerNormProblem(math.prod(shape[:-1]), shape[-1], eps, element, len(ln.operands) > 2, pixels)


def external_layernorms(module: ir.Module, source: Optional[KernelSource] = None,
                        transposed_only: bool = False) -> list[str]:
    """Rewrite every layer norm of `module` the kernel takes (in place, inside its context) as a
    call of it, the Transpose before it taken in where it is channels-last's; `source` makes the
    kernels (Triton's by default); `transposed_only`: only those whose input is that Transpose.
    Returns each rewritten one's problem and tiles, then each problem whose kernel could not be
    made (left as it was)."""
    if source is None:
        from tuner.external.triton_layernorm import triton_layernorm as source

    def taken(ln: ir.Operation) -> bool:
        problem = problem_of(ln)
        return problem is not None and (problem.channels_first or not transposed_only)

    kernels, done = Kernels(source), []
    for ln in onnx_sites(module, "LayerNormalization", taken, at_run_time=True):
        problem = problem_of(ln)
        x = _channels_first_source(ln.operands[0]) if problem.channels_first else ln.operands[0]
        transpose = producer(ln.operands[0]) if problem.channels_first else None
        kernel = call_in_place(module, ln, [], problem, layernorm_tiles_for(problem), kernels,
                               f"{problem.name.removeprefix('layernorm_')} left as it was", [x, *ln.operands[1:]])
        if kernel is None:
            continue
        if transpose is not None and not list(transpose.results[0].uses):
            transpose.erase()
        done.append(f"{problem.name.removeprefix('layernorm_')} ({kernel.label})")
    if not done:
        return []
    module.operation.verify()
    return done + kernels.failed
