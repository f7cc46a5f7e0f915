"""Linear layers as external Hopper kernels, in an ONNX model's import (tuner.external).

Each linear `onnx.MatMul` of an f16 (or bf16) activation by a rank-2 weight becomes a call of a
function whose body is one `hal.dispatch.extern` of a kernel made outside IREE's codegen (Triton's
wgmma kernel for sm_90a, tuner.external.triton_gemm), its PTX embedded in the program:

    MatMul(X[d0, ..., K], W[K, N])  ->  Reshape(gemm(Reshape(X, [rows, K]), W), [d0, ..., N])

One function per problem (rows x N x K), called by every layer of that shape. The kernel sums
in f32 and rounds once to the element type, as IREE's matmul and its narrowing do; what follows
the MatMul (a bias Add, a GELU) stays in the program, an elementwise dispatch of its own (IREE
cannot fuse into an external kernel). The PTX names its target, sm_90a: the driver of any other
GPU refuses it at load, and the flag stage, which builds and runs every variant, drops it there.
Only static shapes whose N and K the kernel's tiles divide are taken (tuner.external.gemm_kernel)."""

from __future__ import annotations

import math
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.gemm_kernel import GemmProblem, GemmTiles, tiles_for
from tuner.rewrite.extern_call import call_extern, define_extern, onnx_meta, tensor_type
from tuner.rewrite.torch_ops import element_type, int64_literal, onnx_op, onnx_sites, replace_op, static_shape

KernelSource = Callable[[GemmProblem, GemmTiles], ExternKernel]
ELEMENTS = ("f16", "bf16")


def problem_of(matmul: ir.Operation) -> Optional[GemmProblem]:
    """The matrix product a linear MatMul computes (its activation's leading dims as rows), or
    None where it is not one an external kernel takes."""
    x, w = (static_shape(v) for v in matmul.operands)
    element = element_type(matmul.result)
    if x is None or w is None or len(w) != 2 or len(x) < 2 or x[-1] != w[0] or element not in ELEMENTS:
        return None
    if {element_type(v) for v in matmul.operands} != {element}:
        return None
    return GemmProblem(math.prod(x[:-1]), w[1], w[0], element)


def external_gemms(module: ir.Module, source: Optional[KernelSource] = None) -> list[str]:
    """Rewrite every linear `onnx.MatMul` of `module` that an external kernel takes (in place,
    inside its context) as a call of that kernel; `source` makes the kernels (Triton's by
    default). Returns each rewritten MatMul's problem and tiles, then each problem whose kernel
    could not be made (its layers left as they were; nothing is rewritten where no kernel was)."""
    if source is None:
        from tuner.external.triton_gemm import triton_gemm as source
    sites = [(op, p) for op in onnx_sites(module, "MatMul", problem_of) if (p := problem_of(op)) and tiles_for(p)]
    functions: dict[GemmProblem, Optional[ExternKernel]] = {}
    done, failed = [], []
    for op, problem in sites:
        if problem not in functions:
            try:
                functions[problem] = source(problem, tiles_for(problem))
            except Exception as error:  # a kernel that cannot be made leaves its layers as they were
                functions[problem] = None
                failed.append(f"{problem.m}x{problem.n}x{problem.k} {problem.element} left as it was: "
                              f"{str(error).splitlines()[0] if str(error) else type(error).__name__}")
                continue
            define_extern(module, functions[problem], [tensor_type([problem.m, problem.k], problem.element),
                                                       tensor_type([problem.k, problem.n], problem.element)],
                          tensor_type([problem.m, problem.n], problem.element), onnx_meta(op))
        if functions[problem] is None:
            continue
        _call(op, problem)
        done.append(f"{problem.m}x{problem.n}x{problem.k} {problem.element} ({functions[problem].label})")
    if not done:
        return []
    module.operation.verify()
    return done + failed


def _call(matmul: ir.Operation, problem: GemmProblem) -> None:
    ip, loc = ir.InsertionPoint(matmul), matmul.location
    x, w = matmul.operands
    lead, element = static_shape(x)[:-1], problem.element
    if len(lead) > 1:
        x = onnx_op("Reshape", [x, int64_literal([problem.m, problem.k], ip, loc)], [problem.m, problem.k], element, ip, loc)
    y = call_extern(problem.name, [x, w], ir.Type.parse(f"!torch.vtensor<[{problem.m},{problem.n}],{element}>"), ip, loc)
    if len(lead) > 1:
        y = onnx_op("Reshape", [y, int64_literal([*lead, problem.n], ip, loc)], [*lead, problem.n], element, ip, loc)
    replace_op(matmul, y)
