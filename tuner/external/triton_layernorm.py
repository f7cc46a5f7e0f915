"""Layer normalization compiled by Triton, for `hal.dispatch.extern` (tuner.external).

One workgroup per block of rows, each row's c values at once (padded to a power of two and
masked): the mean and variance in f32, then (x - mean) * rsqrt(var + eps) * W + B, rounded once.
Channels first (tuner.external.layernorm_kernel), a row is one pixel's channels of an NCHW image,
read a plane apart, and written as [n, p, c]. The bindings are X, W, then B where there is one,
then Y. The RMS norm (`triton_rmsnorm`) the same way: X, W, then Y."""

from __future__ import annotations

from functools import cache

from tuner.external.abi import ExternKernel
from tuner.external.layernorm_kernel import LayerNormProblem, LayerNormTiles, RmsNormProblem
from tuner.external.triton_build import compile_for_iree, language


@cache
def layernorm_jit():
    """The triton.jit kernel (jitted once a process; benchmarks/interpret_external_kernels.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _layernorm(x_ptr, w_ptr, u_ptr, v_ptr, ROWS: tl.constexpr, C: tl.constexpr, P: tl.constexpr,
                   EPS: tl.constexpr, HAS_BIAS: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
        # P > 0: X is [n, C, P] (NCHW), row r = n * P + p; else X is [ROWS, C]. u_ptr is the bias
        # and v_ptr Y where HAS_BIAS, else u_ptr is Y. Y is [ROWS, C] either way.
        rows = tl.program_id(0) * BR + tl.arange(0, BR)
        cols = tl.arange(0, BC)
        keep = (rows[:, None] < ROWS) & (cols[None, :] < C)
        if P > 0:
            image = (rows // P).to(tl.int64)
            at = image[:, None] * (C * P) + cols[None, :] * P + (rows % P)[:, None]
        else:
            at = rows.to(tl.int64)[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + at, mask=keep, other=0.0).to(tl.float32)
        mean = tl.sum(x, 1) / C
        centered = tl.where(keep, x - mean[:, None], 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(centered * centered, 1) / C + EPS)
        w = tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)
        y = centered * rstd[:, None] * w[None, :]
        if HAS_BIAS:
            y += tl.load(u_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)[None, :]
            out = v_ptr
        else:
            out = u_ptr
        tl.store(out + rows.to(tl.int64)[:, None] * C + cols[None, :], y.to(out.dtype.element_ty), mask=keep)

    return _layernorm


def constants(problem: LayerNormProblem, tiles: LayerNormTiles) -> dict[str, object]:
    """The kernel's constexpr arguments (by name, in its order)."""
    return {"ROWS": problem.rows, "C": problem.c, "P": problem.pixels, "EPS": float(problem.eps),
            "HAS_BIAS": problem.bias, "BR": tiles.rows, "BC": tiles.width}


@cache  # each problem's kernel compiled once a process
def triton_layernorm(problem: LayerNormProblem, tiles: LayerNormTiles) -> ExternKernel:
    """The kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    pointer = {"f16": "*fp16", "bf16": "*bf16", "f32": "*fp32"}.get(problem.element)
    if pointer is None:
        raise ValueError(f"no external layer norm for {problem.element}")
    return compile_for_iree(layernorm_jit(), {"x_ptr": pointer, "w_ptr": pointer, "u_ptr": pointer, "v_ptr": pointer},
                            constants(problem, tiles), tiles, problem.name, (-(-problem.rows // tiles.rows), 1, 1),
                            bindings=4 if problem.bias else 3)


@cache
def rmsnorm_jit():
    """The RMS norm's triton.jit kernel (benchmarks/interpret_external_kernels.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _rmsnorm(x_ptr, w_ptr, y_ptr, ROWS: tl.constexpr, C: tl.constexpr, EPS: tl.constexpr, BR: tl.constexpr,
                 BC: tl.constexpr, WF32: tl.constexpr):
        # WF32: W is f32 and scales the normalized value before its one rounding (Gemma's)
        rows = tl.program_id(0) * BR + tl.arange(0, BR)
        cols = tl.arange(0, BC)
        keep = (rows[:, None] < ROWS) & (cols[None, :] < C)
        at = rows.to(tl.int64)[:, None] * C + cols[None, :]
        x = tl.load(x_ptr + at, mask=keep, other=0.0)
        xf = x.to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(xf * xf, 1) / C + EPS)
        normed = xf * rstd[:, None]
        if not WF32:
            normed = normed.to(x.dtype).to(tl.float32)  # rounded as torch's .to(input_dtype)
        w = tl.load(w_ptr + cols, mask=cols < C, other=0.0).to(tl.float32)
        tl.store(y_ptr + at, (normed * w[None, :]).to(y_ptr.dtype.element_ty), mask=keep)

    return _rmsnorm


def rmsnorm_constants(problem: RmsNormProblem, tiles: LayerNormTiles) -> dict[str, object]:
    """The RMS norm kernel's constexpr arguments (by name, in its order)."""
    return {"ROWS": problem.rows, "C": problem.c, "EPS": float(problem.eps), "BR": tiles.rows, "BC": tiles.width,
            "WF32": problem.weight_f32}


@cache  # each problem's kernel compiled once a process
def triton_rmsnorm(problem: RmsNormProblem, tiles: LayerNormTiles) -> ExternKernel:
    """The RMS norm kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    pointer = {"f16": "*fp16", "bf16": "*bf16"}.get(problem.element)
    if pointer is None:
        raise ValueError(f"no external RMS norm for {problem.element}")
    return compile_for_iree(rmsnorm_jit(), {"x_ptr": pointer, "w_ptr": "*fp32" if problem.weight_f32 else pointer,
                                            "y_ptr": pointer},
                            rmsnorm_constants(problem, tiles), tiles, problem.name, (-(-problem.rows // tiles.rows), 1, 1),
                            bindings=3)

