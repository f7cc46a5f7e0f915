"""Hopper matrix products compiled by Triton, for `hal.dispatch.extern` (tuner.external): each
block computes a bm x bn tile of C = A B with `tl.dot` (wgmma on sm_90a), rows past m masked."""

from __future__ import annotations

from tuner.external.abi import ExternKernel
from tuner.external.gemm_kernel import GemmProblem, GemmTiles
from tuner.external.triton_build import compile_for_iree, language


def _kernel():
    triton, tl = language()

    @triton.jit
    def _gemm(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        # A block computes C[pid_m*BM : +BM, pid_n*BN : +BN]; grid (N/BN, ceil(M/BM)), rows masked.
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        ks = tl.arange(0, BK)
        a = a_ptr + rows[:, None] * K + ks[None, :]
        b = b_ptr + ks[:, None] * N + cols[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, K, BK):
            acc = tl.dot(tl.load(a, mask=rows[:, None] < M, other=0.0), tl.load(b), acc)
            a += BK
            b += BK * N
        tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=rows[:, None] < M)

    return _gemm


def triton_gemm(problem: GemmProblem, tiles: GemmTiles) -> ExternKernel:
    """The Hopper kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    if problem.element not in ("f16", "bf16"):
        raise ValueError(f"no external kernel for {problem.element} matrix products")
    if not tiles.lays_out(problem):
        raise ValueError(f"tiles {tiles.label} do not lay out on {problem.name}")
    pointer = "*fp16" if problem.element == "f16" else "*bf16"
    return compile_for_iree(_kernel(), {"a_ptr": pointer, "b_ptr": pointer, "c_ptr": pointer},
                            {"M": problem.m, "N": problem.n, "K": problem.k, "BM": tiles.bm, "BN": tiles.bn,
                             "BK": tiles.bk}, tiles, problem.name, (problem.n // tiles.bn, -(-problem.m // tiles.bm), 1))
