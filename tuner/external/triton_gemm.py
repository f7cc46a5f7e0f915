"""Hopper matrix products compiled by Triton, for `hal.dispatch.extern` (tuner.external): each
block computes a bm x bn tile of C = A B with `tl.dot` (wgmma on sm_90a), rows past m masked
(and columns past n where the tile does not divide it),
and the last K step where the K step does not divide K, then the problem's epilogue on the f32 sums (a bias, an activation) before the one rounding; a
batch of B and C on the grid's z, A shared; the blocks in the order of the grid, or `group` row
tiles at a time. The bindings are A, B, then the bias where there is
one, then C."""

from __future__ import annotations

from functools import cache

from tuner.external.abi import WAVE, ExternKernel
from tuner.external.gemm_kernel import ACTIVATIONS, EPILOGUE_STEPS, GemmProblem, GemmTiles
from tuner.external.triton_build import TMA_PTX_VERSION, compile_for_iree, language



@cache
def gemm_jit():
    """The triton.jit kernel (jitted once a process; benchmarks/interpret_external_kernels.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _gemm(a_ptr, b_ptr, x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, HAS_BIAS: tl.constexpr, ACT: tl.constexpr,
              EVEN_N: tl.constexpr, ROW_BIAS: tl.constexpr, BATCHED: tl.constexpr, EVEN_K: tl.constexpr,
              GROUP: tl.constexpr):
        # A block computes C[pid_m*BM : +BM, pid_n*BN : +BN]; grid (ceil(N/BN), ceil(M/BM)), rows
        # masked where BM does not divide M, and columns too unless EVEN_N (BN divides N: the loads of B unmasked); the
        # last K step too unless EVEN_K (BK divides K). With GROUP > 1 the grid is one row of
        # ceil(M/BM) * ceil(N/BN) blocks taken GROUP row tiles at a time, column by column (the
        # blocks running at once share A's and B's tiles in L2).
        # x_ptr is the bias (one per column, or per row where ROW_BIAS) and y_ptr C where
        # HAS_BIAS, else x_ptr is C. BATCHED: B and C are the grid's z-th of a batch, A shared.
        if GROUP > 1:
            pid = tl.program_id(0)
            tiles_m: tl.constexpr = (M + BM - 1) // BM
            tiles_n: tl.constexpr = (N + BN - 1) // BN
            first_m = (pid // (GROUP * tiles_n)) * GROUP
            rows_here = tl.minimum(tiles_m - first_m, GROUP)
            pid_m = first_m + (pid % (GROUP * tiles_n)) % rows_here
            pid_n = (pid % (GROUP * tiles_n)) // rows_here
        else:
            pid_n = tl.program_id(0)
            pid_m = tl.program_id(1)
        if BATCHED:
            image = tl.program_id(2).to(tl.int64)
            b_ptr += image * (K * N)
            if HAS_BIAS:
                y_ptr += image * (M * N)
            else:
                x_ptr += image * (M * N)
        rows = pid_m * BM + tl.arange(0, BM)
        cols = pid_n * BN + tl.arange(0, BN)
        ks = tl.arange(0, BK)
        a = a_ptr + rows[:, None] * K + ks[None, :]
        b = b_ptr + ks[:, None] * N + cols[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k0 in range(0, K, BK):
            if EVEN_K:
                if M % BM == 0:  # no row masked
                    x = tl.load(a)
                else:
                    x = tl.load(a, mask=rows[:, None] < M, other=0.0)
                if EVEN_N:
                    w = tl.load(b)
                else:
                    w = tl.load(b, mask=cols[None, :] < N, other=0.0)
            else:
                inside = (k0 + ks) < K
                x = tl.load(a, mask=(rows[:, None] < M) & inside[None, :], other=0.0)
                w = tl.load(b, mask=inside[:, None] & (cols[None, :] < N), other=0.0)
            acc = tl.dot(x, w, acc)
            a += BK
            b += BK * N
        if HAS_BIAS and ROW_BIAS:
            acc += tl.load(x_ptr + rows, mask=rows < M, other=0.0)[:, None].to(tl.float32)
            out = y_ptr
        elif HAS_BIAS:
            if EVEN_N:
                acc += tl.load(x_ptr + cols)[None, :].to(tl.float32)
            else:
                acc += tl.load(x_ptr + cols, mask=cols < N, other=0.0)[None, :].to(tl.float32)
            out = y_ptr
        else:
            out = x_ptr
        if ACT == 1:
            acc = tl.maximum(acc, 0.0)
        if ACT == 2:
            acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
        if ACT == 3:  # tanh(u) = 2 sigmoid(2u) - 1
            u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 / (1.0 + tl.exp(-2.0 * u)))
        if ACT == 4:
            acc = acc / (1.0 + tl.exp(-acc))
        if EVEN_N:
            if M % BM == 0:
                tl.store(out + rows[:, None] * N + cols[None, :], acc.to(out.dtype.element_ty))
            else:
                tl.store(out + rows[:, None] * N + cols[None, :], acc.to(out.dtype.element_ty), mask=rows[:, None] < M)
        else:
            tl.store(out + rows[:, None] * N + cols[None, :], acc.to(out.dtype.element_ty),
                     mask=(rows[:, None] < M) & (cols[None, :] < N))

    return _gemm


@cache
def gemm_tma_jit():
    """The persistent TMA kernel (tiles.tma): a workgroup per multiprocessor (SMS), each taking the
    grid's tiles one after another in grouped order (GROUP row tiles at a time), A's and B's
    blocks loaded and C's stored by the Tensor Memory Accelerator through descriptors each
    workgroup makes in its global scratch (Triton's, IREE's last binding); rows and columns past
    the problem's are the descriptors' to fill with zeros and leave unwritten. The flattened
    loops let Triton's pipeliner load the next tile's first blocks during this one's epilogue."""
    triton, tl = language()

    @triton.jit
    def _gemm_tma(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr, BM: tl.constexpr,
                  BN: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, GROUP: tl.constexpr, SMS: tl.constexpr):
        a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[K, 1], block_shape=[BM, BK])
        b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[N, 1], block_shape=[BK, BN])
        c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, BN])
        tiles_m: tl.constexpr = (M + BM - 1) // BM
        tiles_n: tl.constexpr = (N + BN - 1) // BN
        steps: tl.constexpr = (K + BK - 1) // BK
        in_group: tl.constexpr = GROUP * tiles_n
        for tile in tl.range(tl.program_id(0), tiles_m * tiles_n, SMS, flatten=True):
            first_m = (tile // in_group) * GROUP
            rows_here = tl.minimum(tiles_m - first_m, GROUP)
            pid_m = first_m + (tile % in_group) % rows_here
            pid_n = (tile % in_group) // rows_here
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for step in range(steps):
                acc = tl.dot(a_desc.load([pid_m * BM, step * BK]), b_desc.load([step * BK, pid_n * BN]), acc)
            if ACT == 1:
                acc = tl.maximum(acc, 0.0)
            if ACT == 2:
                acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
            if ACT == 3:
                u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
                acc = 0.5 * acc * (2.0 / (1.0 + tl.exp(-2.0 * u)))
            if ACT == 4:
                acc = acc / (1.0 + tl.exp(-acc))
            c_desc.store([pid_m * BM, pid_n * BN], acc.to(c_ptr.dtype.element_ty))

    return _gemm_tma


def _triton_gemm_tma(problem: GemmProblem, tiles: GemmTiles) -> ExternKernel:
    if not problem.tma_fits():
        raise ValueError(f"the TMA kernel does not take {problem.name} (a batch, a bias, or K or N no multiple of 8)")
    activation = problem.epilogue[0] if problem.epilogue else None
    pointer = "*fp16" if problem.element == "f16" else "*bf16"
    return compile_for_iree(gemm_tma_jit(), {"a_ptr": pointer, "b_ptr": pointer, "c_ptr": pointer},
                            {"M": problem.m, "N": problem.n, "K": problem.k, "BM": tiles.bm, "BN": tiles.bn,
                             "BK": tiles.bk, "ACT": ACTIVATIONS.get(activation, 0) if activation else 0,
                             "GROUP": tiles.group, "SMS": WAVE},
                            tiles, problem.name, grid(problem, tiles), ptx_version=TMA_PTX_VERSION)


@cache  # each problem's kernel compiled once a process: the rewrites alone and joined share it
def triton_gemm(problem: GemmProblem, tiles: GemmTiles) -> ExternKernel:
    """The Hopper kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    if problem.element not in ("f16", "bf16"):
        raise ValueError(f"no external kernel for {problem.element} matrix products")
    if not tiles.lays_out(problem, masked=True, masked_k=True):
        raise ValueError(f"tiles {tiles.label} do not lay out on {problem.name}")
    steps = list(problem.epilogue)
    has_bias = steps[:1] in (["bias"], ["row_bias"])
    activation = steps[1:] if has_bias else steps
    if any(s not in EPILOGUE_STEPS for s in steps) or len(activation) > 1 or {"bias", "row_bias"} & set(activation):
        raise ValueError(f"no external kernel for the epilogue {'+'.join(steps)}")
    if tiles.tma:
        return _triton_gemm_tma(problem, tiles)
    pointer = "*fp16" if problem.element == "f16" else "*bf16"
    return compile_for_iree(gemm_jit(), {"a_ptr": pointer, "b_ptr": pointer, "x_ptr": pointer, "y_ptr": pointer},
                            {"M": problem.m, "N": problem.n, "K": problem.k, "BM": tiles.bm, "BN": tiles.bn,
                             "BK": tiles.bk, "HAS_BIAS": has_bias, "ACT": ACTIVATIONS.get(activation[0], 0) if activation else 0,
                             "EVEN_N": problem.n % tiles.bn == 0, "ROW_BIAS": steps[:1] == ["row_bias"],
                             "BATCHED": problem.batch > 1, "EVEN_K": problem.k % tiles.bk == 0,
                             "GROUP": tiles.group},
                            tiles, problem.name, grid(problem, tiles), bindings=4 if has_bias else 3)


def grid(problem: GemmProblem, tiles: GemmTiles) -> tuple[int, int, int]:
    """(column tiles, row tiles, batch), or (all tiles, 1, batch) where the tiles are grouped; the
    persistent TMA form: a workgroup a multiprocessor (WAVE), or one a tile where there are fewer."""
    across, down = -(-problem.n // tiles.bn), -(-problem.m // tiles.bm)
    if tiles.tma:
        return min(WAVE, across * down), 1, 1
    return (across * down, 1, problem.batch) if tiles.group > 1 else (across, down, problem.batch)
