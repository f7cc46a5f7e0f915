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

from tuner.external.gemm_kernel import ExternKernel, GemmProblem, GemmTiles, tiles_for
from tuner.rewrite.torch_ops import element_type, int64_literal, onnx_op, onnx_sites, replace_op, static_shape

KernelSource = Callable[[GemmProblem, GemmTiles], ExternKernel]
ELEMENTS = ("f16", "bf16")
# The executable target the objects are given for: the CUDA backend's format, which every cuda
# target of the program matches (the driver, not IREE, compiles the PTX for the GPU at hand).
TARGET = '#hal.executable.target<"cuda", "cuda-nvptx-fb">'
LAYOUT = ("#hal.pipeline.layout<bindings = [#hal.pipeline.binding<storage_buffer, ReadOnly>, "
          "#hal.pipeline.binding<storage_buffer, ReadOnly>, #hal.pipeline.binding<storage_buffer>]>")


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
            _define(module, functions[problem], problem, _onnx_meta(op))
        if functions[problem] is None:
            continue
        _call(op, problem)
        done.append(f"{problem.m}x{problem.n}x{problem.k} {problem.element} ({functions[problem].tiles.label})")
    if not done:
        return []
    module.operation.verify()
    return done + failed


def _tensor(shape: list[int], element: str) -> ir.Type:
    return ir.Type.parse(f"tensor<{'x'.join(map(str, shape))}x{element}>")


def _onnx_meta(op: ir.Operation) -> dict[str, ir.Attribute]:
    """The `torch.onnx_meta.*` attributes of the function holding `op` (the ONNX input conversion
    requires an opset version on every function)."""
    func = op.parent
    while func.name != "func.func":
        func = func.parent
    return {name: func.attributes[name] for name in func.attributes if name.startswith("torch.onnx_meta.")}


def _define(module: ir.Module, kernel: ExternKernel, problem: GemmProblem, meta: dict[str, ir.Attribute]) -> None:
    """`func.func private @NAME(A, B) -> C` whose body is the kernel's `hal.dispatch.extern`."""
    a, b, c = ([problem.m, problem.k], [problem.k, problem.n], [problem.m, problem.n])
    types = [_tensor(s, problem.element) for s in (a, b, c)]
    index = ir.IndexType.get()
    ptx = kernel.ptx.encode()
    obj = ir.Attribute.parse(f'#hal.executable.object<{{path = "{kernel.name}.ptx", data = dense<"0x{ptx.hex().upper()}"> : vector<{len(ptx)}xi8>}}>')
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown():
        function_type = ir.FunctionType.get(types[:2], types[2:])
        func = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(kernel.name), "sym_visibility": ir.StringAttr.get("private"),
            "function_type": ir.TypeAttr.get(function_type), **meta})
        body = func.regions[0].blocks.append(*types[:2])
        with ir.InsertionPoint(body):
            extern = ir.Operation.create("hal.dispatch.extern", results=types[2:], operands=list(body.arguments), regions=2,
                                         attributes={
                "export_name": ir.StringAttr.get(kernel.name), "layout": ir.Attribute.parse(LAYOUT),
                "operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 2, 0, 0]),
                "targets": ir.ArrayAttr.get([ir.Attribute.parse(TARGET)]),
                "target_ordinals": ir.ArrayAttr.get([ir.IntegerAttr.get(index, 0)]),
                "target_objects": ir.ArrayAttr.get([ir.ArrayAttr.get([obj])]),
                "tied_operands": ir.ArrayAttr.get([ir.IntegerAttr.get(index, -1)]),
                "workgroup_size": ir.ArrayAttr.get([ir.IntegerAttr.get(index, v) for v in (kernel.threads, 1, 1)]),
                "workgroup_local_memory": ir.IntegerAttr.get(index, kernel.shared_bytes)})
            count = extern.regions[0].blocks.append(ir.Type.parse("!hal.device"))
            with ir.InsertionPoint(count):
                grid = [ir.Operation.create("arith.constant", results=[index],
                                            attributes={"value": ir.IntegerAttr.get(index, g)}).result for g in kernel.grid]
                ir.Operation.create("hal.return", operands=grid)
            ir.Operation.create("func.return", operands=list(extern.results))


def _call(matmul: ir.Operation, problem: GemmProblem) -> None:
    ip, loc = ir.InsertionPoint(matmul), matmul.location
    x, w = matmul.operands
    lead, element = static_shape(x)[:-1], problem.element
    if len(lead) > 1:
        x = onnx_op("Reshape", [x, int64_literal([problem.m, problem.k], ip, loc)], [problem.m, problem.k], element, ip, loc)

    def builtin(value: ir.Value, shape: list[int]) -> ir.Value:
        return ir.Operation.create("torch_c.to_builtin_tensor", results=[_tensor(shape, element)], operands=[value],
                                   loc=loc, ip=ip).result

    product = ir.Operation.create("func.call", results=[_tensor([problem.m, problem.n], element)], loc=loc, ip=ip,
                                  operands=[builtin(x, [problem.m, problem.k]), builtin(w, [problem.k, problem.n])],
                                  attributes={"callee": ir.FlatSymbolRefAttr.get(problem.name)}).result
    y = ir.Operation.create("torch_c.from_builtin_tensor", operands=[product], loc=loc, ip=ip,
                            results=[ir.Type.parse(f"!torch.vtensor<[{problem.m},{problem.n}],{element}>")]).result
    if len(lead) > 1:
        y = onnx_op("Reshape", [y, int64_literal([*lead, problem.n], ip, loc)], [*lead, problem.n], element, ip, loc)
    replace_op(matmul, y)
