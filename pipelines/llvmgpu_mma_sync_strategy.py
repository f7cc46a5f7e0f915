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

What it takes (compiled, read back from the PTX, and checked against torch on the H100): f16 x
f16 -> f32 `C = A B` with static M, N, K that the tiles divide, alone in its dispatch or with one
elementwise op after it (the epilogue: the result tile passes through shared memory, where all
threads apply the op), and with one batch dim before M and N (`batch`: a workgroup takes one
batch entry's tile; the unit dim is cast away from the vectors before the MMA conversion, and the
PTX is the 2-D kernel's). What it does not take yet: more batch dims, B stored N x K (it compiles, but
the result is wrong), more than one fused op, bf16, shapes the tiles do not divide (no
padding)."""

from __future__ import annotations

from dataclasses import dataclass

from pipelines import llvmgpu_mma_sync_padded as padded
from pipelines.llvmgpu_common import MAX_ACCUMULATOR_REGISTERS
from pipelines.transform_text import ANY, apply_patterns, match_func

WARP = 32  # threads per warp on cuda
MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync.m16n8k16
REGISTERS_PER_SM = 65536  # 32-bit registers of one SM (sm_80 and sm_90 alike)
OTHER_REGISTERS = 64  # a thread's registers besides its accumulators, about
STRATEGY = "mma_sync"  # the prefix of each kernel's named sequences
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
    # An elementwise op after the contraction in the same dispatch (a bias, an activation, the
    # narrowing to f16): the workgroup's result tile then passes through shared memory, where
    # every thread applies the op to its share and stores it.
    epilogue: bool = False
    # A batch dim before M and N (a batch matmul): each workgroup takes one batch entry's tile,
    # the unit dim dropped from the vectors before the MMA conversion.
    batch: bool = False
    # M not a multiple of block_m: the last row of workgroup tiles is padded with zero rows
    # (pipelines.llvmgpu_mma_sync_padded; with an epilogue, no batch dim).
    padded: bool = False

    @property
    def threads(self) -> int:
        return WARP * self.warps_m * self.warps_n

    def shared_bytes(self) -> int:
        """Shared memory of one workgroup: the f16 A and B tiles, `stages` deep, and with an
        epilogue the f32 result tile; rows padded."""
        pad = PAD_BITS // 16
        operands = 2 * (self.block_m * (self.block_k + pad) + self.block_k * (self.block_n + pad)) * self.stages
        return operands + (4 * self.block_m * (self.block_n + PAD_BITS // 32) if self.epilogue else 0)

    def rules(self, m: int, n: int, k: int, shared_limit: int, max_threads: int) -> list:
        """What the kernel needs to lay out on an M x N x K contraction, and to compile and not
        spill. The one home of these quantities: with ints in the fields, plain truths (`fits`);
        with Z3 terms, the conditions of the pipeline's problem (pipelines.llvmgpu_mma_sync)."""
        threads = self.threads
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        return [
            # Rows are padded where `padded` says so (the last tile's); N and K never are.
            *([] if self.padded else [m % bm == 0]), n % bn == 0, k % bk == 0,
            # Each warp holds whole MMAs: 16 rows, and 16 columns (two n8 tiles per ldmatrix.x4).
            bm % (self.warps_m * MMA_M) == 0, bn % (self.warps_n * 2 * MMA_N) == 0, bk % MMA_K == 0,
            # Each thread copies whole 16-byte vectors of the A and B tiles.
            (bm * bk) % (8 * threads) == 0, (bk * bn) % (8 * threads) == 0,
            threads <= max_threads,
            self.shared_bytes() <= shared_limit,
            bm * bn <= MAX_ACCUMULATOR_REGISTERS * threads,  # f32 accumulators per thread
            # Registers: the accumulators and about 64 more a thread (fragments, addresses) for
            # every thread of the workgroup in one SM's 65,536. Over it, ptxas caps each thread
            # and spills: 256x256 on 16 warps (128 accumulators each) ran 20.99 ms on 4096^3,
            # 0.45 ms on 8 warps of 128x256.
            bm * bn + OTHER_REGISTERS * threads <= REGISTERS_PER_SM,
            # The pipelined loop's prologue loads `stages - 1` K steps unguarded: more than the
            # loop has read past K, a wrong or non-finite result (25088x256x64 with an epilogue
            # on the H100: 4 and 5 stages of k32, two steps, were 0.2-0.3 off or inf; 3 right;
            # 6272x512x128, four steps, right with 5).
            (self.stages - 1) * bk <= k,
            # Padded, each thread copies two rows of A or more: with one (64x32 or 32x32 on 8 or 4
            # warps) iree-compile 3.13 crashed on every shape tried.
            *([(bm * bk) % (16 * threads) == 0] if self.padded else []),
        ]

    def fits(self, m: int, n: int, k: int, shared_limit: int, max_threads: int = 1024) -> bool:
        """Whether the kernel lays out on an M x N x K contraction (every one of `rules`)."""
        return all(self.rules(m, n, k, shared_limit, max_threads))

    @property
    def name(self) -> str:
        """The kernel's strategy symbol: several kernels can sit in one spec (a model's)."""
        return (f"{STRATEGY}_{self.block_m}x{self.block_n}x{self.block_k}_w{self.warps_m}x{self.warps_n}"
                f"_s{self.stages}" + ("_epilogue" if self.epilogue else "") + ("_batch" if self.batch else "")
                + ("_padded" if self.padded else ""))

    @property
    def lead(self) -> list[int]:
        """The tile of the dims before M (the batch entry, one per workgroup)."""
        return [1] if self.batch else []

    def tile_sizes(self) -> list[int]:
        """What the root op's lowering_config carries: the strategy finds the op by it."""
        return [*self.lead, self.block_m, self.block_n, self.block_k]

    def label(self) -> str:
        return (f"wg {self.block_m}x{self.block_n} k{self.block_k}, warps {self.warps_m}x{self.warps_n}, "
                f"{self.stages} stages" + (", epilogue" if self.epilogue else "") + (", batch" if self.batch else "")
                + (", rows padded" if self.padded else ""))


def _cse(target: str) -> str:
    return f"    transform.apply_cse to {target} : !transform.any_op\n"


def _sequence(name: str, body: str) -> str:
    return (f"  transform.named_sequence @{name}(%root: !transform.any_op {{transform.readonly}}) {{\n"
            f"{body}    transform.yield\n  }}\n")



def _tile_and_promote(t: MmaSyncTiles) -> str:
    zeros = "0, " * len(t.lead)
    warp_tile = f"[{zeros}{t.block_m // t.warps_m}, {t.block_n // t.warps_n}]"
    warps = "(mapping = [#gpu.warp<y>, #gpu.warp<x>])"
    # The fill is tiled to warps like the contraction: after the accumulators are hoisted, each
    # thread's read of its accumulator follows its own write of the zeros, so the read folds to
    # the zeros and the write is dead (erase_dead_alloc_and_stores). Spread over threads instead,
    # the zeros went to C in global memory and were read back before the K loop (128 MB more
    # DRAM traffic on 4096^3, ncu). The epilogue's elementwise op is spread over every thread,
    # rows of 4 elements each.
    across = min(t.block_n // 4, t.threads)
    fill_threads = f"[{zeros}{t.threads // across}, {across}]"
    lead = "".join(f"{size}, " for size in t.lead)
    block_dims = "#gpu.block<z>, " if t.batch else ""
    blocks = f"tile_sizes [{lead}{t.block_m}, {t.block_n}] (mapping = [{block_dims}#gpu.block<y>, #gpu.block<x>])"
    fuse = ": (!transform.any_op, !transform.any_op) -> (!transform.any_op, !transform.any_op)\n"
    threads = "(mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>])"
    par, red = "#linalg.iterator_type<parallel>", "#linalg.iterator_type<reduction>"
    parallel = ", ".join([par] * (2 + len(t.lead)))
    if t.epilogue:
        # The elementwise op is tiled to workgroups and the contraction and fill fused into it;
        # the compiler gave both ops the lowering_config, so they are told apart by their loops.
        grid = (
            f'    %mm = transform.structured.match ops{{["linalg.generic"]}} attributes {{iterator_types = [{parallel}, {red}]}} '
            f"in %root : {ANY} -> !transform.any_op\n"
            f'    %fill = transform.structured.match ops{{["linalg.fill"]}} in %root : {ANY} -> !transform.any_op\n'
            f'    %ew = transform.structured.match ops{{["linalg.generic"]}} attributes {{iterator_types = [{parallel}]}} '
            f"in %root : {ANY} -> !transform.any_op\n"
            f"    %ew_tile, %grid = transform.structured.tile_using_forall %ew {blocks} : {ANY} -> (!transform.any_op, !transform.any_op)\n"
            f"    transform.iree.populate_workgroup_count_region_using_num_threads_slice %grid : {ANY} -> ()\n"
            f"    %tiled, %grid2 = transform.structured.fuse_into_containing_op %mm into %grid {fuse}"
            f"    %fill_tile, %grid3 = transform.structured.fuse_into_containing_op %fill into %grid2 {fuse}"
            f"    %ew_threads, %f3 = transform.structured.tile_using_forall %ew_tile num_threads {fill_threads} {threads} "
            f": {ANY} -> (!transform.any_op, !transform.any_op)\n")
    else:
        ops = '"linalg.generic", "linalg.matmul", "linalg.batch_matmul"'
        grid = (
            f"    %mm = transform.structured.match ops{{[{ops}]}} attributes {{lowering_config = {lowering_config(t)}}} in %root "
            f": {ANY} -> !transform.any_op\n"
            f'    %fill = transform.structured.match ops{{["linalg.fill"]}} in %root : {ANY} -> !transform.any_op\n'
            f"    %tiled, %grid = transform.structured.tile_using_forall %mm {blocks} : {ANY} -> (!transform.any_op, !transform.any_op)\n"
            f"    transform.iree.populate_workgroup_count_region_using_num_threads_slice %grid : {ANY} -> ()\n"
            f"    %fill_tile, %grid2 = transform.structured.fuse_into_containing_op %fill into %grid {fuse}")
    return (
        grid
        + f"    %step, %loop = transform.structured.tile_using_for %tiled tile_sizes [{zeros}0, 0, {t.block_k}] "
        f": {ANY} -> (!transform.any_op, !transform.any_op)\n"
        f"    %promoted, %a, %b = transform.iree.promote_operands %step [0, 1] "
        f": {ANY} -> (!transform.any_op, !transform.any_op, !transform.any_op)\n"
        f"    %warp_mm, %f1 = transform.structured.tile_using_forall %promoted tile_sizes {warp_tile} {warps} "
        f": {ANY} -> (!transform.any_op, !transform.any_op)\n"
        f"    %warp_fill, %f2 = transform.structured.tile_using_forall %fill_tile tile_sizes {warp_tile} {warps} "
        f": {ANY} -> (!transform.any_op, !transform.any_op)\n")


THREAD_LOOPS = "mapping = [#gpu.thread<linear_dim_1>, #gpu.thread<linear_dim_0>]"


def _epilogue_loads(loops: str = THREAD_LOOPS) -> str:
    """The thread-level loops (the fill's, the epilogue's) read and write with plain loads and
    stores, unrolled. Left as transfer ops, the epilogue's read shares its padding constant with
    the accumulators' reads, and the MMA conversion then takes the elementwise op into its
    slice and fails ("unhandled vector to mma type: arith.truncf"). `loops`: the attribute the
    loops are matched by (the padded kernel's epilogue alone: its A copies stay transfers, which
    become cp.async; unrolled with the rest, they became plain masked loads and stores)."""
    return (match_func("%f")
            + f'    %loops = transform.structured.match ops{{["scf.forall"]}} attributes {{{loops}}} '
            f"in %f : {ANY} -> !transform.any_op\n"
            + apply_patterns("%loops", "vector.transfer_to_scf full_unroll = true")
            + apply_patterns("%loops", "vector.lower_transfer max_transfer_rank = 1"))


def _vectorize_and_bufferize(canonicalize_first: bool = True) -> str:
    """In a phase of its own: vectorizing erases the ops the tiling handles point to, and a
    handle left pointing at an erased op crashed the interpreter's invalidation check (3 of 12
    kernels compiled, iree-compile 3.13). Not canonicalized first in the padded kernel (its
    masked vectorization ran already, and canonicalization before the masks are lowered
    breaks them)."""
    first = (apply_patterns("%func", "linalg.tiling_canonicalization", "scf.for_loop_canonicalization", "canonicalization")
             if canonicalize_first else "")
    return (
        match_func("%func")
        + first
        + f"    %vec = transform.structured.vectorize_children_and_apply_patterns %func : {ANY} -> !transform.any_op\n"
        + apply_patterns("%vec", "vector.cast_away_vector_leading_one_dim", "vector.fold_arith_extension", "canonicalization")
        + _cse("%vec")
        + f"    transform.iree.eliminate_empty_tensors %root : {ANY} -> ()\n"
        f"    %buf = transform.iree.bufferize <{{target_gpu}}> %vec : {ANY} -> (!transform.any_op)\n")


def _mark_copies() -> str:
    """After bufferization the copies left are those into shared memory (the A and B tiles,
    marked by the promotion) and any other copy bufferization leaves, which nothing marks:
    unmarked, a copy is not distributed and every thread copies all of it (seen in the PTX when
    the accumulator was promoted: 128 threads each storing the 64 KB tile). Every copy is marked
    so that all are spread over the workgroup's threads (the self-copies bufferization leaves
    fold away first)."""
    return (match_func("%f")
            + apply_patterns("%f", "scf.for_loop_canonicalization", "canonicalization")
            + _cse("%f")
            + apply_patterns("%f", "canonicalization")
            + _cse("%f")
            + f'    %copies = transform.structured.match ops{{["linalg.generic"]}} in %f : {ANY} -> !transform.any_op\n'
            '    %marker = transform.param.constant "copy_to_workgroup_memory" -> !transform.any_param\n'
            '    transform.annotate %copies "__internal_linalg_transform__" = %marker : !transform.any_op, !transform.any_param\n')


def _map_to_threads(t: MmaSyncTiles, canonicalize_first: bool = False) -> str:
    """Blocks and threads (a barrier after each mapped loop: the padded kernel's masked A copies
    raced without one), then the shared-memory copies spread over the threads."""
    return (match_func("%f")
            + (apply_patterns("%f", "canonicalization") if canonicalize_first else "")
            + f"    transform.iree.forall_to_workgroup %f : {ANY} -> ()\n"
            f"    transform.iree.map_nested_forall_to_gpu_threads %f workgroup_dims = [{WARP * t.warps_n}, {t.warps_m}, 1] "
            f": {ANY} -> ()\n"
            f"    transform.iree.gpu_distribute_shared_memory_copy %f : {ANY} -> ()\n"
            + apply_patterns("%f", "canonicalization"))


def _drop_barriers() -> str:
    return match_func("%f") + f"    %g = transform.iree.eliminate_gpu_barriers %f : {ANY} -> !transform.any_op\n"


def _hoist_accumulators(t: MmaSyncTiles) -> str:
    return (match_func("%f")
            + f"    transform.iree.hoist_static_alloc %f : {ANY} -> ()\n"
            + apply_patterns("%f", "memref.fold_memref_alias_ops")
            + apply_patterns("%f", "iree.prepare_vector_to_mma")
            + apply_patterns("%f", "iree.unroll_vectors_gpu_mma_sync")
            + f"    transform.include @{t.name}_sync_loops failures(propagate) (%f) : {ANY} -> ()\n"
            + apply_patterns("%f", "memref.fold_memref_alias_ops", "canonicalization")
            + _cse("%f")
            + f"    %h = transform.structured.hoist_redundant_vector_transfers %f : {ANY} -> !transform.any_op\n"
            f"    transform.memref.erase_dead_alloc_and_stores %h : {ANY} -> ()\n")


def _to_mma() -> str:
    return (match_func("%f")
            + f"    transform.iree.vector.vector_to_mma_conversion %f <{{use_mma_sync}}> : {ANY} -> ()\n"
            f"    %g = transform.iree.eliminate_gpu_barriers %f : {ANY} -> !transform.any_op\n")


def _multibuffer(t: MmaSyncTiles) -> str:
    """The A and B tiles `stages` deep. A phase of its own: the padding after it replaces the
    allocations the result handle points to, and a later op checking handles then read the
    erased ops (iree-compile crashed on 6 of 10 runs before)."""
    body = match_func("%f") + apply_patterns("%f", "memref.fold_memref_alias_ops")
    if t.stages > 1:
        body += (f'    %allocs = transform.structured.match ops{{["memref.alloc"]}} in %f : {ANY} -> !transform.op<"memref.alloc">\n'
                 f"    %mb = transform.memref.multibuffer %allocs <{{factor = {t.stages} : i64, skip_analysis}}> "
                 f': (!transform.op<"memref.alloc">) -> !transform.any_op\n')
    return body


def _pipeline(t: MmaSyncTiles) -> str:
    """Pad every shared tile's rows, then (with more than one stage) turn the copies into
    cp.async groups and software-pipeline the K loop."""
    pipelined = ""
    # The tensor-core schedule takes one copy group a stage; the padded kernel's A and B are two
    # (pipelines.llvmgpu_mma_sync_padded), which the simple schedule takes.
    schedule = "" if t.padded else ", use_mma_sync"
    if t.stages > 1:
        pipelined = (f"    transform.iree.create_async_groups %f <{{use_mma_sync}}> : {ANY} -> ()\n"
                     + _cse("%f")
                     + f'    %for = transform.structured.match ops{{["scf.for"]}} in %f : {ANY} -> !transform.any_op\n'
                     f"    %piped = transform.iree.pipeline_shared_memory_copies %for <{{depth = {t.stages} : i64{schedule}}}> "
                     f": {ANY} -> !transform.any_op\n")
    return (match_func("%f")
            + f"    transform.iree.reduce_shared_memory_bank_conflicts %f <{{padding_size_bits = {PAD_BITS} : i64}}> : {ANY} -> ()\n"
            + apply_patterns("%f", "vector.transfer_to_scf full_unroll = true")
            + pipelined
            + apply_patterns("%f", "vector.lower_masks")
            + apply_patterns("%f", "vector.materialize_masks")
            + apply_patterns("%f", "linalg.tiling_canonicalization", "memref.fold_memref_alias_ops", "canonicalization")
            + "    transform.iree.apply_licm %f : !transform.any_op\n"
            + _cse("%f"))


def strategy(t: MmaSyncTiles) -> str:
    """The named sequences of one kernel (@<t.name> and its phases), to sit in a transform
    library beside the @__kernel_config whose compilation_info names it."""
    if t.padded:
        phases = [("tile", padded.tile_and_pad(t)), ("vectorize", _vectorize_and_bufferize(canonicalize_first=False)),
                  ("mark", _mark_copies()), ("epilogue", _epilogue_loads(padded.EPILOGUE_MARK)),
                  ("threads", _map_to_threads(t, canonicalize_first=True))]
    else:
        phases = [("tile", _tile_and_promote(t)), ("vectorize", _vectorize_and_bufferize()), ("mark", _mark_copies())]
        if t.epilogue:
            phases.append(("epilogue", _epilogue_loads()))
        phases.append(("threads", _map_to_threads(t)))
    phases += [("barriers", _drop_barriers()), ("hoist", _hoist_accumulators(t)), ("mma", _to_mma()),
               ("buffers", _multibuffer(t)), ("pipeline", _pipeline(t))]
    entry = "".join(f"    transform.include @{t.name}_{name} failures(propagate) (%root) : {ANY} -> ()\n"
                    for name, _ in phases)
    sync = (f"  transform.named_sequence @{t.name}_sync_loops(%f: !transform.any_op {{transform.readonly}}) {{\n"
            f'    %for = transform.structured.match ops{{["scf.for"]}} in %f : {ANY} -> !transform.any_op\n'
            f"    transform.iree.synchronize_loop %for : {ANY} -> ()\n    transform.yield\n  }}\n")
    return _sequence(t.name, entry) + "".join(_sequence(f"{t.name}_{n}", b) for n, b in phases) + sync


def lowering_config(t: MmaSyncTiles) -> str:
    return f"#iree_codegen.lowering_config<tile_sizes = [{t.tile_sizes()}]>"


def translation_info(t: MmaSyncTiles) -> str:
    return (f"#iree_codegen.translation_info<pipeline = #iree_codegen.transform_dialect_codegen "
            f"codegen_spec = @{t.name}>")


def compilation_info(t: MmaSyncTiles) -> str:
    """What goes on the root op: the compiler moves the translation_info to the dispatch's
    function (and the lowering_config stays on the op, where the strategy finds it)."""
    return f"#iree_codegen.compilation_info<lowering_config = {lowering_config(t)}, translation_info = {translation_info(t)}>"


def library_for_every_contraction(t: MmaSyncTiles) -> str:
    """A whole codegen-stage library that sends every dispatch's contraction (a linalg.generic of
    three loops) down the kernel: for a program of one matmul (benchmarks/gpu_mma_sync.py), not
    for models (the tuner's specs match each dispatch by its own matcher)."""
    return ("module attributes {transform.with_named_sequence} {\n" + strategy(t)
            + "  transform.named_sequence @match_generic(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {\n"
            '    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op\n'
            "    %m = transform.match.structured failures(propagate) %op : (!transform.any_op) -> (!transform.any_op) {\n"
            "    ^bb1(%s: !transform.any_op):\n"
            "      %r = transform.match.structured.rank %s : (!transform.any_op) -> !transform.param<i64>\n"
            f"      %c3 = transform.param.constant {3 + len(t.lead)} : i64 -> !transform.param<i64>\n"
            "      transform.match.param.cmpi eq %r, %c3 : !transform.param<i64>\n"
            "      transform.match.structured.yield %s : !transform.any_op\n    }\n"
            "    transform.yield %op : !transform.any_op\n  }\n"
            "  transform.named_sequence @annotate(%op: !transform.any_op {transform.readonly}) {\n"
            f"    %ci = transform.param.constant {compilation_info(t)} -> !transform.any_param\n"
            '    transform.annotate %op "compilation_info" = %ci : !transform.any_op, !transform.any_param\n'
            "    transform.yield\n  }\n"
            "  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op "
            "attributes {iree_codegen.tuning_spec_entrypoint} {\n"
            "    %r = transform.foreach_match in %variant @match_generic -> @annotate : (!transform.any_op) -> !transform.any_op\n"
            "    transform.yield %r : !transform.any_op\n  }\n}\n")
