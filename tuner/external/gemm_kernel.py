"""A matrix product as an external kernel: the problem, its tiles, and the kernel IREE launches.

IREE's CUDA runtime launches a `hal.dispatch.extern` kernel with one parameter per binding, a
device pointer each, in the layout's order (then one 32-bit value per push constant; these
kernels take none), a block of `workgroup_size` threads, a grid from the dispatch's count region,
and `workgroup_local_memory` bytes of dynamic shared memory (over 48 KiB is opted in at load).
A kernel made elsewhere is brought to that ABI by `for_iree`."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GemmProblem:
    """C[m, n] = A[m, k] B[k, n], all row-major, A and B of `element`, accumulated in f32 and
    stored as `element` (what an exported linear layer's MatMul computes)."""

    m: int
    n: int
    k: int
    element: str = "f16"

    @property
    def name(self) -> str:
        return f"gemm_{self.m}x{self.n}x{self.k}_{self.element}"


@dataclass(frozen=True)
class GemmTiles:
    """A workgroup's C tile (bm x bn), the K step, its warps and its pipeline depth."""

    bm: int
    bn: int
    bk: int
    warps: int
    stages: int

    def lays_out(self, problem: GemmProblem) -> bool:
        """Whether the tiles cover the problem with only rows masked: n and k whole tiles."""
        return problem.n % self.bn == 0 and problem.k % self.bk == 0

    @property
    def label(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk} w{self.warps} s{self.stages}"


    def blocks(self, problem: GemmProblem) -> int:
        """The workgroups of the grid: row tiles (the last one masked) times column tiles."""
        return -(-problem.m // self.bm) * (problem.n // self.bn)


# In order of preference: the first that lays out and fills a wave of workgroups (one per SM of
# an H100 or H200: 132) is taken; where none fills one, the one with the most workgroups
# (`tiles_for`). Chosen on five held-out linear layers and, for the wave, on BERT-base on the H200
# (benchmarks/gpu_external_gemm.py, docs/benchmarks/external-kernels.md): 128x128 tiles ran
# best wherever they made a wave, and 1.3-2x slower than smaller ones where they made 24-39
# workgroups (BERT's 512x768 products, DeiT-S's 1576x384).
PREFERRED = (GemmTiles(128, 128, 64, 8, 3), GemmTiles(64, 128, 64, 4, 4), GemmTiles(128, 64, 64, 4, 4),
             GemmTiles(64, 64, 64, 4, 4))
WAVE = 132


def tiles_for(problem: GemmProblem) -> GemmTiles | None:
    """The tiles of PREFERRED the problem is computed with (None: none lays out on it)."""
    fitting = [t for t in PREFERRED if t.lays_out(problem)]
    filling = [t for t in fitting if t.blocks(problem) >= WAVE]
    if filling:
        return filling[0]
    return max(fitting, key=lambda t: t.blocks(problem), default=None)


@dataclass(frozen=True)
class ExternKernel:
    """A compiled kernel as IREE launches it: PTX whose one entry is `name` and takes exactly
    `bindings` pointer parameters, `threads` per block, `shared_bytes` of dynamic shared memory
    and a grid of `grid` blocks (x, y, z)."""

    name: str
    ptx: str
    bindings: int
    threads: int
    shared_bytes: int
    grid: tuple[int, int, int]
    tiles: GemmTiles


class KernelAbiError(ValueError):
    """The kernel's PTX cannot be brought to IREE's launch ABI."""


def for_iree(ptx: str, entry: str, name: str, bindings: int) -> str:
    """`ptx` with its entry `entry` renamed `name` and cut to its first `bindings` parameters.

    Triton appends scratch-buffer pointers to every kernel's parameters (global and profile
    scratch), which IREE would not pass; they are dropped where the kernel's body never loads
    them (no scratch was allocated), and KernelAbiError says so where it does."""
    entries = re.findall(r"\.entry\s+([\w$]+)\s*\(", ptx)
    if entries != [entry]:
        raise KernelAbiError(f"expected one entry {entry!r} in the PTX, found {entries}")
    header = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    params = [p.strip() for p in header.group(1).split(",") if p.strip()]
    names = [p.split()[-1] for p in params]
    if len(params) < bindings:
        raise KernelAbiError(f"{entry} takes {len(params)} parameters, fewer than its {bindings} bindings")
    used = [n for n in names[bindings:] if re.search(r"\[\s*" + re.escape(n) + r"\s*\]", ptx)]
    if used:
        raise KernelAbiError(f"{entry} reads parameters beyond its bindings: {', '.join(used)}")
    body = ptx[:header.start()] + f".entry {name}(\n\t" + ",\n\t".join(params[:bindings]) + "\n)" + ptx[header.end():]
    return re.sub(r"\b" + re.escape(entry) + r"_param_", f"{name}_param_", body)
