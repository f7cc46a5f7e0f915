"""Depthwise convolutions compiled by Triton for `hal.dispatch.extern` (tuner.external).

One workgroup per block of an image's channel's output pixels (flattened, consecutive pixels on
consecutive lanes): every tap of the filter unrolled, the input read where the tap falls inside
the image (zeros outside: the padding), the sums in f32, the bias added, then the activation (Relu,
Gelu in either form, SiLU), rounded once. The grid
is (images x channels, pixel blocks). The bindings are X, W, then the bias where there is one,
then Y. No tensor cores: a depthwise filter is one channel's, a memory-bound stencil."""

from __future__ import annotations

from functools import cache

from tuner.external.abi import ExternKernel
from tuner.external.depthwise_kernel import DepthwiseProblem, DepthwiseTiles
from tuner.external.gemm_kernel import ACTIVATIONS
from tuner.external.triton_build import compile_for_iree, language


@cache
def depthwise_jit():
    """The triton.jit kernel (jitted once a process; benchmarks/interpret_external_kernels.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _depthwise(x_ptr, w_ptr, u_ptr, v_ptr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr,
                   OH: tl.constexpr, OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr,
                   SW: tl.constexpr, PT: tl.constexpr, PL: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
                   HAS_BIAS: tl.constexpr, ACT: tl.constexpr, BLOCK: tl.constexpr):
        # u_ptr is the bias and v_ptr Y where HAS_BIAS, else u_ptr is Y.
        nc = tl.program_id(0)
        c = nc % C
        p = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        valid = p < OH * OW
        oh = p // OW
        ow = p - oh * OW  # not p % OW: the pair miscompiles with strides in the convolution kernel
        plane = x_ptr + nc * (H * W)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for i in tl.static_range(KH):
            ih = oh * SH - PT + i * DH
            row = valid & (ih >= 0) & (ih < H)
            for j in tl.static_range(KW):
                iw = ow * SW - PL + j * DW
                x = tl.load(plane + ih * W + iw, mask=row & (iw >= 0) & (iw < W), other=0.0)
                acc += x.to(tl.float32) * tl.load(w_ptr + c * (KH * KW) + i * KW + j).to(tl.float32)
        if HAS_BIAS:
            acc += tl.load(u_ptr + c).to(tl.float32)
            out = v_ptr
        else:
            out = u_ptr
        if ACT == 1:
            acc = tl.maximum(acc, 0.0)
        if ACT == 2:
            acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
        if ACT == 3:  # tanh(u) = 2 sigmoid(2u) - 1
            u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 / (1.0 + tl.exp(-2.0 * u)))
        if ACT == 4:
            acc = acc / (1.0 + tl.exp(-acc))
        tl.store(out + nc * (OH * OW) + p, acc.to(out.dtype.element_ty), mask=valid)

    return _depthwise


@cache  # each problem's kernel compiled once a process: the rewrites alone and joined share it
def triton_depthwise(problem: DepthwiseProblem, tiles: DepthwiseTiles) -> ExternKernel:
    """The kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    if problem.element not in ("f16", "bf16", "f32"):
        raise ValueError(f"no external kernel for {problem.element} depthwise convolutions")
    oh, ow = problem.out
    pointer = {"f16": "*fp16", "bf16": "*bf16", "f32": "*fp32"}[problem.element]
    (sh, sw), (pt, pl, _, _), (dh, dw) = problem.strides, problem.pads, problem.dilations
    return compile_for_iree(depthwise_jit(), {"x_ptr": pointer, "w_ptr": pointer, "u_ptr": pointer, "v_ptr": pointer},
                            {"C": problem.c, "H": problem.h, "W": problem.w, "OH": oh, "OW": ow, "KH": problem.kh,
                             "KW": problem.kw, "SH": sh, "SW": sw, "PT": pt, "PL": pl, "DH": dh, "DW": dw,
                             "HAS_BIAS": problem.bias, "ACT": ACTIVATIONS[problem.activation] if problem.activation else 0,
                             "BLOCK": tiles.pixels},
                            tiles, problem.name, (problem.n * problem.c, -(-oh * ow // tiles.pixels), 1),
                            bindings=4 if problem.bias else 3)
