"""A matrix product as an external kernel: the problem and the tiles it is computed with."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

import z3

from constraints import BoolKnob, IntKnob, Problem
from constraints.fast_enumerate import enumerate_space
from constraints.wgmma import problem_rules, tile_rules
from tuner.external.abi import SHARED_LIMIT, WAVE
from tuner.external.space import ranked


# What a kernel may compute on its f32 sums before it rounds them once: a bias of one value per
# column (a linear layer's) or per row (a convolution's, one per filter, where the filter is A),
# then one activation (GELU exact, GELU's tanh form, ReLU, SiLU).
EPILOGUE_STEPS = ("bias", "row_bias", "gelu", "gelu_tanh", "relu", "silu")
# Each activation's code, the `ACT` constexpr of every external kernel (GEMM, convolution,
# depthwise) that computes one on its sums.
ACTIVATIONS = {"relu": 1, "gelu": 2, "gelu_tanh": 3, "silu": 4}


@dataclass(frozen=True)
class GemmProblem:
    """C[m, n] = A[m, k] B[k, n], all row-major, A and B of `element`, accumulated in f32 and
    stored as `element` (what an exported linear layer's MatMul computes), with the `epilogue`
    (EPILOGUE_STEPS, in order) applied to the sums first. With a `batch`, C[b] = A B[b] for each
    of `batch` B[b] and C[b], A shared (a 1x1 convolution's filter by each image's pixels)."""

    m: int
    n: int
    k: int
    element: str = "f16"
    epilogue: tuple[str, ...] = ()
    batch: int = 1

    @property
    def name(self) -> str:
        batch = f"{self.batch}x" if self.batch > 1 else ""
        return f"gemm_{batch}{self.m}x{self.n}x{self.k}_{self.element}" + "".join(f"_{e}" for e in self.epilogue)

    def tma_fits(self) -> bool:
        """Whether the persistent TMA form of the kernel takes the problem: one product (no
        batch), no bias (its epilogue an activation at most), rows of A, B and C whole 16-byte
        steps (K and N multiples of 8: a descriptor's strides)."""
        return self.batch == 1 and not {"bias", "row_bias"} & set(self.epilogue) and self.k % 8 == 0 and self.n % 8 == 0

    @property
    def label(self) -> str:
        """The problem as a rewrite reports it: [batch x] m x n x k, element, epilogue."""
        batch = f"{self.batch}x" if self.batch > 1 else ""
        epilogue = f" + {' + '.join(self.epilogue)}" if self.epilogue else ""
        return f"{batch}{self.m}x{self.n}x{self.k} {self.element}{epilogue}"


@dataclass(frozen=True)
class GemmTiles:
    """A workgroup's C tile (bm x bn), the K step, its warps and its pipeline depth; `group`: the
    row tiles the grid takes at a time, column by column (1: the grid in its own order, a row of
    column tiles after another); `tma`: the persistent form, one workgroup a multiprocessor
    taking tile after tile, A, B and C moved by the Tensor Memory Accelerator (descriptors made on
    the device: `GemmProblem.tma_fits`)."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int
    group: int = 1
    tma: bool = False

    def lays_out(self, problem: GemmProblem, masked: bool = False, masked_k: bool = False) -> bool:
        """Whether the tiles cover the problem with only rows masked (k whole steps, n whole
        tiles), or with columns masked too (`masked`: any n; where n is no multiple of 8, B's
        rows are no whole 16-byte vectors and its loads narrower), or the last K step too
        (`masked_k`: any k)."""
        return (problem.k % self.bk == 0 or masked_k) and (problem.n % self.bn == 0 or masked)

    @property
    def label(self) -> str:
        return (f"{self.bm}x{self.bn}x{self.bk} w{self.warps} s{self.stages}" + (f" g{self.group}" if self.group > 1 else "")
                + (" tma" if self.tma else ""))

    def padded(self, problem: GemmProblem) -> int:
        """The entries of C the grid covers past the problem's (masked rows and columns)."""
        return self.blocks(problem) * self.bm * self.bn - problem.batch * problem.m * problem.n

    def blocks(self, problem: GemmProblem) -> int:
        """The workgroups of the grid: row tiles times column tiles (the last of each masked),
        times the batch."""
        return -(-problem.m // self.bm) * -(-problem.n // self.bn) * problem.batch


# In order of preference: the first that lays out and fills a wave of workgroups (one per SM of
# an H100 or H200: 132) is taken; where none fills one, the one with the most workgroups
# (`tiles_for`). Chosen on five held-out linear layers and, for the wave, on BERT-base on the H200
# (benchmarks/gpu_external_gemm.py, docs/benchmarks/external-kernels.md): 128x128 tiles ran
# best wherever they made a wave, and 1.3-2x slower than smaller ones where they made 24-39
# workgroups (BERT's 512x768 products, DeiT-S's 1576x384).
PREFERRED = (GemmTiles(128, 128, 64, 8, 3), GemmTiles(64, 128, 64, 4, 4), GemmTiles(128, 64, 64, 4, 4),
             GemmTiles(64, 64, 64, 4, 4))
# Where N or K is a multiple of 32 and not of 64 (the 96 channels of Swin-T's and ConvNeXt-T's
# first stage), by the same rule: the K step and, where N needs it, the column tile halved. Not
# chosen on any measurement: the same tiles' shapes at half the width.
NARROW = (GemmTiles(128, 128, 32, 8, 3), GemmTiles(64, 128, 32, 4, 4), GemmTiles(128, 64, 32, 4, 4),
          GemmTiles(64, 64, 32, 4, 4), GemmTiles(128, 32, 32, 4, 4), GemmTiles(64, 32, 32, 4, 4))
# Where K is a multiple of 16 and not of 32 (MobileNet's and EfficientNet's 80, 112 and 240
# channels): one wgmma step of 16 a stage. Not chosen on any measurement either.
NARROWEST = tuple(GemmTiles(t.bm, t.bn, 16, t.warps, t.stages) for t in NARROW)
TIERS = (PREFERRED, NARROW, NARROWEST)


# The tile space (`space`): each knob's values. Triton's num_stages counts the K steps in flight.
BLOCK_M, BLOCK_N, BLOCK_K = (64, 128, 256), (32, 64, 128, 256), (16, 32, 64, 128)
WARPS, STAGES, GROUPS = (4, 8), (2, 3, 4, 5), (1, 8)
ELEMENT_BYTES = {"f16": 2, "bf16": 2}
# A tile whose sums per value loaded (bm bn / (bm + bn)) reach this many keeps the tensor cores
# busy from shared memory (128x128: 64); below it, its time is taken to grow in proportion. A
# figure taken from the kernel's arithmetic, not fitted on any measurement.
BUSY_INTENSITY = 64


def space(problem: GemmProblem) -> Problem:
    """The problem's tiles as a Z3 problem (constraints.wgmma's rules on the knobs bm, bn, bk,
    warps, stages, group, tma): columns and the last K step masked only where no tile divides N or
    K; the persistent TMA form only where it takes the problem (`GemmProblem.tma_fits`), its C tile in
    shared memory beside the pipeline's (the TMA store's)."""
    p = Problem()
    bm, bn, bk, warps, stages = (p.add_knob(IntKnob.of(name, values)).var for name, values in (
        ("bm", BLOCK_M), ("bn", BLOCK_N), ("bk", BLOCK_K), ("warps", WARPS), ("stages", STAGES)))
    p.add_knob(IntKnob.of("group", GROUPS))
    tma = p.add_knob(BoolKnob("tma")).var
    element = ELEMENT_BYTES[problem.element]
    p.require(*tile_rules(bm, bn, bk, warps, stages, element, SHARED_LIMIT),
              z3.Implies(tma, stages * (bm + bn) * bk * element + bm * bn * element <= SHARED_LIMIT))
    if not problem.tma_fits():
        p.require(z3.Not(tma))
    p.require(*problem_rules(bm, bn, bk, problem.m, problem.n, problem.k, masked_n=problem.n % min(BLOCK_N) != 0,
                             masked_k=problem.k % min(BLOCK_K) != 0))
    return p


def estimate(problem: GemmProblem, tiles: GemmTiles) -> float:
    """A relative time for the tiles (smaller first): the waves of workgroups the grid takes,
    each as long as its tile's sums, longer where the tile is too small to keep the tensor cores
    busy (BUSY_INTENSITY); then, among equals, 3-4 stages, K steps of 64 and, where there are
    more row tiles than one group, grouped blocks first (the order in which ties are tried)."""
    waves = -(-tiles.blocks(problem) // WAVE)
    busy = min(1.0, tiles.bm * tiles.bn / (tiles.bm + tiles.bn) / BUSY_INTENSITY)
    grouped = tiles.group > 1 and -(-problem.m // tiles.bm) > tiles.group
    ties = (tiles.stages not in (3, 4)) + (tiles.bk != 64) + (not grouped) * 0.5
    return waves * tiles.bm * tiles.bn / busy * (1 + 0.01 * ties)


@cache
def ranked_tiles(problem: GemmProblem) -> tuple[GemmTiles, ...]:
    """Every tile of the problem's space in the order to try them (tuner.external.space.ranked)."""
    return ranked([GemmTiles(**solution) for solution in enumerate_space(space(problem))], lambda t: estimate(problem, t))


def tile_candidates(problem: GemmProblem, count: int = 4) -> list[GemmTiles]:
    """Up to `count` tiles to try on the problem in the model (tuner.stages.kernel_tiles): the
    rule's (`tiles_for`) first, then the same tiles in the persistent TMA form where the space
    holds it (the kernel's other form of what the rule chose: it ran 1-10% faster on four of six
    held-out GEMMs and slower on two, docs/benchmarks/external-kernels.md), then the space's
    (`ranked_tiles`) in its order."""
    chosen = tiles_for(problem)
    ranked = ranked_tiles(problem)
    other_form = [replace(chosen, tma=True)] if replace(chosen, tma=True) in ranked else []
    return list(dict.fromkeys([chosen, *other_form, *ranked]))[:count]


def tiles_for(problem: GemmProblem) -> GemmTiles:
    """The tiles the problem is computed with: of the first of TIERS that lays out on it (K a
    multiple of 64, 32, 16), then the same with the last column tile masked where no tile divides
    N (a classifier's 1000 classes, a 7x7 image's 49 pixels), the least padded grid first where
    several fill a wave or have the most workgroups; where K is no multiple of 16, NARROW's tiles
    with the last K step masked too."""
    for masked in (False, True):
        for tier in TIERS:
            fitting = [t for t in tier if t.lays_out(problem, masked)]
            if masked:  # the least padded first, then as unmasked: a tile far wider than N wastes its columns
                fitting.sort(key=lambda t: t.padded(problem))
            filling = [t for t in fitting if t.blocks(problem) >= WAVE]
            if filling:
                return filling[0]
            if fitting:
                return max(fitting, key=lambda t: t.blocks(problem))
    # K no multiple of 16 (MLP-Mixer's 196 tokens): K steps of 32, the last masked, by the same
    # rule as masked columns. Not chosen on any measurement.
    fitting = sorted(NARROW, key=lambda t: t.padded(problem))
    filling = [t for t in fitting if t.blocks(problem) >= WAVE]
    return filling[0] if filling else max(fitting, key=lambda t: t.blocks(problem))
