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
--only ...+external-layer-norm), not offered by the flag stage until it has won on a GPU.

transformers' RMSNorm (Llama's, Mistral's, Qwen2's) as torch exports it, spelled out in nine ops
(Cast to f32, Pow 2, ReduceMean over the last dim, Add eps, Sqrt, Reciprocal, Mul, Cast back,
Mul by the weight; Gemma's: the Mul by an f32 weight before the Cast back), becomes one call of
Triton's RMS norm (`external_rms_norms`): IREE made three
dispatches of it, the last reading the f32 copy it wrote (a Mistral-7B layer's
`elementwise_512x4096_f32xf32xf16`, 0.033 ms of 0.571 on the H200). An experiment too
(`external-rms-norm`)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.layernorm_kernel import LayerNormProblem, LayerNormTiles, RmsNormProblem, layernorm_tiles_for
from tuner.rewrite.constant_eval import evaluate, scalar_constant
from tuner.rewrite.extern_call import Kernels, call_in_place
from tuner.rewrite.torch_ops import (BF16, F16, F32, cast_of, element_type, is_onnx, onnx_ints, onnx_sites, producer,
                                     static_shape)

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
        done += _called(module, ln, problem, "layernorm_", [x, *ln.operands[1:]], [transpose] if transpose else [],
                        kernels)
    return _outcome(module, done, kernels)


def _called(module: ir.Module, op: ir.Operation, problem, prefix: str, operands: list[ir.Value],
            dead: list[ir.Operation], kernels: Kernels) -> list[str]:
    """`op` replaced by a call of the problem's kernel on `operands`, then each of `dead` (users
    first) erased once nothing reads it: the problem and tiles taken, or none where the kernel
    could not be made (`kernels.failed` says why)."""
    kernel = call_in_place(module, op, [], problem, layernorm_tiles_for(problem), kernels,
                           f"{problem.name.removeprefix(prefix)} left as it was", operands)
    if kernel is None:
        return []
    for gone in dead:
        if not any(list(r.uses) for r in gone.results):
            gone.erase()
    return [f"{problem.name.removeprefix(prefix)} ({kernel.label})"]


def _outcome(module: ir.Module, done: list[str], kernels: Kernels) -> list[str]:
    """What a rewrite says: nothing where nothing was taken, else each taken, then each failed."""
    if not done:
        return []
    module.operation.verify()
    return done + kernels.failed


def _other(op: ir.Operation, value: ir.Value) -> Optional[ir.Value]:
    """The other operand of a binary op one of whose operands is `value`."""
    a, b = op.operands
    return b if a == value else a if b == value else None


def rms_norm_of(mul: ir.Operation) -> Optional[tuple[RmsNormProblem, ir.Value, ir.Value, list[ir.Operation]]]:
    """Where `mul` is the weight's Mul that ends an exported RMSNorm: its problem, X (f16 or
    bf16), the weight, and the chain's other ops (each erased where the call leaves it unused)."""
    if len(mul.operands) != 2:
        return None
    for w, normed in (tuple(mul.operands), tuple(mul.operands)[::-1]):
        element = element_type(w)
        to = {"f16": F16, "bf16": BF16}.get(element)
        inner = cast_of(normed, to) if to is not None else None
        found = _normalized(producer(inner), element, w, mul.result) if inner is not None else None
        if found is not None:
            problem, x, ops = found
            return problem, x, w, [producer(normed), *ops]
    return None


def scaled_rms_norm_of(cast: ir.Operation) -> Optional[tuple[RmsNormProblem, ir.Value, ir.Value, list[ir.Operation]]]:
    """Where `cast` is the Cast back to f16 or bf16 that ends Gemma's RMSNorm (the normalized
    f32 value times an f32 weight, `1 + w` folded by the exporter, then the Cast): as rms_norm_of,
    the problem's weight f32 and taken before the rounding."""
    if not is_onnx(cast, "Cast") or "torch.onnx.to" not in cast.attributes:
        return None
    element = {F16: "f16", BF16: "bf16"}.get(ir.IntegerAttr(cast.attributes["torch.onnx.to"]).value)
    mul = producer(cast.operands[0])
    if element is None or not is_onnx(mul, "Mul") or len(mul.operands) != 2:
        return None
    for w, normed in (tuple(mul.operands), tuple(mul.operands)[::-1]):
        found = _normalized(producer(normed), element, w, cast.result) if element_type(w) == "f32" else None
        if found is not None:
            problem, x, ops = found
            return replace(problem, weight_f32=True), x, w, [mul, *ops]
    return None


def _normalized(scaled: Optional[ir.Operation], element: str, w: ir.Value, result: ir.Value
                ) -> Optional[tuple[RmsNormProblem, ir.Value, list[ir.Operation]]]:
    """Where `scaled` is Mul(Cast(X to f32), Reciprocal(Sqrt(mean(X^2) + eps))) of an X of
    `element` whose last dim the weight `w` and whose shape `result` have: the problem, X and
    those ops."""
    if not is_onnx(scaled, "Mul"):
        return None
    for x32, inverse in (tuple(scaled.operands), tuple(scaled.operands)[::-1]):
        x = cast_of(x32, F32)
        chain = _inverse_rms(inverse, x32)
        if x is None or chain is None or element_type(x) != element:
            continue
        shape, c = static_shape(x), static_shape(w)
        if shape is None or c is None or c != shape[-1:] or static_shape(result) != shape:
            continue
        eps, ops = chain
        return RmsNormProblem(math.prod(shape[:-1]), shape[-1], eps, element), x, [scaled, *ops, producer(x32)]
    return None


def _inverse_rms(value: ir.Value, x32: ir.Value) -> Optional[tuple[float, list[ir.Operation]]]:
    """eps and the ops of Reciprocal(Sqrt(Add(ReduceMean(Pow(x32, 2), last dim, kept), eps))), or None."""
    reciprocal = producer(value)
    sqrt = producer(reciprocal.operands[0]) if is_onnx(reciprocal, "Reciprocal") else None
    add = producer(sqrt.operands[0]) if is_onnx(sqrt, "Sqrt") else None
    if not is_onnx(add, "Add"):
        return None
    for mean_value, eps_value in (tuple(add.operands), tuple(add.operands)[::-1]):
        mean, eps = producer(mean_value), scalar_constant(eps_value)
        if eps is None or not is_onnx(mean, "ReduceMean") or len(mean.operands) != 2:
            continue
        rank = len(static_shape(x32) or [])
        axes = evaluate(mean.operands[1], depth=2)
        kept = "torch.onnx.keepdims" not in mean.attributes or ir.IntegerAttr(mean.attributes["torch.onnx.keepdims"]).value == 1
        if axes is None or [int(a) % rank for a in axes.reshape(-1)] != [rank - 1] or not kept:
            continue
        power = producer(mean.operands[0])
        if is_onnx(power, "Pow") and power.operands[0] == x32 and scalar_constant(power.operands[1]) == 2.0:
            return eps, [reciprocal, sqrt, add, mean, power]
    return None


def external_rms_norms(module: ir.Module, source: Optional[Callable[[RmsNormProblem, LayerNormTiles], ExternKernel]] = None
                       ) -> list[str]:
    """Rewrite every exported RMSNorm of `module` (in place, inside its context) as a call of
    Triton's RMS norm (`source` makes the kernels, Triton's by default): each rewritten one's
    problem and tiles, then each problem whose kernel could not be made (left as it was)."""
    if source is None:
        from tuner.external.triton_layernorm import triton_rmsnorm as source
    kernels, done = Kernels(source), []
    for kind, form in (("Mul", rms_norm_of), ("Cast", scaled_rms_norm_of)):
        for op in onnx_sites(module, kind, lambda op, form=form: form(op) is not None, at_run_time=True):
            problem, x, w, chain = form(op)
            done += _called(module, op, problem, "rmsnorm_", [x, w], chain, kernels)
    return _outcome(module, done, kernels)

