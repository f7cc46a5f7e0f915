"""The mma.sync kernel's phases for rows the workgroup tile does not divide (issue 58, item 4):
M = 1576 (ViT-B's 8 x 197 tokens) or 1500 (Whisper's frames), which no tile of 32 rows or more
divides. Without them such a matmul fell back to TileAndFuse, at 80 TFLOP/s on the H200 where the
padded kernel runs 130-160 (docs/benchmarks/mma-sync-kernel.md).

Per workgroup (block_m x block_n), where the last row of tiles is partial:
1. the elementwise op after the contraction (the epilogue) is tiled to workgroups and the
   contraction and its fill fused into it, as in the aligned kernel;
2. the workgroup's contraction is padded to block_m rows (`transform.structured.pad`, rows only):
   A's rows past M are zeros, the accumulator is a fill of the whole padded tile
   (`iree.fold_fill_into_pad`), and the epilogue reads the rows that exist;
3. K is tiled, the pad of A fused into the K loop: each step's A tile is the pad of a slice
   that may be short; it is spread over the threads (a [rows, 8] piece each) and vectorized with
   masks, which become `cp.async` with a source size (zero fill) for the rows past M;
4. B is promoted to shared memory as in the aligned kernel; the epilogue is spread over the
   threads with masks on its rows and its forall marked (EPILOGUE_MARK) so that only its
   transfers are unrolled to loads and stores;
5. the rest is the aligned kernel's: bufferize, map to threads (a barrier after each mapped
   loop), hoist the accumulators, mma.sync, multi-buffer, `cp.async` groups and pipelining, with
   the pipeliner's simple schedule (A and B are two copy groups a stage; the tensor-core schedule
   takes one).

What it takes (checked on the H200 by CUPTI, 20 runs each, every output equal to torch's within
the default's error): f16 x f16 -> f32 C = A B stored M x K, K x N, M x N, no batch dim, with an
elementwise op after it; N and K divided by the tiles as in the aligned kernel. Without an
epilogue the result tile's copy back to C computed a wrong result (every config, H200), so that
form is not offered. Without the barrier after each mapped loop, three of five configs raced
(outputs differing from run to run)."""

from __future__ import annotations

from typing import Protocol

from pipelines.transform_text import ANY, apply_patterns, match_func


class Tiles(Protocol):
    """What these phases read of a kernel (pipelines.llvmgpu_mma_sync_strategy.MmaSyncTiles,
    which imports this module)."""

    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int

    @property
    def threads(self) -> int: ...

PAIR = f": {ANY} -> (!transform.any_op, !transform.any_op)\n"
FUSE = ": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
THREADS = "(mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>])"
WARPS = "(mapping = [#gpu.warp<y>, #gpu.warp<x>])"
EPILOGUE_MARK = "mma_sync_epilogue"  # the attribute on the epilogue's thread-level loop
PARALLEL, REDUCTION = "#linalg.iterator_type<parallel>", "#linalg.iterator_type<reduction>"
VECTOR = 8  # f16 elements a thread copies at once (16 bytes: one cp.async)


def a_copy_threads(t: Tiles) -> tuple[int, int]:
    """The thread grid of A's copy (rows, columns): each thread a [rows, VECTOR] piece."""
    cols = t.block_k // VECTOR
    return t.threads // cols, cols


def epilogue_threads(t: Tiles) -> tuple[int, int]:
    """The thread grid of the epilogue (rows, columns), each thread 4 columns of its rows."""
    cols = min(t.block_n // 4, t.threads)
    return t.threads // cols, cols


def tile_and_pad(t: Tiles) -> str:
    """Phase 1: workgroups, the padded contraction, the K loop, A's masked copy, B's promotion,
    the epilogue's masked loop, warps."""
    bm, bn, bk = t.block_m, t.block_n, t.block_k
    a_rows, a_cols = a_copy_threads(t)
    e_rows, e_cols = epilogue_threads(t)
    return (
        f'    %mm = transform.structured.match ops{{["linalg.generic"]}} attributes {{iterator_types = '
        f"[{PARALLEL}, {PARALLEL}, {REDUCTION}]}} in %root : {ANY} -> !transform.any_op\n"
        f'    %fill = transform.structured.match ops{{["linalg.fill"]}} in %root : {ANY} -> !transform.any_op\n'
        f'    %ew = transform.structured.match ops{{["linalg.generic"]}} attributes {{iterator_types = '
        f"[{PARALLEL}, {PARALLEL}]}} in %root : {ANY} -> !transform.any_op\n"
        f"    %ew_tile, %grid = transform.structured.tile_using_forall %ew tile_sizes [{bm}, {bn}] "
        f"(mapping = [#gpu.block<y>, #gpu.block<x>]) {PAIR}"
        f"    transform.iree.populate_workgroup_count_region_using_num_threads_slice %grid : {ANY} -> ()\n"
        f"    %tiled, %grid2 = transform.structured.fuse_into_containing_op %mm into %grid {FUSE}"
        f"    %fill_tile, %grid3 = transform.structured.fuse_into_containing_op %fill into %grid2 {FUSE}"
        f"    %padded, %pad, %copy = transform.structured.pad %tiled <padding_values = [0.0 : f16, 0.0 : f16, 0.0 : f32], "
        f'padding_dimensions = [0], nofold_flags = [1, 0, 0], copy_back_op = "none"> '
        f": {ANY} -> (!transform.any_op, !transform.any_op, !transform.any_op)\n"
        f"    %a_pad = transform.get_producer_of_operand %padded[0] : {ANY} -> !transform.any_op\n"
        + match_func("%f0")
        + apply_patterns("%f0", "iree.fold_fill_into_pad", "linalg.tiling_canonicalization", "canonicalization")
        + f"    %step, %loop = transform.structured.tile_using_for %padded tile_sizes [0, 0, {bk}] {PAIR}"
        f"    %a_step, %loop2 = transform.structured.fuse_into_containing_op %a_pad into %loop {FUSE}"
        f'    %fills = transform.structured.match ops{{["linalg.fill"]}} in %root : {ANY} -> !transform.any_op\n'
        f"    %a_t, %a_forall = transform.structured.tile_using_forall %a_step num_threads [{a_rows}, {a_cols}] {THREADS} {PAIR}"
        # The tiled pad guards a slice that could be empty; none is (every thread's rows start
        # inside the tile, and a masked read of none is zeros).
        f'    %a_if = transform.structured.match ops{{["scf.if"]}} in %loop2 : {ANY} -> !transform.any_op\n'
        f"    transform.scf.take_assumed_branch %a_if take_else_branch : {ANY} -> ()\n"
        f"    %promoted, %b = transform.iree.promote_operands %step [1] {PAIR}"
        f"    %e_t, %e_forall = transform.structured.tile_using_forall %ew_tile num_threads [{e_rows}, {e_cols}] {THREADS} {PAIR}"
        f'    transform.annotate %e_forall "{EPILOGUE_MARK}" : !transform.any_op\n'
        f"    %warp_mm, %w1 = transform.structured.tile_using_forall %promoted tile_sizes "
        f"[{bm // t.warps_m}, {bn // t.warps_n}] {WARPS} {PAIR}"
        f"    %warp_fill, %w2 = transform.structured.tile_using_forall %fills tile_sizes "
        f"[{bm // t.warps_m}, {bn // t.warps_n}] {WARPS} {PAIR}"
        + match_func("%f1")
        + apply_patterns("%f1", "linalg.tiling_canonicalization", "canonicalization")
        # Masked vectorization before anything else canonicalizes: each piece's largest size.
        + f"    transform.structured.vectorize %a_t vector_sizes [{bm // a_rows}, {VECTOR}] : !transform.any_op\n"
        f"    transform.structured.vectorize %e_t vector_sizes [{bm // e_rows}, 4] : !transform.any_op\n"
        + match_func("%f2")
        + apply_patterns("%f2", "vector.lower_masked_transfers"))
