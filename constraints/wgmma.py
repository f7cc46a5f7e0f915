"""Rules of a Hopper (sm_90a) matrix-product kernel's tiles on warpgroup MMA (`wgmma`): a block
computes a bm x bn tile of C, its warps in warpgroups of four, each warpgroup's rows in whole
instructions of 64, the f32 sums in registers, and `stages` K steps of A's and B's tiles in
shared memory at once. The rules hold for any compiler that lowers such a kernel (Triton's
`tl.dot` on sm_90a, CUTLASS's warpgroup kernels); the problem's extents and what may be masked
are the caller's. Imports z3 and the standard library only."""

from __future__ import annotations

import z3

from constraints.tiling import divides, within

WARPGROUP = 4  # warps that issue one wgmma together
WGMMA_M = 64  # the rows of one wgmma instruction
WGMMA_N_MAX = 256  # the widest instruction's columns
# The f32 sums a thread may hold (of its 255 registers; the operands' addresses, the softmax's or
# epilogue's values need the rest). 128x256 on 8 warps holds 128.
SUMS_PER_THREAD = 128


def warpgroup_rules(bm: z3.ArithRef, bn: z3.ArithRef, warps: z3.ArithRef) -> list[z3.BoolRef]:
    """How a bm x bn tile of C is dealt to warpgroups: warps in whole warpgroups, bm in whole
    instructions' rows, at most WGMMA_N_MAX columns a warpgroup, and each warpgroup at least one
    64 x 32 piece of C."""
    groups = warps / WARPGROUP
    return [warps % WARPGROUP == 0, bm % WGMMA_M == 0, within(bn, WGMMA_N_MAX * groups),
            groups * WGMMA_M * 32 <= bm * bn]


def tile_rules(bm: z3.ArithRef, bn: z3.ArithRef, bk: z3.ArithRef, warps: z3.ArithRef, stages: z3.ArithRef,
               element_bytes: int, shared_limit: int) -> list[z3.BoolRef]:
    """What every tile of a matrix product needs, whatever the problem: `warpgroup_rules`, the
    sums in registers (SUMS_PER_THREAD), and the pipeline's A and B tiles (`stages` K steps of
    bm x bk and bk x bn) in `shared_limit` bytes of shared memory."""
    return [*warpgroup_rules(bm, bn, warps), within(bm * bn, SUMS_PER_THREAD * 32 * warps),
            within(stages * (bm + bn) * bk * element_bytes, shared_limit)]


def _cover(extent: int) -> int:
    """The least power of two at or above `extent`."""
    return 1 << max(extent - 1, 0).bit_length()


def problem_rules(bm: z3.ArithRef, bn: z3.ArithRef, bk: z3.ArithRef, m: int, n: int, k: int,
                  masked_n: bool, masked_k: bool) -> list[z3.BoolRef]:
    """Tiles that lay out on an m x n x k product: bn divides n unless columns may be masked, bk
    divides k unless the last K step may be, and no tile past the least power of two that covers
    its extent (a 256-row tile is not tried on 64 rows; bm at least one instruction's)."""
    rules = [within(bm, max(WGMMA_M, _cover(m))), within(bn, _cover(n)), within(bk, _cover(k))]
    if not masked_n:
        rules.append(divides(bn, n))
    if not masked_k:
        rules.append(divides(bk, k))
    return rules
