"""An mma.sync contraction kernel for cuda written as a transform-dialect codegen strategy: the
route IREE 3.13 offers for code its own GPU pipelines do not emit. None of 3.13's cuda pipelines
(TileAndFuse, VectorDistribute) feeds its MMAs with `ldmatrix` or fills shared memory with
`cp.async` under any config or flag (BENCHMARKS.md, issue 38); the ops that do both are still in
3.13 (`transform.iree.vector.vector_to_mma_conversion`, `create_async_groups`,
`pipeline_shared_memory_copies`, `transform.memref.multibuffer`), and a function whose
translation_info names `#iree_codegen.transform_dialect_codegen codegen_spec = @S` is lowered by
running the named sequence @S from the codegen-stage library
(`--iree-codegen-transform-dialect-library=FILE@__kernel_config`).

The strategy, per workgroup tile of `block_m x block_n`:
1. tile to workgroups (scf.forall), fuse the fill (spread over all threads);
2. tile K by `block_k` (scf.for), promote the A and B tiles to shared memory;
3. tile the tile's matmul and the fill to `warps_m x warps_n` warps, vectorize, fold the f16->f32
   extensions into the contraction, bufferize;
4. map to blocks and threads, distribute the shared-memory copies over all threads;
5. unroll to 16x8x16 MMAs, hoist the accumulators into registers across the K loop (read once
   after the fill, written once after the loop, in the MMA layout), convert to `nvgpu.ldmatrix` +
   `nvgpu.mma.sync`;
6. multi-buffer the A and B tiles `stages` deep, turn their copies into `cp.async` groups and
   software-pipeline the K loop.

Each phase is its own named sequence: a phase's handles end with it, so a later rewrite (the MMA
conversion replaces the loop's vector values) is not refused by the transform interpreter's
tracking of a handle nobody uses again.

What it takes (checked compile-only on cuda, read back from the PTX): f16 x f16 -> f32 `C = A B`
with static M, N, K that the tiles divide. What it does not take yet: batch dims, transposed
operands, fused consumers, bf16, shapes the tiles do not divide (no padding)."""

from __future__ import annotations

from dataclasses import dataclass

WARP = 32  # threads per warp on cuda
MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync.m16n8k16
STRATEGY = "mma_sync_matmul"
# Rows of the shared-memory tiles are padded by 16 bytes: unpadded, the 8 rows one ldmatrix
# reads (64 or 256 bytes apart) fall on the same 4 of the 32 banks, 4- and 8-way conflicts.
PAD_BITS = 128


@dataclass(frozen=True)
class MmaSyncTiles:
    """One kernel of the strategy: the workgroup tile, the K step, the warp grid and how many
    stages of A and B tiles are in flight."""

    block_m: int
    block_n: int
    block_k: int
    warps_m: int
    warps_n: int
    stages: int

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    def shared_bytes(self) -> int:
        """Shared memory of one workgroup: the f16 A and B tiles, `stages` deep, rows padded."""
        pad = PAD_BITS // 16
        operands = 2 * (self.block_m * (self.block_k + pad) + self.block_k * (self.block_n + pad)) * max(self.stages, 1)
        return operands

    def fits(self, m: int, n: int, k: int, shared_limit: int) -> bool:
        """Whether the kernel lays out on an M x N x K contraction: tiles divide the problem,
        each warp holds whole MMAs, each thread copies whole 16-byte vectors, shared memory
        fits."""
        warp_m, warp_n = self.block_m // self.warps_m, self.block_n // self.warps_n
        copies = (self.block_m * self.block_k, self.block_k * self.block_n)
        return (m % self.block_m == 0 and n % self.block_n == 0 and k % self.block_k == 0
                and self.block_m % self.warps_m == 0 and self.block_n % self.warps_n == 0
                and warp_m % MMA_M == 0 and warp_n % MMA_N == 0 and self.block_k % MMA_K == 0
                and all(c % (8 * self.threads) == 0 for c in copies)
                and self.shared_bytes() <= shared_limit)

    def label(self) -> str:
        return (f"wg {self.block_m}x{self.block_n} k{self.block_k}, warps {self.warps_m}x{self.warps_n}, "
                f"{self.stages} stages")


def _apply(target: str, *patterns: str) -> str:
    body = "\n".join(f"      transform.apply_patterns.{p}" for p in patterns)
    return f"    transform.apply_patterns to {target} {{\n{body}\n    }} : !transform.any_op\n"


def _func(name: str) -> str:
    return f'    {name} = transform.structured.match ops{{["func.func"]}} in %root : (!transform.any_op) -> !transform.any_op\n'


def _sequence(name: str, body: str) -> str:
    return (f"  transform.named_sequence @{name}(%root: !transform.any_op {{transform.readonly}}) {{\n"
            f"{body}    transform.yield\n  }}\n")


ANY = "(!transform.any_op)"


def _tile_and_promote(t: MmaSyncTiles) -> str:
    warp_tile = f"[{t.block_m // t.warps_m}, {t.block_n // t.warps_n}]"
    warps = "(mapping = [#gpu.warp<y>, #gpu.warp<x>])"
    # The fill is spread over every thread, rows of 4 floats each: on warps, each lane would
    # store its warp's whole tile (the vector is not distributed over lanes).
    across = min(t.block_n // 4, t.threads)
    fill_threads = f"[{t.threads // across}, {across}]"
    return (
        f'    %mm = transform.structured.match ops{{["linalg.generic"]}} in %root : {ANY} -> !transform.any_op\n'
        f'    %fill = transform.structured.match ops{{["linalg.fill"]}} in %root : {ANY} -> !transform.any_op\n'
        f"    %tiled, %grid = transform.structured.tile_using_forall %mm tile_sizes [{t.block_m}, {t.block_n}] "
        f"(mapping = [#gpu.block<y>, #gpu.block<x>]) : {ANY} -> (!transform.any_op, !transform.any_op)\n"
        f"    transform.iree.populate_workgroup_count_region_using_num_threads_slice %grid : {ANY} -> ()\n"
        f"    %fill_tile, %grid2 = transform.structured.fuse_into_containing_op %fill into %grid "
        f": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
        f"    %step, %loop = transform.structured.tile_using_for %tiled tile_sizes [0, 0, {t.block_k}] "
        f": {ANY} -> (!transform.any_op, !transform.any_op)\n"
        f"    %promoted, %a, %b = transform.iree.promote_operands %step [0, 1] "
        f": {ANY} -> (!transform.any_op, !transform.any_op, !transform.any_op)\n"
        f"    %warp_mm, %f1 = transform.structured.tile_using_forall %promoted tile_sizes {warp_tile} {warps} "
        f": {ANY} -> (!transform.any_op, !transform.any_op)\n"
        f"    %thread_fill, %f2 = transform.structured.tile_using_forall %fill_tile num_threads {fill_threads} "
        f"(mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]) : {ANY} -> (!transform.any_op, !transform.any_op)\n")


def _vectorize_and_bufferize() -> str:
    """In a phase of its own: vectorizing erases the ops the tiling handles point to, and a
    handle left pointing at an erased op crashed the interpreter's invalidation check (3 of 12
    kernels compiled, iree-compile 3.13)."""
    return (
        _func("%func")
        + _apply("%func", "linalg.tiling_canonicalization", "scf.for_loop_canonicalization", "canonicalization")
        + f"    %vec = transform.structured.vectorize_children_and_apply_patterns %func : {ANY} -> !transform.any_op\n"
        + _apply("%vec", "vector.fold_arith_extension", "canonicalization")
        + "    transform.apply_cse to %vec : !transform.any_op\n"
        f"    transform.iree.eliminate_empty_tensors %root : {ANY} -> ()\n"
        f"    %buf = transform.iree.bufferize <{{target_gpu}}> %vec : {ANY} -> (!transform.any_op)\n")


def _mark_copies() -> str:
    """After bufferization the copies left are those into shared memory (the A and B tiles,
    marked by the promotion) and any other copy bufferization leaves, which nothing marks:
    unmarked, a copy is not distributed and every thread copies all of it (seen in the PTX when
    the accumulator was promoted: 128 threads each storing the 64 KB tile). Every copy is marked
    so that all are spread over the workgroup's threads (the self-copies bufferization leaves
    fold away first)."""
    return (_func("%f")
            + _apply("%f", "scf.for_loop_canonicalization", "canonicalization")
            + "    transform.apply_cse to %f : !transform.any_op\n"
            + _apply("%f", "canonicalization")
            + "    transform.apply_cse to %f : !transform.any_op\n"
            f'    %copies = transform.structured.match ops{{["linalg.generic"]}} in %f : {ANY} -> !transform.any_op\n'
            '    %marker = transform.param.constant "copy_to_workgroup_memory" -> !transform.any_param\n'
            '    transform.annotate %copies "__internal_linalg_transform__" = %marker : !transform.any_op, !transform.any_param\n')


def _map_to_threads(t: MmaSyncTiles) -> str:
    return (_func("%f")
            + f"    transform.iree.forall_to_workgroup %f : {ANY} -> ()\n"
            f"    transform.iree.map_nested_forall_to_gpu_threads %f workgroup_dims = [{WARP * t.warps_n}, {t.warps_m}, 1] "
            f": {ANY} -> ()\n"
            f"    transform.iree.gpu_distribute_shared_memory_copy %f : {ANY} -> ()\n"
            + _apply("%f", "canonicalization"))


def _drop_barriers() -> str:
    return _func("%f") + f"    %g = transform.iree.eliminate_gpu_barriers %f : {ANY} -> !transform.any_op\n"


def _hoist_accumulators() -> str:
    return (_func("%f")
            + f"    transform.iree.hoist_static_alloc %f : {ANY} -> ()\n"
            + _apply("%f", "memref.fold_memref_alias_ops")
            + _apply("%f", "iree.prepare_vector_to_mma")
            + _apply("%f", "iree.unroll_vectors_gpu_mma_sync")
            + f"    transform.include @{STRATEGY}_sync_loops failures(propagate) (%f) : {ANY} -> ()\n"
            + _apply("%f", "memref.fold_memref_alias_ops", "canonicalization")
            + "    transform.apply_cse to %f : !transform.any_op\n"
            f"    %h = transform.structured.hoist_redundant_vector_transfers %f : {ANY} -> !transform.any_op\n"
            f"    transform.memref.erase_dead_alloc_and_stores %h : {ANY} -> ()\n")


def _to_mma() -> str:
    return (_func("%f")
            + f"    transform.iree.vector.vector_to_mma_conversion %f <{{use_mma_sync}}> : {ANY} -> ()\n"
            f"    %g = transform.iree.eliminate_gpu_barriers %f : {ANY} -> !transform.any_op\n")


def _multibuffer(t: MmaSyncTiles) -> str:
    """The A and B tiles `stages` deep. A phase of its own: the padding after it replaces the
    allocations the result handle points to, and a later op checking handles then read the
    erased ops (iree-compile crashed on 6 of 10 runs before)."""
    body = _func("%f") + _apply("%f", "memref.fold_memref_alias_ops")
    if t.stages > 1:
        body += (f'    %allocs = transform.structured.match ops{{["memref.alloc"]}} in %f : {ANY} -> !transform.op<"memref.alloc">\n'
                 f"    %mb = transform.memref.multibuffer %allocs <{{factor = {t.stages} : i64, skip_analysis}}> "
                 f': (!transform.op<"memref.alloc">) -> !transform.any_op\n')
    return body


def _pipeline(t: MmaSyncTiles) -> str:
    """Pad every shared tile's rows, then (with more than one stage) turn the copies into
    cp.async groups and software-pipeline the K loop."""
    pipelined = ""
    if t.stages > 1:
        pipelined = (f"    transform.iree.create_async_groups %f <{{use_mma_sync}}> : {ANY} -> ()\n"
                     "    transform.apply_cse to %f : !transform.any_op\n"
                     f'    %for = transform.structured.match ops{{["scf.for"]}} in %f : {ANY} -> !transform.any_op\n'
                     f"    %piped = transform.iree.pipeline_shared_memory_copies %for <{{depth = {t.stages} : i64, use_mma_sync}}> "
                     f": {ANY} -> !transform.any_op\n")
    return (_func("%f")
            + f"    transform.iree.reduce_shared_memory_bank_conflicts %f <{{padding_size_bits = {PAD_BITS} : i64}}> : {ANY} -> ()\n"
            + _apply("%f", "vector.transfer_to_scf full_unroll = true")
            + pipelined
            + _apply("%f", "vector.lower_masks")
            + _apply("%f", "vector.materialize_masks")
            + _apply("%f", "linalg.tiling_canonicalization", "memref.fold_memref_alias_ops", "canonicalization")
            + "    transform.iree.apply_licm %f : !transform.any_op\n"
            "    transform.apply_cse to %f : !transform.any_op\n")


def strategy(t: MmaSyncTiles) -> str:
    """The named sequences of the strategy (@mma_sync_matmul and its phases), to sit in a
    transform library beside the @__kernel_config that names it."""
    phases = [("tile", _tile_and_promote(t)), ("vectorize", _vectorize_and_bufferize()), ("mark", _mark_copies()), ("threads", _map_to_threads(t)), ("barriers", _drop_barriers()),
              ("hoist", _hoist_accumulators()), ("mma", _to_mma()), ("buffers", _multibuffer(t)),
              ("pipeline", _pipeline(t))]
    entry = "".join(f"    transform.include @{STRATEGY}_{name} failures(propagate) (%root) : {ANY} -> ()\n"
                    for name, _ in phases)
    sync = (f"  transform.named_sequence @{STRATEGY}_sync_loops(%f: !transform.any_op {{transform.readonly}}) {{\n"
            f'    %for = transform.structured.match ops{{["scf.for"]}} in %f : {ANY} -> !transform.any_op\n'
            f"    transform.iree.synchronize_loop %for : {ANY} -> ()\n    transform.yield\n  }}\n")
    return _sequence(STRATEGY, entry) + "".join(_sequence(f"{STRATEGY}_{n}", b) for n, b in phases) + sync


def translation_info() -> str:
    return (f"#iree_codegen.translation_info<pipeline = #iree_codegen.transform_dialect_codegen "
            f"codegen_spec = @{STRATEGY}>")


def library_for_every_contraction(t: MmaSyncTiles) -> str:
    """A whole codegen-stage library that sends every dispatch whose root is a linalg.generic
    down the strategy: for a program of one matmul (benchmarks/gpu_mma_sync.py), not for models."""
    return ("module attributes {transform.with_named_sequence} {\n" + strategy(t)
            + "  transform.named_sequence @match_generic(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {\n"
            '    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op\n'
            "    transform.yield %op : !transform.any_op\n  }\n"
            "  transform.named_sequence @annotate(%op: !transform.any_op {transform.readonly}) {\n"
            '    %func = transform.get_parent_op %op <{op_name = "func.func"}> : (!transform.any_op) -> !transform.any_op\n'
            f"    %ti = transform.param.constant {translation_info()} -> !transform.any_param\n"
            '    transform.annotate %func "translation_info" = %ti : !transform.any_op, !transform.any_param\n'
            "    transform.yield\n  }\n"
            "  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op "
            "attributes {iree_codegen.tuning_spec_entrypoint} {\n"
            "    %r = transform.foreach_match in %variant @match_generic -> @annotate : (!transform.any_op) -> !transform.any_op\n"
            "    transform.yield %r : !transform.any_op\n  }\n}\n")
