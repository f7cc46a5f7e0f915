"""A convolution as an external implicit-GEMM kernel: the problem and the tiles it is computed with.

Y[n, g*fg + f, oh, ow] = B[g*fg + f] + sum over (c, i, j) of W[g*fg + f, c, i, j]
                                            X[n, g*cg + c, oh*sh - pt + i*dh, ow*sw - pl + j*dw]

NCHW and OIHW as ONNX's Conv writes them (`group` g of cg input channels and fg filters each),
or X given channels-last, NHWC (`channels_last`: a tap's channels side by side, for vector loads),
taps outside the image read as zeros, the sums in f32, then the epilogue (the bias, an
activation) and one rounding; Y is NCHW either way. Per group it is a matrix product C[m, n] = A[m, k] B[k, n] with
m = fg filters, n = images x output pixels (the images side by side) and k = cg x taps: A is the
filter as it lies in memory, B the patches, gathered by the kernel as it goes and never written."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tuner.external.abi import WAVE
from tuner.external.gemm_kernel import GemmTiles
from tuner.external.window import window_label, window_out

# What the kernel computes on its f32 sums before it rounds them: the convolution's bias (one value
# per filter), then one activation.
EPILOGUE_STEPS = ("row_bias", "relu", "gelu", "gelu_tanh", "silu")


@dataclass(frozen=True)
class ConvProblem:
    n: int
    c: int
    h: int
    w: int
    f: int
    kh: int
    kw: int
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)
    group: int = 1
    element: str = "f16"
    epilogue: tuple[str, ...] = ()
    channels_last: bool = False  # X given as [N, H, W, C] (only where the kernel steps a tap's channels)

    @property
    def out(self) -> tuple[int, int]:
        """The output's rows and columns."""
        return window_out(self.h, self.w, self.kh, self.kw, self.strides, self.pads, self.dilations)

    @property
    def gemm(self) -> tuple[int, int, int]:
        """The matrix product of one group: (m, n, k) = (filters, images x pixels, channels x taps)."""
        oh, ow = self.out
        return self.f // self.group, self.n * oh * ow, self.c // self.group * self.kh * self.kw

    @property
    def name(self) -> str:
        extra = window_label(self.strides, self.pads, self.dilations)
        group = f"_g{self.group}" if self.group > 1 else ""
        return (f"conv_{self.n}x{self.c}x{self.h}x{self.w}_{self.f}x{self.kh}x{self.kw}{extra}{group}_{self.element}"
                + "".join(f"_{e}" for e in self.epilogue) + ("_nhwc" if self.channels_last else ""))


# In order of preference, as the GEMM's (tuner.external.gemm_kernel.PREFERRED): the first whose
# grid fills a wave of workgroups, else the one with the most. K steps of 32 (32 channels of one
# tap where 32 divides a group's channels; tuner.external.triton_conv); rows of 32 where a group
# has that few filters (DenseNet's 32-filter 3x3 layers: a 64-row tile would compute zeros for
# half of them). Not chosen on any measurement.
CONV_TILES = (GemmTiles(128, 128, 32, 8, 3), GemmTiles(64, 128, 32, 4, 3), GemmTiles(128, 64, 32, 4, 3),
              GemmTiles(64, 64, 32, 4, 3), GemmTiles(32, 128, 32, 4, 3), GemmTiles(32, 64, 32, 4, 3))


def conv_tiles_for(problem: ConvProblem) -> GemmTiles:
    """Tiles of CONV_TILES 32 rows tall where a group has at most 32 filters, else at least 64 (a
    warpgroup's wgmma is 64 rows) and no taller than the filters round up to: the first whose grid
    fills a wave, else the one with the most workgroups (the smaller of equals). Their K step is 16 where 16 and not 32
    divides a group's channels, so that a step is still one tap's channels."""
    fitting = _fitting(problem)
    filling = [t for t in fitting if _blocks(problem, t) >= WAVE]
    tiles = filling[0] if filling else max(fitting, key=lambda t: (_blocks(problem, t), -t.bm * t.bn))  # the least padded of equals
    channels = problem.c // problem.group
    return replace(tiles, bk=16) if channels % 32 and not channels % 16 else tiles


def conv_tile_candidates(problem: ConvProblem, count: int = 4) -> list[GemmTiles]:
    """Up to `count` tiles to try on the problem in the model (tuner.stages.kernel_tiles): the
    rule's (`conv_tiles_for`) first, then the others of those it chooses from, most workgroups
    first, each with the rule's K step."""
    chosen = conv_tiles_for(problem)
    others = sorted(_fitting(problem), key=lambda t: -_blocks(problem, t))
    return list(dict.fromkeys([chosen, *(replace(t, bk=chosen.bk) for t in others)]))[:count]


def _fitting(problem: ConvProblem) -> list[GemmTiles]:
    """CONV_TILES 32 rows tall where a group has at most 32 filters, else at least 64 and no
    taller than the filters round up to."""
    rows = max(32, min(128, 1 << (problem.gemm[0] - 1).bit_length()))
    return [t for t in CONV_TILES if t.bm <= rows and (t.bm >= 64 or rows == 32)]


def _blocks(problem: ConvProblem, tiles: GemmTiles) -> int:
    """The grid's workgroups: filter tiles by pixel tiles, times the groups."""
    m, n, _ = problem.gemm
    return -(-m // tiles.bm) * -(-n // tiles.bn) * problem.group


def tap_major(problem: ConvProblem, tiles: GemmTiles) -> bool:
    """Whether the kernel steps one tap's channels at a time and takes W as [F, KH, KW, CG]
    (tuner.external.triton_conv): where the K step divides a group's channels."""
    return (problem.c // problem.group) % tiles.bk == 0
