"""A Triton f16 matmul (f32 accumulation and result), as a second mma.sync kernel beside the
strategy's in benchmarks/gpu_mma_sync.py: Triton's own tutorial kernel (grouped launch order),
its configs tried and the fastest kept. With DISABLE_MMA_V3=1 in the environment before Triton
compiles, Triton on Hopper emits mma.sync (sm_80's MMA) instead of wgmma; the PTX is read back to
show which it used. Imported only on the GPU machine (torch brings Triton)."""

from __future__ import annotations

import re

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages): Triton's tutorial configs for
# CUDA, and the 128x256 and 256x128 tiles on 8 warps at 3 and 4 stages.
CONFIGS = [(128, 256, 64, 8, 8, 3), (64, 256, 32, 8, 4, 4), (128, 128, 32, 8, 4, 4), (128, 64, 32, 8, 4, 4),
           (64, 128, 32, 8, 4, 4), (128, 128, 64, 8, 8, 3), (256, 128, 64, 8, 8, 3), (128, 256, 32, 8, 8, 4),
           (256, 128, 32, 8, 8, 4), (128, 128, 64, 8, 4, 4)]


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        num_pid_m = tl.cdiv(M, BLOCK_M)
        num_pid_n = tl.cdiv(N, BLOCK_N)
        in_group = GROUP_M * num_pid_n
        first_m = (pid // in_group) * GROUP_M
        group_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + ((pid % in_group) % group_m)
        pid_n = (pid % in_group) // group_m
        rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a_ptr + rm[:, None] * stride_am + rk[None, :] * stride_ak
        b_ptrs = b_ptr + rk[:, None] * stride_bk + rn[None, :] * stride_bn
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BLOCK_K)):  # the shapes are multiples of the tiles: no masks
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc)

    return matmul


def launcher(a, b, config):
    """A call computing a @ b (f16, K x N) into a new f32 tensor with `config`, and its compiled
    kernel (for the PTX) after a first call; None where the config does not divide the shape or
    does not compile."""
    import torch
    import triton

    bm, bn, bk, group, warps, stages = config
    (m, k), n = a.shape, b.shape[1]
    if m % bm or n % bn or k % bk:
        return None
    kernel = _kernel()
    c = torch.empty((m, n), device=a.device, dtype=torch.float32)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)

    def call():
        return kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                            c.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=group, num_warps=warps,
                            num_stages=stages)
    try:
        compiled = call()
        torch.cuda.synchronize()
    except Exception as e:  # out of shared memory or registers: not a config for this shape
        print(f"    triton {config}: {type(e).__name__}: {str(e)[:120]}")
        return None
    return (lambda: (call(), c)[1]), compiled


def mma_counts(compiled) -> dict[str, int]:
    ptx = compiled.asm.get("ptx", "")
    return {"mma.sync": len(re.findall(r"mma\.sync", ptx)), "wgmma": len(re.findall(r"wgmma\.mma_async", ptx)),
            "ldmatrix": len(re.findall(r"ldmatrix", ptx)), "cp.async": len(re.findall(r"cp\.async\.c[ag]", ptx))}


def fastest(a, b, time_ms) -> tuple[object, tuple, dict[str, int]]:
    """The fastest of CONFIGS on a @ b by `time_ms(call)` (a quick first pass), with its PTX's
    MMA counts; every config's time is printed."""
    best = None
    for config in CONFIGS:
        made = launcher(a, b, config)
        if made is None:
            continue
        call, compiled = made
        ms = time_ms(call)
        print(f"    triton {config}: {ms:.4f} ms")
        if best is None or ms < best[0]:
            best = (ms, call, config, mma_counts(compiled))
    if best is None:
        raise SystemExit("no Triton config ran")
    return best[1], best[2], best[3]
