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
f16 -> f32 `C = A B` with static M, N, K that the tiles divide. What it does not take yet: batch
dims, B stored N x K (it compiles, but the result is wrong), fused consumers, bf16, shapes the
tiles do not divide (no padding)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmgpu_common import MAX_ACCUMULATOR_REGISTERS, shared_memory_bytes

if TYPE_CHECKING:
    from iree.compiler import ir

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

    @property
    def name(self) -> str:
        """The kernel's strategy symbol: several kernels can sit in one spec (a model's)."""
        return (f"{STRATEGY}_{self.block_m}x{self.block_n}x{self.block_k}_w{self.warps_m}x{self.warps_n}"
                f"_s{self.stages}")

    def tile_sizes(self) -> list[int]:
        """What the root op's lowering_config carries: the strategy finds the op by it."""
        return [self.block_m, self.block_n, self.block_k]

    def label(self) -> str:
        return (f"wg {self.block_m}x{self.block_n} k{self.block_k}, warps {self.warps_m}x{self.warps_n}, "
                f"{self.stages} stages")


def _apply(target: str, *patterns: str) -> str:
    body = "\n".join(f"      transform.apply_patterns.{p}" for p in patterns)
    return f"    transform.apply_patterns to {target} {{\n{body}\n    }} : !transform.any_op\n"


def _func(name: str) -> str:
    return f'    {name} = transform.structured.match ops{{["func.func"]}} in %root : (!transform.any_op) -> !transform.any_op\n'


def _cse(target: str) -> str:
    return f"    transform.apply_cse to {target} : !transform.any_op\n"


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
        f"    %mm = transform.structured.match ops{{[\"linalg.generic\", \"linalg.matmul\"]}} attributes {{lowering_config = {lowering_config(t)}}} in %root "
        f": {ANY} -> !transform.any_op\n"
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
    return (_func("%f")
            + _apply("%f", "scf.for_loop_canonicalization", "canonicalization")
            + _cse("%f")
            + _apply("%f", "canonicalization")
            + _cse("%f")
            + f'    %copies = transform.structured.match ops{{["linalg.generic"]}} in %f : {ANY} -> !transform.any_op\n'
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


def _hoist_accumulators(t: MmaSyncTiles) -> str:
    return (_func("%f")
            + f"    transform.iree.hoist_static_alloc %f : {ANY} -> ()\n"
            + _apply("%f", "memref.fold_memref_alias_ops")
            + _apply("%f", "iree.prepare_vector_to_mma")
            + _apply("%f", "iree.unroll_vectors_gpu_mma_sync")
            + f"    transform.include @{t.name}_sync_loops failures(propagate) (%f) : {ANY} -> ()\n"
            + _apply("%f", "memref.fold_memref_alias_ops", "canonicalization")
            + _cse("%f")
            + f"    %h = transform.structured.hoist_redundant_vector_transfers %f : {ANY} -> !transform.any_op\n"
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
                     + _cse("%f")
                     + f'    %for = transform.structured.match ops{{["scf.for"]}} in %f : {ANY} -> !transform.any_op\n'
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
            + _cse("%f"))


def strategy(t: MmaSyncTiles) -> str:
    """The named sequences of one kernel (@<t.name> and its phases), to sit in a transform
    library beside the @__kernel_config whose compilation_info names it."""
    phases = [("tile", _tile_and_promote(t)), ("vectorize", _vectorize_and_bufferize()), ("mark", _mark_copies()), ("threads", _map_to_threads(t)), ("barriers", _drop_barriers()),
              ("hoist", _hoist_accumulators(t)), ("mma", _to_mma()), ("buffers", _multibuffer(t)),
              ("pipeline", _pipeline(t))]
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
    """A whole codegen-stage library that sends every dispatch whose root is a linalg.generic
    down the kernel: for a program of one matmul (benchmarks/gpu_mma_sync.py), not for models
    (the tuner's specs match each dispatch by its own matcher)."""
    return ("module attributes {transform.with_named_sequence} {\n" + strategy(t)
            + "  transform.named_sequence @match_generic(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {\n"
            '    transform.match.operation_name %op ["linalg.generic"] : !transform.any_op\n'
            "    transform.yield %op : !transform.any_op\n  }\n"
            "  transform.named_sequence @annotate(%op: !transform.any_op {transform.readonly}) {\n"
            f"    %ci = transform.param.constant {compilation_info(t)} -> !transform.any_param\n"
            '    transform.annotate %op "compilation_info" = %ci : !transform.any_op, !transform.any_param\n'
            "    transform.yield\n  }\n"
            "  transform.named_sequence @__kernel_config(%variant: !transform.any_op {transform.consumed}) -> !transform.any_op "
            "attributes {iree_codegen.tuning_spec_entrypoint} {\n"
            "    %r = transform.foreach_match in %variant @match_generic -> @annotate : (!transform.any_op) -> !transform.any_op\n"
            "    transform.yield %r : !transform.any_op\n  }\n}\n")


class LLVMGPUMmaSync(Pipeline):
    """Knobs: `block_m`, `block_n` (the workgroup tile), `block_k` (the K step), `warps_m`,
    `warps_n` (the warp grid; each warp holds a (block_m/warps_m) x (block_n/warps_n) tile of
    m16n8k16 MMAs) and `stages` (A and B tiles in flight; 1: no cp.async, no pipelining).

    Picked by name (`--pipeline llvmgpu_mma_sync`): TileAndFuse stays the one that tunes the
    compiler's own choice. It takes what the strategy does: cuda, one M, N and K dim, no batch,
    f16 x f16 -> f32, A stored M x K, B stored K x N, C M x N, nothing fused with it (a bias or an
    activation in the dispatch), the tiles dividing every dim (it does not pad). B stored N x K (a linear layer's weight) compiles but computes a wrong result,
    so it is declined."""

    name = "llvmgpu_mma_sync"
    aliases = ("mma_sync",)

    def supports(self, dispatch: Dispatch) -> bool:
        if (dispatch.target.backend != "cuda" or dispatch.kind != DispatchKind.CONTRACTION or dispatch.batch_dims
                or (len(dispatch.m_dims), len(dispatch.n_dims), len(dispatch.k_dims)) != (1, 1, 1)
                or (dispatch.lhs_type, dispatch.rhs_type, dispatch.out_type) != ("f16", "f16", "f32")
                or len(dispatch.operand_dims) != 3 or dispatch.other_ops):
            return False
        m, n, k = dispatch.m_dims[0], dispatch.n_dims[0], dispatch.k_dims[0]
        lhs, rhs, out = dispatch.operand_dims
        return lhs == (m, k) and rhs == (k, n) and out == (m, n)

    def declines(self, dispatch: Dispatch) -> str | None:
        if self.supports(dispatch) or dispatch.target.backend != "cuda" or dispatch.kind != DispatchKind.CONTRACTION:
            return None
        if dispatch.other_ops:
            return (f"the dispatch fuses {', '.join(dispatch.other_ops)} with the contraction: the mma.sync "
                    f"kernel tiles the contraction alone")
        if len(dispatch.operand_dims) == 3 and dispatch.k_dims and dispatch.n_dims \
                and dispatch.operand_dims[1] == (dispatch.n_dims[0], dispatch.k_dims[0]):
            return ("B stored N x K: the mma.sync kernel compiles for it but computes a wrong result "
                    "(error 1.0 of max|C|, 2048x5120x5120 on the H100), so it is not offered")
        return "the mma.sync kernel takes only f16 x f16 -> f32 C = A B with one M, N and K dim and no batch"

    def _mnk(self, dispatch: Dispatch) -> tuple[int, int, int]:
        b = dispatch.loop_bounds
        return b[dispatch.m_dims[0]], b[dispatch.n_dims[0]], b[dispatch.k_dims[0]]

    def build_problem(self, dispatch: Dispatch) -> Problem:
        m, n, k = self._mnk(dispatch)
        p = Problem()
        bm = p.add_knob(IntKnob.of("block_m", [128, 256, 64])).var
        bn = p.add_knob(IntKnob.of("block_n", [256, 128, 64])).var
        bk = p.add_knob(IntKnob.of("block_k", [32, 64, 16])).var
        wm = p.add_knob(IntKnob.of("warps_m", [2, 4, 1])).var
        wn = p.add_knob(IntKnob.of("warps_n", [4, 2, 1])).var
        stages = p.add_knob(IntKnob.of("stages", [3, 4, 2, 5, 1])).var
        threads = WARP * wm * wn
        pad = PAD_BITS // 16
        p.require(
            tiling.divides(bm, m), tiling.divides(bn, n), tiling.divides(bk, k),
            # Each warp holds whole MMAs: 16 rows, and 16 columns (two n8 tiles per ldmatrix.x4).
            tiling.divides(wm * MMA_M, bm), tiling.divides(wn * 2 * MMA_N, bn), tiling.divides(MMA_K, bk),
            # Each thread copies whole 16-byte vectors of the A and B tiles.
            tiling.divides(8 * threads, bm * bk), tiling.divides(8 * threads, bk * bn),
            tiling.within(threads, dispatch.target.max_threads_per_workgroup or 1024),
            tiling.within(2 * (bm * (bk + pad) + bk * (bn + pad)) * stages, shared_memory_bytes(dispatch)),
            # f32 accumulators per thread.
            tiling.within(bm * bn, MAX_ACCUMULATOR_REGISTERS * threads),
            # Registers: the accumulators and about 64 more a thread (fragments, addresses) for
            # every thread of the workgroup in one SM's 65,536. Over it, ptxas caps each thread
            # and spills: 256x256 on 16 warps (128 accumulators each) ran 20.99 ms on 4096^3,
            # 0.45 ms on 8 warps of 128x256.
            tiling.within((bm * bn / threads + OTHER_REGISTERS) * threads, REGISTERS_PER_SM),
        )
        # Preferences from issue 38's shapes (4096^3, Llama-7B's MLP; BENCHMARKS.md): a 128x256
        # tile on 8 warps, 3-4 stages, a K step of 32; a grid that fills the H100's 132 SMs.
        p.prefer("fills_the_gpu", (m / bm) * (n / bn) >= 132)
        p.prefer("wide_tile", bm * bn >= 128 * 256)
        p.prefer("eight_warps", wm * wn == 8)
        p.prefer("pipelined", stages >= 3)
        p.prefer("k_step_32", bk == 32)
        return p

    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir

        t = MmaSyncTiles(*(int(s[k]) for k in ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages")))
        with ctx:  # printed by the compiler's own printer, as the read-back will print them
            info = ir.Attribute.parse(compilation_info(t))
            lowering, translation = ir.Attribute.parse(lowering_config(t)), ir.Attribute.parse(translation_info(t))
        return Config(knobs=dict(s), compilation_info=str(info), summary=f"mma.sync {t.label()}",
                      expect_lowering_config=str(lowering), expect_translation_info=str(translation),
                      codegen_spec=True, codegen_sequences=strategy(t))
