"""Reductions over the middle axes of a channels-last tensor as external kernels, in an ONNX model's
import (tuner.external.reduction_kernel).

An `onnx.ReduceL2`, `ReduceSumSquare`, `ReduceMean` or `ReduceSum` of a static [B, H, W, C] (any
rank from 3) over every axis between the first and the last (kept or not) becomes a call of a
function whose body is one `hal.dispatch.extern` of Triton's reduction
(tuner.external.triton_reduction), its PTX embedded: ConvNeXt-V2's GRN, `torch.linalg.vector_norm`
over an NHWC image's pixels. Where `f32-reductions` ran first (its `Cast(Reduce(Cast(X, f32)),
f16)`), both Casts are taken in: the kernel reads X's f16, sums in f32 and writes f16, as the
chain rounds. One function per problem.

An experiment (tuner.rewrite.EXPERIMENTS): built and timed by name (`ONLY_convnextv2=...` or
EXTRA in benchmarks/gpu_external_check.sh), not offered by the flag stage until it has won on a GPU."""

from __future__ import annotations

from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.reduction_kernel import KINDS, SpatialReduceProblem, SpatialReduceTiles, spatial_reduce_tiles_for
from tuner.rewrite.constant_eval import evaluate
from tuner.rewrite.extern_call import Kernels, call_in_place
from tuner.rewrite.torch_ops import BF16, F16, F32, cast_of, element_type, is_onnx, onnx_sites, producer, static_shape

KernelSource = Callable[[SpatialReduceProblem, SpatialReduceTiles], ExternKernel]
ELEMENTS = {"f16": F16, "bf16": BF16, "f32": F32}


def _middle_axes(reduce: ir.Operation, rank: int) -> bool:
    """Whether `reduce` reduces exactly the axes 1 .. rank - 2 (its axes a constant operand, or
    the attribute of opsets before 18)."""
    if len(reduce.operands) > 1:
        axes = evaluate(reduce.operands[1], depth=2)
        found = None if axes is None else sorted(int(a) % rank for a in axes.reshape(-1))
    elif "torch.onnx.axes" in reduce.attributes:
        found = sorted(ir.IntegerAttr(a).value % rank for a in ir.ArrayAttr(reduce.attributes["torch.onnx.axes"]))
    else:
        found = None  # every axis
    return found == list(range(1, rank - 1))


def reduction_of(reduce: ir.Operation) -> Optional[tuple[SpatialReduceProblem, ir.Value, list[ir.Operation]]]:
    """The problem `reduce` computes, the X the kernel reads and the ops after `reduce` it takes
    in (the Cast back of f32-reductions' form), or None where the kernel does not take it."""
    kind = next((k for name, k in KINDS.items() if is_onnx(reduce, name)), None)
    if kind is None or len(reduce.results) != 1 or "torch.onnx.noop_with_empty_axes" in reduce.attributes and \
            ir.IntegerAttr(reduce.attributes["torch.onnx.noop_with_empty_axes"]).value == 1:
        return None
    x = reduce.operands[0]
    shape = static_shape(x)
    if shape is None or len(shape) < 3 or not _middle_axes(reduce, len(shape)):
        return None
    element, after = element_type(x), []
    if element == "f32":  # f32-reductions' form: X cast up before, the result cast back after it
        uses = list(reduce.result.uses)
        back = uses[0].owner if len(uses) == 1 else None
        for name, to in ELEMENTS.items():
            source = cast_of(x, F32)
            if source is not None and element_type(source) == name and name != "f32" and back is not None \
                    and cast_of(back.result, to) is not None and is_onnx(back, "Cast"):
                x, element, after = source, name, [back]
                break
    if element not in ELEMENTS or static_shape(reduce.result) is None:
        return None
    pixels = 1
    for size in shape[1:-1]:
        pixels *= size
    return SpatialReduceProblem(shape[0], pixels, shape[-1], kind, element), x, after


def external_spatial_reductions(module: ir.Module, source: Optional[KernelSource] = None) -> list[str]:
    """Rewrite every reduction over the middle axes of `module` the kernel takes (in place,
    inside its context) as a call of it; `source` makes the kernels (Triton's by default).
    Returns each rewritten one's problem and tiles, then each problem whose kernel could not be
    made (left as it was)."""
    if source is None:
        from tuner.external.triton_reduction import triton_spatial_reduce as source
    kernels, done = Kernels(source), []
    for kind in KINDS:
        for reduce in onnx_sites(module, kind, lambda op: reduction_of(op) is not None, at_run_time=True):
            problem, x, after = reduction_of(reduce)
            cast = producer(reduce.operands[0]) if after else None
            tiles = spatial_reduce_tiles_for(problem)
            kernel = call_in_place(module, reduce, after, problem, tiles, kernels,
                                   f"{problem.name} left as it was", [x])
            if kernel is None:
                continue
            if cast is not None and not list(cast.result.uses):
                cast.erase()
            done.append(f"{problem.name.removeprefix('reduce_')} ({kernel.label})")
    if done:
        module.operation.verify()
    return done + (kernels.failed if done else [])
