"""A depthwise convolution as an external kernel: the problem and the tiles it is computed with.

Y[n, c, oh, ow] = B[c] + sum over (i, j) of X[n, c, oh*sh - pt + i*dh, ow*sw - pl + j*dw] W[c, 0, i, j],
NCHW as ONNX's Conv with `group` = channels writes it (every filter one channel), taps outside
the image read as zeros, the sums in f32, then the activation (if any), and the result rounded
once."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.external.window import window_label, window_out


@dataclass(frozen=True)
class DepthwiseProblem:
    n: int
    c: int
    h: int
    w: int
    kh: int
    kw: int
    strides: tuple[int, int] = (1, 1)
    pads: tuple[int, int, int, int] = (0, 0, 0, 0)  # top, left, bottom, right
    dilations: tuple[int, int] = (1, 1)
    element: str = "f16"
    bias: bool = False
    activation: str = ""  # after the bias: "" or one of tuner.external.gemm_kernel.ACTIVATIONS

    @property
    def out(self) -> tuple[int, int]:
        """The output's rows and columns."""
        return window_out(self.h, self.w, self.kh, self.kw, self.strides, self.pads, self.dilations)

    @property
    def name(self) -> str:
        extra = window_label(self.strides, self.pads, self.dilations)
        return (f"depthwise_{self.n}x{self.c}x{self.h}x{self.w}_{self.kh}x{self.kw}{extra}_{self.element}"
                + ("_bias" if self.bias else "") + (f"_{self.activation}" if self.activation else ""))


@dataclass(frozen=True)
class DepthwiseTiles:
    """A workgroup's output pixels of one image's channel (flattened rows x columns) and warps."""

    pixels: int
    warps: int
    stages: int = 1

    @property
    def label(self) -> str:
        return f"{self.pixels} pixels w{self.warps}"


def depthwise_tiles_for(problem: DepthwiseProblem) -> DepthwiseTiles:
    """The whole output plane in one workgroup where it is at most 512 pixels (a power of two over
    it), else 512 a workgroup; 64 pixels a warp, four warps at most. Not chosen on any
    measurement: the plane is what one filter reads, the warps' loads are then consecutive."""
    oh, ow = problem.out
    pixels = min(512, 1 << max(5, (oh * ow - 1).bit_length()))
    return DepthwiseTiles(pixels, max(1, min(4, pixels // 64)))
