"""Attention as an external Hopper kernel, in an ONNX model's import (tuner.external).

The spelled-out attentions are raised first (tuner.rewrite.attention, head dims padded to a
power of two as on GPUs), then every `torch.aten.scaled_dot_product_attention` of static f16
operands, no dropout, a constant scale (or none: 1/sqrt(d)) and no grouped-query flag becomes a
call of a function whose body is one `hal.dispatch.extern` of Triton's flash attention for
sm_90a (tuner.external.triton_attention), its PTX embedded in the program; one function per
problem. An additive mask is passed as it is (each leading dim 1 or the problem's), a causal
flag as the kernel's own masking. Where the kernel cannot be made, or does not take an attention
(another head width, a mask of another form), the raised op stays, which IREE's attention
pipeline compiles as after raise-attention. Where no attention became an external kernel the
rewrite says it changed nothing. On any GPU but a Hopper the driver refuses the PTX at load, and the flag stage,
which runs every variant, drops it."""

from __future__ import annotations

import math
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.attention_kernel import AttentionProblem, AttentionTiles, attention_tiles_for
from tuner.rewrite.attention import SDPA, raise_attention
from tuner.rewrite.extern_call import Kernels, call_extern, define_extern, onnx_meta, tensor_type
from tuner.rewrite.torch_ops import element_type, producer, replace_op, static_shape

KernelSource = Callable[[AttentionProblem, AttentionTiles], ExternKernel]


def _constant(value: ir.Value) -> object:
    """The value of a torch.constant.{float,bool,int} operand, None for torch.constant.none, or
    the string "?" where the operand is not a constant."""
    op = producer(value)
    if op is None or not op.name.startswith("torch.constant."):
        return "?"
    if op.name == "torch.constant.none":
        return None
    attr = op.attributes["value"]
    if op.name == "torch.constant.float":
        return ir.FloatAttr(attr).value
    if op.name == "torch.constant.bool":
        return ir.BoolAttr(attr).value
    return ir.IntegerAttr(attr).value


def problem_of(sdpa: ir.Operation) -> tuple[Optional[AttentionProblem], str]:
    """The attention the op computes, or None and why the kernel does not take it."""
    q, k, v, mask, dropout, causal, scale, gqa = sdpa.operands
    shapes = [static_shape(x) for x in (q, k, v)]
    if any(s is None or len(s) not in (3, 4) or len(s) != len(shapes[0]) for s in shapes):
        return None, "operands not of one static rank 3 or 4"
    (*lead, m, d), (*klead, n, dk), (*vlead, nv, dv) = shapes
    if lead != klead or lead != vlead or dk != d or nv != n:
        return None, "keys and values of other heads than the queries (grouped-query heads not repeated)"
    z, h = (1, lead[0]) if len(lead) == 1 else lead
    if _constant(dropout) not in (0.0, None) or _constant(gqa) not in (False, None):
        return None, "dropout or enable_gqa"
    causal_value, scale_value = _constant(causal), _constant(scale)
    if causal_value == "?" or scale_value == "?":
        return None, "a causal flag or scale that is not a constant"
    mask_dims, mask_element = None, "f16"
    if _constant(mask) is not None:
        dims = static_shape(mask)
        if dims is None or len(dims) != len(shapes[0]) or dims[-1] != n:
            return None, "a mask of another rank or key count"
        mask_dims = (1, *dims[:-1]) if len(dims) == 3 else tuple(dims[:-1])
        mask_element = element_type(mask)
    problem = AttentionProblem(z, h, m, n, d, dv, element_type(q), mask_dims, mask_element, bool(causal_value),
                               1.0 / math.sqrt(d) if scale_value is None else float(scale_value))
    why = problem.why_not()
    return (None, why) if why else (problem, "")


def external_attentions(module: ir.Module, source: Optional[KernelSource] = None) -> list[str]:
    """Raise the module's attentions, then rewrite every one the kernel takes as a call of it (in
    place, inside the module's context); `source` makes the kernels (Triton's by default).
    Returns each rewritten attention's problem and tiles, then each one left as the raised op and
    why; nothing where no attention became an external kernel (the module may be raised then:
    rewrite_program, which discards a module whose rewrite returns nothing, writes nothing)."""
    if source is None:
        from tuner.external.triton_attention import triton_attention as source
    raise_attention(module, pad_heads=True)
    sites: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == SDPA:
            sites.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    kernels, done, left = Kernels(source), [], []
    for op in sites:
        problem, why = problem_of(op)
        if problem is None:
            left.append(f"{'x'.join(map(str, static_shape(op.operands[0]) or ['?']))} left raised: {why}")
            continue
        kernel = kernels.get(problem, attention_tiles_for(problem),
                             lambda k, op=op, problem=problem: _define(module, k, problem, op),
                             f"{problem.name} left raised")
        if kernel is None:
            continue
        q, k, v, mask = op.operands[:4]
        out = op.results[0]
        replace_op(op, call_extern(problem.name, [q, k, v] + ([mask] if problem.mask else []), static_shape(out),
                                   element_type(out), ir.InsertionPoint(op), op.location))
        done.append(f"{problem.name.removeprefix('attention_')} ({kernel.label})")
    if not done:
        return []
    module.operation.verify()
    return done + left + kernels.failed


def _define(module: ir.Module, kernel: ExternKernel, problem: AttentionProblem, op: ir.Operation) -> None:
    q, k, v, mask = op.operands[:4]
    arguments = [tensor_type(static_shape(x), element_type(x)) for x in ([q, k, v] + ([mask] if problem.mask else []))]
    out = op.results[0]
    define_extern(module, kernel, arguments, tensor_type(static_shape(out), element_type(out)), onnx_meta(op))
