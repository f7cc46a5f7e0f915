"""An attention as an external kernel: the problem and the tiles it is computed with.

softmax(scale * Q K^T + mask) V over heads (z, h), Q [z, h, m, d], K [z, h, n, d], V [z, h, n, dv]
(K and V may have fewer heads, each shared by h / kv_heads of Q's: grouped-query attention; or any of them and the result [z, seq, h, d] in memory: `seq_major`; Q, K or V also read
from a wider tensor whose rows hold them side by side, the exporter's fused QKV before its Split:
`rows`, `offsets`), f16, the statistics and the products' sums in f32, the result rounded once. The mask is
additive, of shape [mz, mh, mm, n] with each leading dim 1 (broadcast) or the problem's, or mz a
divisor of z that the mask repeats with (z's index taken modulo mz: Swin's window masks); a
causal problem also drops every key after its query's position (SDPA's is_causal)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Optional

import z3

from constraints import BoolKnob, IntKnob, Problem
from constraints.fast_enumerate import enumerate_space
from constraints.tiling import within
from constraints.wgmma import warpgroup_rules
from tuner.external.space import ranked
from tuner.external.abi import SHARED_LIMIT, WAVE

# The head widths the kernel takes: a multiple of 8 (a head's row of f16 is whole 16-byte
# vectors, as the kernel loads them) up to 256 (Gemma's, Pythia-1B's). Widths that are no power
# of two (Phi-2's 80, Phi-3's 96) or under 16 (wgmma's least K) are computed padded
# (`padded_width`: tl.arange's extents are powers of two), the padding read as zeros.
HEAD_WIDTH_STEP, HEAD_WIDTH_MAX = 8, 256
LEAST_K = 16


def padded_width(width: int) -> int:
    """The width a head of `width` is computed at on GPUs (by the kernel, and by IREE's attention
    pipeline after tuner.rewrite.attention pads it): the next power of two, at least LEAST_K."""
    return max(LEAST_K, 1 << (width - 1).bit_length())


@dataclass(frozen=True)
class AttentionProblem:
    z: int
    h: int
    m: int
    n: int
    d: int
    dv: int
    element: str = "f16"
    mask: Optional[tuple[int, int, int]] = None  # the mask's (mz, mh, mm); its last dim is n
    mask_element: str = "f16"
    causal: bool = False
    scale: float = 1.0
    # Which of Q, K, V and the result lie [z, seq, h, d] in memory (the exporter's head split
    # before its Transpose) rather than [z, h, seq, d]: the kernel reads and writes them so.
    seq_major: tuple[bool, bool, bool, bool] = (False, False, False, False)
    # Q, K, V read (seq-major) from rows `rows` values wide (0: h x d, their own), starting
    # `offsets` values into each row: GPT-2's one [z, seq, 3 x h x d] projection, not its Split.
    rows: tuple[int, int, int] = (0, 0, 0)
    offsets: tuple[int, int, int] = (0, 0, 0)
    # K's and V's heads where fewer than Q's (grouped-query attention: Q's head i reads K/V head
    # i // (h / kv_heads), as transformers' repeat_kv repeats them); 0: h of their own.
    kv_heads: int = 0

    @property
    def kv(self) -> int:
        """K's and V's heads."""
        return self.kv_heads or self.h

    @property
    def name(self) -> str:
        extra = ("_mask" + "x".join(map(str, self.mask)) if self.mask else "") + ("_causal" if self.causal else "")
        if self.kv != self.h:
            extra += f"_gqa{self.kv}"
        if any(self.seq_major):
            extra += "_" + "".join(x if major else "" for x, major in zip("qkvo", self.seq_major)) + "_bshd"
        if any(self.rows):
            extra += f"_rows{'x'.join(map(str, self.rows))}_at{'x'.join(map(str, self.offsets))}"
        return f"attention_{self.z}x{self.h}x{self.m}x{self.n}x{self.d}x{self.dv}_{self.element}{extra}"

    @property
    def row_widths(self) -> tuple[int, int, int]:
        """Q's, K's and V's rows where they lie seq-major: `rows` where they are read from a wider
        tensor, else their heads side by side."""
        return tuple(r or heads * w for r, heads, w in zip(self.rows, (self.h, self.kv, self.kv),
                                                          (self.d, self.d, self.dv)))

    def tma_fits(self) -> bool:
        """Whether the TMA form of the kernel takes the problem: head widths powers of two (a
        descriptor's block is the head; no padding), every row of Q, K, V and the result whole
        16-byte steps (a descriptor's strides)."""
        widths = (self.d, self.dv)
        return (all(padded_width(w) == w for w in widths)
                and all(x % 8 == 0 for x in (*widths, *self.row_widths, *self.offsets, self.h * self.dv)))

    def why_not(self) -> Optional[str]:
        """Why the kernel does not take the problem (None: it does)."""
        if self.element != "f16":
            return f"{self.element} (the kernel is f16)"
        if any(w % HEAD_WIDTH_STEP or not 0 < w <= HEAD_WIDTH_MAX for w in (self.d, self.dv)):
            return f"head widths {self.d}/{self.dv} (the kernel takes multiples of {HEAD_WIDTH_STEP} to {HEAD_WIDTH_MAX})"
        if self.mask and (self.z % self.mask[0] or any(x not in (1, full) for x, full in zip(self.mask[1:], (self.h, self.m)))):
            return f"a mask of leading dims {self.mask} that is no broadcast of {(self.z, self.h, self.m)}"
        if self.h % self.kv:
            return f"{self.kv} key/value heads for {self.h} query heads (not a divisor)"
        if self.mask and self.mask_element not in ("f16", "f32"):
            return f"a {self.mask_element} mask (the kernel adds f16 or f32 masks)"
        return None


@dataclass(frozen=True)
class AttentionTiles:
    """A workgroup's query rows (bm) and the keys it takes per step (bn), its warps and stages."""

    bm: int
    bn: int
    warps: int
    stages: int
    tma: bool = False  # Q, K, V and the result moved by the Tensor Memory Accelerator (AttentionProblem.tma_fits)

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn} w{self.warps} s{self.stages}" + (" tma" if self.tma else "")

    def blocks(self, problem: AttentionProblem) -> int:
        return -(-problem.m // self.bm) * problem.z * problem.h

    def shared_bytes(self, problem: AttentionProblem) -> int:
        """The shared memory Triton gives the kernel (its compiles for sm_90a, head widths 64 to
        256): `stages` buffers of a step's K and V blocks and one Q block, f16, at padded widths."""
        d, dv = padded_width(problem.d), padded_width(problem.dv)
        return 2 * (self.stages * self.bn * (d + dv) + self.bm * d)

    def fitted(self, problem: AttentionProblem) -> Optional["AttentionTiles"]:
        """These tiles with their stages cut (to 2 at least) until the problem's blocks fit
        Hopper's shared memory; None where they never do, or where the accumulator would hold
        more than ACC_PER_THREAD values a thread (Gemma's 256-wide heads on 128 rows of 4 warps)."""
        if self.bm * padded_width(problem.dv) > ACC_PER_THREAD * 32 * self.warps:
            return None
        tiles = self
        while tiles.shared_bytes(problem) > SHARED_LIMIT and tiles.stages > 2:
            tiles = AttentionTiles(self.bm, self.bn, self.warps, tiles.stages - 1, self.tma)
        return tiles if tiles.shared_bytes(problem) <= SHARED_LIMIT else None


# The f32 accumulator values one thread holds at most (of its 255 registers; more spill).
ACC_PER_THREAD = 128


# 128 query rows a workgroup where that makes a wave of workgroups, else 64 (BERT's 12 heads of 512).
PREFERRED = (AttentionTiles(128, 64, 4, 3), AttentionTiles(64, 64, 4, 3))


# The tile space (`attention_space`): each knob's values.
ROWS, KEYS, WARPS, STAGES = (64, 128), (32, 64, 128), (4, 8), (2, 3, 4)
# The f32 values a thread holds at most of a step's scores (bm x bn) and the accumulator (bm x
# dv) together: 128 rows of 64 keys and 128-wide heads on 4 warps (192) ran (a Mistral-7B layer's
# attention, docs/benchmarks/external-kernels.md); more spills.
SCORES_AND_SUMS_PER_THREAD = 192


def attention_space(problem: AttentionProblem) -> Problem:
    """The problem's tiles as a Z3 problem on the knobs bm, bn, warps, stages, tma: the scores'
    tile (bm x bn) dealt to warpgroups (constraints.wgmma), `shared_bytes` within Hopper's shared
    memory (with the TMA form's result block too; that form only where it fits, `tma_fits`), the
    accumulator within ACC_PER_THREAD and the scores with it within SCORES_AND_SUMS_PER_THREAD,
    and no more keys a step than the keys rounded up to a power of two."""
    p = Problem()
    bm, bn, warps, stages = (p.add_knob(IntKnob.of(name, values)).var for name, values in (
        ("bm", ROWS), ("bn", KEYS), ("warps", WARPS), ("stages", STAGES)))
    tma = p.add_knob(BoolKnob("tma")).var
    dv = padded_width(problem.dv)
    if not problem.tma_fits():
        p.require(z3.Not(tma))
    shared = AttentionTiles(bm, bn, warps, stages).shared_bytes(problem)  # the same count, in Z3 terms
    p.require(*warpgroup_rules(bm, bn, warps), within(shared, SHARED_LIMIT),
              z3.Implies(tma, shared + 2 * bm * dv <= SHARED_LIMIT),  # and the result's block, TMA's store
              within(bm * dv, ACC_PER_THREAD * 32 * warps),
              within(bm * (bn + dv), SCORES_AND_SUMS_PER_THREAD * 32 * warps),
              within(bn, max(32, 1 << (problem.n - 1).bit_length())))
    return p


def _estimate(problem: AttentionProblem, tiles: AttentionTiles) -> float:
    """A relative time (smaller first): the waves of workgroups, each as long as its rows take
    over the keys (K and V read once a workgroup: taller tiles read them fewer times), then 3
    stages and 64 keys a step among equals. Taken from the kernel's arithmetic, not fitted."""
    waves = -(-tiles.blocks(problem) // WAVE)
    ties = (tiles.stages != 3) + (tiles.bn != 64)
    return waves * tiles.bm * (1 + 64 / tiles.bm) * (1 + 0.01 * ties)


@cache
def ranked_attention_tiles(problem: AttentionProblem) -> tuple[AttentionTiles, ...]:
    """Every tile of the problem's space in the order to try them (tuner.external.space.ranked)."""
    return ranked([AttentionTiles(**solution) for solution in enumerate_space(attention_space(problem))],
                  lambda t: _estimate(problem, t))


def attention_tile_candidates(problem: AttentionProblem, count: int = 4) -> list[AttentionTiles]:
    """Up to `count` tiles to try on the problem in the model: the rule's (`attention_tiles_for`)
    first, then the space's (`ranked_attention_tiles`) in its order."""
    chosen = attention_tiles_for(problem)
    return [chosen, *[t for t in ranked_attention_tiles(problem) if t != chosen]][:count]


def attention_tiles_for(problem: AttentionProblem) -> AttentionTiles:
    """Of the tiles whose grid fills a wave, the one that pads the queries least (Swin's windows of
    49 tokens: 64 rows, where 128 computed 79 rows of nothing a block; not yet measured), the
    taller of equals; where none fills one, 64 rows. Only tiles that fit the head's width
    (`AttentionTiles.fitted`): 256-wide heads take 64 rows."""
    preferred = [f for f in (t.fitted(problem) for t in PREFERRED) if f]
    filling = [t for t in preferred if t.blocks(problem) >= WAVE]
    if not filling:
        return preferred[-1]
    return min(filling, key=lambda t: (-(-problem.m // t.bm) * t.bm - problem.m, -t.bm))
