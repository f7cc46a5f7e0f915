"""A reduction over the middle axes of a channels-last tensor as an external kernel: the problem
and its tiles.

Y[b, c] = F(sum_p G(X[b, p, c])) over `pixels` values p of each image b and channel c, in f32,
rounded once: ONNX's ReduceL2 (G = x^2, F = sqrt), ReduceSumSquare (x^2), ReduceMean (x, / P) and
ReduceSum (x) over every axis between the first and the last, as ConvNeXt-V2's GRN (global
response normalization: the L2 norm of each channel over an image's pixels, on NHWC) is
exported. IREE 3.13 reduces it with the reduced axis across threads, each reading a channel's
values a row of C apart (ConvNeXt-V2-base at batch 8 on the H200: `reduction_8x384x3136`, 0.169
ms a call of 1.52 for the tuned model); the kernel reads rows of channels whole, the reduction
down its loop."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.external.abi import WAVE

KINDS = {"ReduceL2": "l2", "ReduceSumSquare": "sumsq", "ReduceMean": "mean", "ReduceSum": "sum"}


@dataclass(frozen=True)
class SpatialReduceProblem:
    batch: int
    pixels: int
    c: int
    kind: str  # a value of KINDS
    element: str = "f16"  # of X and Y; the sums are f32 either way

    @property
    def name(self) -> str:
        return f"reduce_{self.kind}_{self.batch}x{self.pixels}x{self.c}_{self.element}"


@dataclass(frozen=True)
class SpatialReduceTiles:
    """A workgroup's block of channels of one image (`channels`), the pixels it reads a step
    (`pixels`), its warps and pipeline stages."""

    pixels: int
    channels: int
    warps: int = 4
    stages: int = 3

    @property
    def label(self) -> str:
        return f"{self.pixels}x{self.channels} w{self.warps} s{self.stages}"

    def grid(self, problem: SpatialReduceProblem) -> tuple[int, int, int]:
        """A workgroup per block of channels and image."""
        return -(-problem.c // self.channels), problem.batch, 1


def spatial_reduce_tiles_for(problem: SpatialReduceProblem) -> SpatialReduceTiles:
    """Blocks of 64 channels (128 bytes of f16 a row: whole lines) where that gives two
    workgroups for each of the GPU's multiprocessors, else of 32 (ConvNeXt-V2's first stage at
    batch 8: 96 workgroups of 32 rather than 48 of 64); 64 pixels a step, fewer where an image
    has fewer. Not chosen on any measurement."""
    channels = 64 if problem.batch * -(-problem.c // 64) >= 2 * WAVE else 32
    pixels = min(64, 1 << max(0, (problem.pixels - 1).bit_length()))
    return SpatialReduceTiles(max(pixels, 16), channels)
