"""Linear layers as external Hopper kernels, in an ONNX model's import (tuner.external).

Each linear `onnx.MatMul` of an f16 (or bf16) activation by a rank-2 weight becomes a call of a
function whose body is one `hal.dispatch.extern` of a kernel made outside IREE's codegen (Triton's
wgmma kernel for sm_90a, tuner.external.triton_gemm), its PTX embedded in the program, and with it
a bias of one value per column and a Gelu or Relu after it (epilogue_of), computed by the kernel
on its f32 sums before it rounds once to the element type (IREE cannot fuse into an external
kernel; elsewhere they would be a dispatch of their own):

    Gelu(Add(MatMul(X, W), B))  ->  Reshape(gemm_bias_gelu(Reshape(X, [rows, K]), W, B), [d0, ..., N])

An `onnx.Gemm` that is a linear layer (torch's addmm and a 2-D nn.Linear as the exporter writes
them: GPT-2's Conv1D, classifier heads; `gemm_form`) is taken the same way, its C the kernel's
bias, its B transposed first where the Gemm reads it transposed (a constant: IREE folds the
transpose into the module's initializer).

A 1x1 convolution (f16 or bf16, channels a multiple of 16) is first written as
pointwise-conv-as-matmul writes it, `MatMul(W[O, C], X[N, C, P])` (or, the images side by side, a
2-D `MatMul(W[O, C], X'[C, N*P])`): a 2-D filter by a batch is one call of the kernel with the
images on its grid, and the convolution's bias, `Add(., B[O, 1])`, is in its epilogue (one value
per row) in either form. A 1-D convolution (Whisper's, wav2vec2's; K = channels x taps a
multiple of 16) is first written as the filter by its gathered taps (tuner.rewrite.conv1d), then
taken the same way, a GELU after it in the epilogue too.

One function per problem (rows x N x K and epilogue), called by every layer of that shape.
`fuse=False` leaves the epilogue in the program (benchmarks/gpu_external_gemm.py times both).
 The PTX names its target, sm_90a: the driver of any other
GPU refuses it at load, and the flag stage, which builds and runs every variant, drops it there.
Only static shapes are taken (the last column tile masked where no tile divides N, the last K
step where no K step divides K; tuner.external.gemm_kernel)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Optional

from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.gemm_kernel import GemmProblem, GemmTiles, tiles_for
from tuner.rewrite.extern_call import Kernels, call_extern, define_extern, onnx_meta, replace_chain, tensor_type
from tuner.rewrite.activations import activation_of
from tuner.rewrite.conv1d import conv1ds_as_matmuls
from tuner.rewrite.pointwise_conv import pointwise_convs_as_matmuls
from tuner.rewrite.torch_ops import (element_type, int64_literal, is_onnx, only_user, onnx_op, onnx_sites, si64_array,
                                     static_shape)

KernelSource = Callable[[GemmProblem, GemmTiles], ExternKernel]
ELEMENTS = ("f16", "bf16")


def problem_of(matmul: ir.Operation) -> Optional[GemmProblem]:
    """The matrix product a linear MatMul (or Gemm, `gemm_form`) computes (its activation's
    leading dims as rows), or None where it is not one an external kernel takes."""
    if is_onnx(matmul, "Gemm"):
        form = gemm_form(matmul)
        if form is None:
            return None
        x, w = static_shape(matmul.operands[0]), static_shape(matmul.operands[1])
        w = w[::-1] if form[0] else w
    else:
        x, w = (static_shape(v) for v in matmul.operands)
    element = element_type(matmul.result)
    if {element_type(v) for v in matmul.operands} != {element} or element not in ELEMENTS or x is None or w is None:
        return None
    if len(x) == 2 and len(w) == 3 and x[1] == w[1] and not is_onnx(matmul, "Gemm"):
        # A 2-D filter by a batch (pointwise-conv-as-matmul's W[O, C] by each image's X[C, P])
        return GemmProblem(x[0], w[2], x[1], element, batch=w[0])
    if len(w) != 2 or len(x) < 2 or x[-1] != w[0]:
        return None
    return GemmProblem(math.prod(x[:-1]), w[1], w[0], element)


def gemm_form(gemm: ir.Operation) -> Optional[tuple[bool, Optional[ir.Value]]]:
    """An `onnx.Gemm` as a linear layer (torch's addmm and 2-D nn.Linear as the exporter writes
    them: GPT-2's Conv1D, classifier heads): (whether B is given transposed, the bias C or None)
    where A is not transposed, alpha and beta are 1 and C has one value per column; else None."""
    def attribute(name: str, default: float) -> float:
        attr = gemm.attributes[f"torch.onnx.{name}"] if f"torch.onnx.{name}" in gemm.attributes else None
        if attr is None:
            return default
        try:
            return ir.FloatAttr(attr).value
        except ValueError:  # transA, transB: integers
            return ir.IntegerAttr(attr).value

    if attribute("transA", 0) != 0 or attribute("alpha", 1.0) != 1.0 or attribute("beta", 1.0) != 1.0:
        return None
    trans_b = attribute("transB", 0) != 0
    shapes = [static_shape(v) for v in gemm.operands]
    if any(s is None or len(s) != 2 for s in shapes[:2]):
        return None
    bias = gemm.operands[2] if len(gemm.operands) > 2 else None
    n = shapes[1][0 if trans_b else 1]
    if bias is not None and (len(shapes[2]) not in (1, 2) or shapes[2][-1] != n or math.prod(shapes[2]) != n):
        return None
    return trans_b, bias


def epilogue_of(matmul: ir.Operation) -> tuple[list[ir.Operation], tuple[str, ...], Optional[ir.Value]]:
    """What after a linear MatMul the kernel can compute before it rounds: an `onnx.Add` of a
    bias of one value per column (the MatMul's only use), or per row where the product is 2-D or
    a filter by a batch (a convolution's bias, [O, 1]), then the activation after it
    (tuner.rewrite.activations.activation_of: Relu, Gelu in either form, SiLU; after a Reshape of
    the product too, as GPT-2's gelu_new follows its Gemm). Returns those ops, their
    EPILOGUE_STEPS and the bias (or None). After a Gemm with a C, the activation only (its bias
    is its C); after one without, as a MatMul (GPT-2's Conv1D as torch 2.13 exports it: Gemm,
    then Add of the bias)."""
    ops, steps, bias = [], [], None
    y, element = matmul.result, element_type(matmul.result)
    n, user = static_shape(y)[-1], only_user(matmul.result)
    problem = problem_of(matmul)
    own_bias = is_onnx(matmul, "Gemm") and gemm_form(matmul)[1] is not None  # its C: no other bias
    if not own_bias and is_onnx(user, "Add") and len(user.operands) == 2 and static_shape(user.result) == static_shape(y):
        other = user.operands[1] if user.operands[0] == y else user.operands[0]
        shape = static_shape(other) if element_type(other) == element else None
        batched = _filter_by_batch(matmul)
        by_rows = problem is not None and (batched or len(static_shape(y)) == 2)
        if shape and not batched and shape[-1] == n and all(d == 1 for d in shape[:-1]):
            ops, steps, bias, y = [user], ["bias"], other, user.result
        elif shape and by_rows and shape[-2:] == [problem.m, 1] and math.prod(shape) == problem.m:
            ops, steps, bias, y = [user], ["row_bias"], other, user.result
    found = activation_of(y, through_reshape=True)
    if found is not None:
        steps.append(found[0])
        ops.extend(found[1])
    return ops, tuple(steps), bias


def external_gemms(module: ir.Module, source: Optional[KernelSource] = None, fuse: bool = True,
                   tiles: Callable[[GemmProblem], GemmTiles] = tiles_for) -> list[str]:
    """Rewrite every linear `onnx.MatMul` of `module` that an external kernel takes (in place,
    inside its context) as a call of that kernel; `source` makes the kernels (Triton's by
    default); `fuse`: the bias and activation after it (epilogue_of) computed by the kernel too
    (else left in the program); `tiles`: each problem's tiles (tuner.stages.kernel_tiles tries
    others in the model). Returns each rewritten MatMul's problem and tiles, then each problem whose kernel could not
    be made (its layers left as they were; nothing is rewritten where no kernel was)."""
    if source is None:
        from tuner.external.triton_gemm import triton_gemm as source
    # 1x1 convolutions the kernel takes, as matrix products first (pointwise-conv-as-matmul's
    # exact form, which IREE also computes right on CUDA where it computes NCHW 1x1 f16 ones wrong)
    pointwise_convs_as_matmuls(module, only=lambda conv: element_type(conv.result) in ELEMENTS
                               and static_shape(conv.operands[0])[1] % 16 == 0, side_by_side=narrow_images)
    # and 1-D convolutions (Whisper's, wav2vec2's) as the filter by their gathered taps
    conv1ds_as_matmuls(module, only=lambda conv: element_type(conv.result) in ELEMENTS
                       and math.prod(static_shape(conv.operands[1])[1:]) % 16 == 0)
    sites = []
    for op in [*onnx_sites(module, "MatMul", problem_of, at_run_time=True),
               *onnx_sites(module, "Gemm", problem_of, at_run_time=True)]:
        problem = problem_of(op)
        if problem is None:
            continue
        after, steps, bias = epilogue_of(op) if fuse else ([], (), None)
        own = gemm_form(op)[1] if is_onnx(op, "Gemm") else None
        if own is not None:  # a Gemm's C: its bias, fused or not
            steps, bias = ("bias", *steps), own
        sites.append((op, replace(problem, epilogue=steps), after, bias))
    kernels, done = Kernels(source), []
    for op, problem, after, bias in sites:
        batch = [problem.batch] if problem.batch > 1 else []
        arguments = [tensor_type([problem.m, problem.k], problem.element),
                     tensor_type([*batch, problem.k, problem.n], problem.element)]
        arguments += [tensor_type([_bias_width(problem)], problem.element)] if bias else []
        kernel = kernels.get(problem, tiles(problem), lambda k, op=op, arguments=arguments, batch=batch: define_extern(
            module, k, arguments, tensor_type([*batch, problem.m, problem.n], problem.element), onnx_meta(op)),
            f"{problem.label} left as it was")
        if kernel is None:
            continue
        _call(op, problem, after, bias)
        done.append(f"{problem.label} ({kernel.label})")
    if not done:
        return []
    module.operation.verify()
    return done + kernels.failed


def narrow_images(images: int, channels: int, outputs: int, pixels: int) -> bool:
    """Whether a 1x1 convolution's images go side by side for the kernel: only where an image
    has fewer pixels than the narrowest column tile (32; a squeeze-excitation's one pixel).
    The batched kernel shares the filter on its grid (no copy of it, as IREE's batch matmul
    makes), so the two transposes side by side costs buy nothing wider images need
    (EfficientNet-B0's 7x7 stage on the H200: `elementwise_transpose_8x1152x49` 0.04 ms, twice
    a convolution). Chosen by that reasoning, not yet measured against the old rule."""
    return images > 1 and pixels < 32


def _filter_by_batch(matmul: ir.Operation) -> bool:
    """Whether the product is a 2-D filter by a batch of images (A shared, B and C batched)."""
    shapes = [static_shape(v) for v in matmul.operands[:2]]
    return is_onnx(matmul, "MatMul") and None not in shapes and [len(s) for s in shapes] == [2, 3]


def _bias_width(problem: GemmProblem) -> int:
    """How many values the problem's bias has: one per row or one per column."""
    return problem.m if problem.epilogue[:1] == ("row_bias",) else problem.n


def _call(matmul: ir.Operation, problem: GemmProblem, after: list[ir.Operation], bias: Optional[ir.Value]) -> None:
    """The MatMul and the ops `after` it (its epilogue, taken into the kernel) replaced by a call."""
    last = after[-1] if after else matmul
    ip, loc = ir.InsertionPoint(last), matmul.location
    x, w = matmul.operands[:2]
    lead, element = static_shape(x)[:-1], problem.element
    if is_onnx(matmul, "Gemm") and gemm_form(matmul)[0]:  # B given [N, K]: transposed (a constant, folded)
        w = onnx_op("Transpose", [w], [problem.k, problem.n], element, ip, loc, perm=si64_array([1, 0]))
    if len(lead) > 1:
        x = onnx_op("Reshape", [x, int64_literal([problem.m, problem.k], ip, loc)], [problem.m, problem.k], element, ip, loc)
    operands = [x, w]
    if bias is not None:
        width = _bias_width(problem)
        operands.append(bias if len(static_shape(bias)) == 1 else
                        onnx_op("Reshape", [bias, int64_literal([width], ip, loc)], [width], element, ip, loc))
    batch = [problem.batch] if problem.batch > 1 else []
    if _filter_by_batch(matmul) and not batch:  # a batch of one image: a 2-D product
        operands[1] = onnx_op("Reshape", [w, int64_literal([problem.k, problem.n], ip, loc)], [problem.k, problem.n],
                              element, ip, loc)
    y = call_extern(problem.name, operands, [*batch, problem.m, problem.n], element, ip, loc)
    shape = static_shape(last.result)  # a rank-3 activation's rows, a batch of one image, a Reshape taken in
    if shape != [*batch, problem.m, problem.n]:
        y = onnx_op("Reshape", [y, int64_literal(shape, ip, loc)], shape, element, ip, loc)
    replace_chain(matmul, after, lambda ip: y)
