"""Pipeline `llvmgpu_mma_sync` (cuda, by name): the space of the mma.sync kernel that
pipelines/llvmgpu_mma_sync_strategy.py writes as a transform-dialect codegen strategy (workgroup
tile, K step, warp grid, stages), under Z3 rules that keep every kernel compiling and unspilled,
and each config as a compilation_info naming its kernel, whose named sequences the spec carries
(Config.codegen_sequences)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from constraints import IntKnob, Problem
from pipelines.base import Config, KnobValue, Pipeline
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.parts import TransformSequences
from pipelines.llvmgpu_common import shared_memory_bytes
from pipelines.model_flags import KEEP_TRANSPOSES
from pipelines.llvmgpu_mma_sync_strategy import (MmaSyncTiles, compilation_info, lowering_config, strategy,
                                                 translation_info)

if TYPE_CHECKING:
    from iree.compiler import ir


# What may follow the contraction in its dispatch: nothing, or one elementwise linalg.generic
# (the strategy tiles it and finds it by its two parallel loops; another kind of op fails the
# compile, which is a candidate's failure, not the run's).
EPILOGUES = ((), ("linalg.generic",))
# Each knob's values, in the order the preference search meets them.
# M tiles of 32 take ResNet's 14x14 stage (M = 8 x 196 = 1568, 49 tiles of 32), which no larger
# power of two divides.
BLOCK_M, BLOCK_N, BLOCK_K = (128, 256, 64, 32), (256, 128, 64), (32, 64, 16)


class LLVMGPUMmaSync(Pipeline):
    """Knobs: `block_m`, `block_n` (the workgroup tile), `block_k` (the K step), `warps_m`,
    `warps_n` (the warp grid; each warp holds a (block_m/warps_m) x (block_n/warps_n) tile of
    m16n8k16 MMAs) and `stages` (A and B tiles in flight; 1: no cp.async, no pipelining).

    Picked by name (`--pipeline llvmgpu_mma_sync`; tune-model on cuda names it by default):
    TileAndFuse stays the one that tunes the compiler's own choice. It takes what the strategy does: cuda, one M, N and K dim and at
    most one batch dim (outermost in A, B and C; one batch entry a workgroup), f16 x f16 -> f32,
    A stored M x K, B stored K x N, C M x N, at most one elementwise op after it
    in the dispatch (a bias, an activation, the narrowing to f16), the tiles dividing N and K, and
    M too unless that op follows and there is no batch dim (then the last row of tiles is padded:
    pipelines.llvmgpu_mma_sync_padded). B stored N x K (a linear layer's weight) compiles but computes a wrong result,
    so it is declined; the flag stage then tries the model with KEEP_TRANSPOSES (`flags_to_take`)."""

    name = "llvmgpu_mma_sync"
    aliases = ("mma_sync",)
    matches_ops_after = True  # each kernel is written for what follows its matmul (EPILOGUES)

    def supports(self, dispatch: Dispatch) -> bool:
        if (not self._its_types(dispatch) or len(dispatch.batch_dims) > 1
                or (len(dispatch.m_dims), len(dispatch.n_dims), len(dispatch.k_dims)) != (1, 1, 1)):
            return False
        b, m, n, k = dispatch.batch_dims, dispatch.m_dims[0], dispatch.n_dims[0], dispatch.k_dims[0]
        lhs, rhs, out = dispatch.operand_dims
        return (lhs == (*b, m, k) and rhs == (*b, k, n) and out == (*b, m, n)
                and self._tiles_divide(dispatch, rows=not self._pads_rows(dispatch)))

    @staticmethod
    def _pads_rows(dispatch: Dispatch) -> bool:
        """Whether the kernel pads the dispatch's rows (pipelines.llvmgpu_mma_sync_padded): M is
        no multiple of the smallest tile, an elementwise op follows the contraction and there
        is no batch dim (ViT's 1576 rows, Whisper's 1500)."""
        m = math.prod(dispatch.sizes(dispatch.m_dims))
        return m % min(BLOCK_M) != 0 and dispatch.other_ops == EPILOGUES[1] and not dispatch.batch_dims

    @staticmethod
    def _its_types(dispatch: Dispatch) -> bool:
        """A cuda contraction of f16 x f16 -> f32 with three operands and at most one elementwise
        op after it: what the kernel needs of any dispatch, whatever its dims."""
        return (dispatch.target.backend == "cuda" and dispatch.kind == DispatchKind.CONTRACTION
                and (dispatch.lhs_type, dispatch.rhs_type, dispatch.out_type) == ("f16", "f16", "f32")
                and len(dispatch.operand_dims) == 3 and dispatch.other_ops in EPILOGUES)

    @staticmethod
    def _tiles_divide(dispatch: Dispatch, rows: bool = True) -> bool:
        """Whether the smallest tiles divide N and K, and M where `rows` (the padded kernel takes
        any M), each the product of its dims."""
        sizes = [math.prod(dispatch.sizes(dims)) for dims in (dispatch.m_dims, dispatch.n_dims, dispatch.k_dims)]
        return all(size > 0 and (size % min(tiles) == 0 or (i == 0 and not rows))
                   for i, (size, tiles) in enumerate(zip(sizes, (BLOCK_M, BLOCK_N, BLOCK_K))))

    taking_flags = (KEEP_TRANSPOSES,)

    @staticmethod
    def _b_stored_k_by_n(dispatch: Dispatch) -> Dispatch | None:
        """The dispatch as it would be with its B stored K x N, where B is stored N x K (after
        any batch dims); else None."""
        if len(dispatch.operand_dims) != 3 or not dispatch.n_dims or not dispatch.k_dims:
            return None
        lhs, rhs, out = dispatch.operand_dims
        n, k = dispatch.n_dims[0], dispatch.k_dims[0]
        return replace(dispatch, operand_dims=(lhs, (*rhs[:-2], k, n), out)) if rhs[-2:] == (n, k) else None

    @staticmethod
    def _linear_around_transposes(dispatch: Dispatch) -> bool:
        """Whether the dispatch is a linear layer with a transpose folded into it: no batch dim,
        one K dim, and several M or N dims (the head-split projections of an exported attention,
        C stored (heads, tokens, head dim) from A (tokens, K) and B (K, heads, head dim): the heads
        are an N dim; ConvNeXt's second MLP matmul writing NCHW, C (images, N, pixels) from A
        (images, pixels, K): the images are an M dim), whose M, N and K as one dim each the
        smallest tiles divide. With the transposes kept where the program has them, the compiler
        forms the 2-D matmul and leaves the transpose to the op after it (the rotary embedding's,
        the residual add's): seen in tests/test_mma_sync.py on both forms."""
        return (LLVMGPUMmaSync._its_types(dispatch) and not dispatch.batch_dims and len(dispatch.k_dims) == 1
                and bool(dispatch.m_dims and dispatch.n_dims) and (len(dispatch.m_dims) > 1 or len(dispatch.n_dims) > 1)
                and LLVMGPUMmaSync._tiles_divide(dispatch))

    def flags_to_take(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """With transposes kept where the program has them (KEEP_TRANSPOSES): B stored N x K, all
        else as the kernel takes it (the compiler stores a constant B K x N once, at compile time:
        ResNet-50's channels-last 1x1 convolutions, the filter [F, C] becomes [C, F]); and a
        linear layer with a transpose folded into it (`_linear_around_transposes`), which becomes
        a 2-D matmul."""
        if self.supports(dispatch):
            return ()
        flipped = self._b_stored_k_by_n(dispatch)
        if (flipped is not None and self.supports(flipped)) or self._linear_around_transposes(dispatch):
            return (KEEP_TRANSPOSES,)
        return ()

    def declines(self, dispatch: Dispatch) -> str | None:
        if self.supports(dispatch) or dispatch.target.backend != "cuda" or dispatch.kind != DispatchKind.CONTRACTION:
            return None
        if dispatch.other_ops not in EPILOGUES:
            return (f"the dispatch fuses {', '.join(dispatch.other_ops)} with the contraction: the mma.sync "
                    f"kernel takes at most one elementwise op after it")
        if self._linear_around_transposes(dispatch):
            return ("a linear layer with a transpose folded into it (several M or N dims): the mma.sync kernel "
                    "takes the 2-D matmul the compiler forms with the transposes kept, which tune-model tries")
        if self._b_stored_k_by_n(dispatch) is not None:
            return ("B stored N x K: the mma.sync kernel compiles for it but computes a wrong result "
                    "(error 1.0 of max|C|, 2048x5120x5120 on the H100), so it is not offered (tune-model tries "
                    "the model with its transposes kept, which stores a constant B K x N)")
        if len(dispatch.m_dims) == len(dispatch.n_dims) == len(dispatch.k_dims) == 1 and len(dispatch.batch_dims) <= 1:
            if not self._tiles_divide(dispatch, rows=False):
                return (f"the mma.sync kernel does not pad N or K: they must be multiples of {min(BLOCK_N)} "
                        f"and {min(BLOCK_K)}")
            if not self._tiles_divide(dispatch):
                return (f"M is no multiple of {min(BLOCK_M)}: the mma.sync kernel pads rows only where an elementwise "
                        "op follows the contraction and there is no batch dim (without one its padded result "
                        "tile was copied back wrong on the H200)")
        return "the mma.sync kernel takes only f16 x f16 -> f32 C = A B with one M, N and K dim and at most one batch dim"

    def build_problem(self, dispatch: Dispatch) -> Problem:
        m, n, k = dispatch.sizes((*dispatch.m_dims, *dispatch.n_dims, *dispatch.k_dims))
        batch = 1
        for size in dispatch.sizes(dispatch.batch_dims):
            batch *= size
        p = Problem()
        bm = p.add_knob(IntKnob.of("block_m", list(BLOCK_M))).var
        bn = p.add_knob(IntKnob.of("block_n", list(BLOCK_N))).var
        bk = p.add_knob(IntKnob.of("block_k", list(BLOCK_K))).var
        wm = p.add_knob(IntKnob.of("warps_m", [2, 4, 1])).var
        wn = p.add_knob(IntKnob.of("warps_n", [4, 2, 1])).var
        stages = p.add_knob(IntKnob.of("stages", [3, 4, 2, 5, 1])).var
        kernel = MmaSyncTiles(bm, bn, bk, wm, wn, stages, epilogue=bool(dispatch.other_ops), batch=bool(dispatch.batch_dims),
                              padded=self._pads_rows(dispatch))
        p.require(*kernel.rules(m, n, k, shared_memory_bytes(dispatch), dispatch.target.max_threads_per_workgroup or 1024))
        # Preferences from issue 38's shapes (4096^3, Llama-7B's MLP; BENCHMARKS.md): a grid that
        # fills the H100's 132 SMs, 3-4 stages (one stage ran 0.67x three), a 128x256 tile on 8
        # warps, a K step of 32. With an epilogue a 128x256 tile leaves room for one stage only.
        p.prefer("fills_the_gpu", batch * (m / bm) * (n / bn) >= 132)
        p.prefer("pipelined", stages >= 3)
        if kernel.padded:
            # Padded (its result tile through shared memory for the epilogue): on five held-out
            # linear layers with bias and GELU (CLIP ViT-L/14 and text, DeiT-S, Whisper-small,
            # wav2vec2-base; H200, docs/benchmarks/mma-sync-kernel.md) 64-row tiles on 4 warps
            # ran 1.28-1.58x the default and 128x128 ones 0.92-1.16x.
            p.prefer("small_result_tile", (bm == 64) & (bn <= 128))
            p.prefer("two_by_two_warps", (wm == 2) & (wn == 2))
        else:
            p.prefer("wide_tile", bm * bn >= 128 * 256)
            p.prefer("eight_warps", wm * wn == 8)
        p.prefer("k_step_32", bk == 32)
        return p

    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir

        t = MmaSyncTiles(*(int(s[k]) for k in ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages")),
                         epilogue=bool(dispatch.other_ops), batch=bool(dispatch.batch_dims))
        # Rows padded where the tile does not divide M (the problem allowed it: _pads_rows).
        t = replace(t, padded=math.prod(dispatch.sizes(dispatch.m_dims)) % t.block_m != 0)
        with ctx:  # printed by the compiler's own printer, as the read-back will print them
            info = ir.Attribute.parse(compilation_info(t))
            lowering, translation = ir.Attribute.parse(lowering_config(t)), ir.Attribute.parse(translation_info(t))
        return Config(knobs=dict(s), compilation_info=str(info), summary=f"mma.sync {t.label()}",
                      expect_lowering_config=str(lowering), expect_translation_info=str(translation),
                      codegen_spec=True, parts=(TransformSequences(strategy(t)),))
