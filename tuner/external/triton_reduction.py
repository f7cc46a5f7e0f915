"""The reduction over the middle axes of a channels-last tensor (tuner.external.reduction_kernel)
compiled by Triton, for `hal.dispatch.extern` (tuner.external).

A workgroup per block of channels of one image: it steps down the image's pixels a block of rows
at a time (each row the block's channels, contiguous), summing x or x^2 in f32, then takes the
square root or the mean and writes the block's Y once. The bindings are X, then Y."""

from __future__ import annotations

from functools import cache

from tuner.external.abi import ExternKernel
from tuner.external.reduction_kernel import SpatialReduceProblem, SpatialReduceTiles
from tuner.external.triton_build import compile_for_iree, language

KIND_CODES = {"sum": 0, "l2": 1, "sumsq": 2, "mean": 3}


@cache
def spatial_reduce_jit():
    """The triton.jit kernel (jitted once a process; benchmarks/interpret_external_kernels.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _spatial_reduce(x_ptr, y_ptr, P: tl.constexpr, C: tl.constexpr, KIND: tl.constexpr, BP: tl.constexpr,
                        BC: tl.constexpr):
        # X is [batch, P, C], Y [batch, C]; KIND: 0 sum, 1 sqrt of the sum of squares, 2 the sum
        # of squares, 3 the mean.
        image = tl.program_id(1).to(tl.int64)
        cols = tl.program_id(0) * BC + tl.arange(0, BC)
        rows = tl.arange(0, BP)
        base = x_ptr + image * (P * C)
        acc = tl.zeros((BP, BC), dtype=tl.float32)
        for p0 in range(0, P, BP):
            keep = ((p0 + rows)[:, None] < P) & (cols[None, :] < C)
            x = tl.load(base + (p0 + rows)[:, None] * C + cols[None, :], mask=keep, other=0.0).to(tl.float32)
            if KIND == 1 or KIND == 2:
                x = x * x
            acc += x
        total = tl.sum(acc, 0)
        if KIND == 1:
            total = tl.sqrt(total)
        if KIND == 3:
            total = total / P
        tl.store(y_ptr + image * C + cols, total.to(y_ptr.dtype.element_ty), mask=cols < C)

    return _spatial_reduce


def constants(problem: SpatialReduceProblem, tiles: SpatialReduceTiles) -> dict[str, object]:
    """The kernel's constexpr arguments (by name, in its order)."""
    return {"P": problem.pixels, "C": problem.c, "KIND": KIND_CODES[problem.kind], "BP": tiles.pixels,
            "BC": tiles.channels}


@cache  # each problem's kernel compiled once a process
def triton_spatial_reduce(problem: SpatialReduceProblem, tiles: SpatialReduceTiles) -> ExternKernel:
    """The kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    pointer = {"f16": "*fp16", "bf16": "*bf16", "f32": "*fp32"}.get(problem.element)
    if pointer is None:
        raise ValueError(f"no external reduction for {problem.element}")
    return compile_for_iree(spatial_reduce_jit(), {"x_ptr": pointer, "y_ptr": pointer}, constants(problem, tiles),
                            tiles, problem.name, tiles.grid(problem))
