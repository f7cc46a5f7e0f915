"""Hopper matrix products compiled by Triton, for `hal.dispatch.extern` (tuner.external).

Triton compiles for a GPU target without the GPU (`GPUTarget("cuda", 90, 32)`): its PTX for
sm_90a carries `wgmma.mma_async` and `cp.async` loads of 16 bytes; the pointers are declared
16-byte aligned, as IREE's bindings are. The PTX is written at ISA 8.5 (CUDA 12.5) so a driver of
CUDA 12.5 or newer compiles it. Triton is an optional dependency (`pip install triton`, on the
machine that builds the model); `TritonMissing` says so in one line."""

from __future__ import annotations

from tuner.external.gemm_kernel import ExternKernel, GemmProblem, GemmTiles, for_iree

PTX_VERSION = 85
ARCH = 90
BINDINGS = 3  # A, B, C


class TritonMissing(RuntimeError):
    pass


def _language():
    try:
        import triton
        import triton.language as tl
    except ImportError as e:  # an optional dependency
        raise TritonMissing("external Hopper kernels need Triton: pip install triton") from e
    return triton, tl


def _kernel():
    triton, tl = _language()

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

    return triton, _gemm


def triton_gemm(problem: GemmProblem, tiles: GemmTiles) -> ExternKernel:
    """The Hopper kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    if problem.element not in ("f16", "bf16"):
        raise ValueError(f"no external kernel for {problem.element} matrix products")
    if not tiles.lays_out(problem):
        raise ValueError(f"tiles {tiles.label} do not lay out on {problem.name}")
    triton, gemm = _kernel()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    pointer = "*fp16" if problem.element == "f16" else "*bf16"
    source = ASTSource(
        fn=gemm, signature={"a_ptr": pointer, "b_ptr": pointer, "c_ptr": pointer, "M": "constexpr",
                            "N": "constexpr", "K": "constexpr", "BM": "constexpr", "BN": "constexpr",
                            "BK": "constexpr"},
        constexprs={"M": problem.m, "N": problem.n, "K": problem.k, "BM": tiles.bm, "BN": tiles.bn, "BK": tiles.bk},
        attrs={(i,): [["tt.divisibility", 16]] for i in range(BINDINGS)})
    compiled = triton.compile(source, target=GPUTarget("cuda", ARCH, 32),
                              options={"num_warps": tiles.warps, "num_stages": tiles.stages,
                                       "ptx_version": PTX_VERSION})
    meta = compiled.metadata
    ptx = for_iree(compiled.asm["ptx"], meta.name, problem.name, BINDINGS)
    return ExternKernel(problem.name, ptx, BINDINGS, 32 * meta.num_warps, meta.shared,
                        (problem.n // tiles.bn, -(-problem.m // tiles.bm), 1), tiles)
