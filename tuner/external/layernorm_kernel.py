"""A layer normalization over the last dim as an external kernel: the problem and its tiles.

Y[r, c] = (X[r, c] - mean_r) / sqrt(var_r + eps) * W[c] + B[c] over `rows` rows of `c` values,
the statistics and the result in f32, rounded once. `channels_first`: X is NCHW, [n, c, p] with
rows = n x p, and the kernel reads it so and writes Y as [n, p, c] (the `Transpose(0, 2, 3, 1)`
torch exports before ConvNeXt's LayerNorm, taken in: one pass where IREE made a transpose and a
reduction)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LayerNormProblem:
    rows: int
    c: int
    eps: float
    element: str = "f16"
    bias: bool = True
    pixels: int = 0  # channels first: the pixels of an image (rows = images x pixels); 0: rows as they lie

    @property
    def channels_first(self) -> bool:
        return self.pixels > 0

    @property
    def name(self) -> str:
        layout = f"_nchw{self.pixels}" if self.channels_first else ""
        return f"layernorm_{self.rows}x{self.c}{layout}_{self.element}" + ("" if self.bias else "_nobias")


@dataclass(frozen=True)
class LayerNormTiles:
    """A workgroup's rows (all `c` of each, padded to a power of two) and its warps."""

    rows: int
    width: int
    warps: int
    stages: int = 1

    @property
    def label(self) -> str:
        return f"{self.rows} rows of {self.width} w{self.warps}"


def layernorm_tiles_for(problem: LayerNormProblem) -> LayerNormTiles:
    """Rows of c values padded to a power of two, 8192 values a workgroup (at least one row), four
    warps (eight from 4096 values a row). Not chosen on any measurement."""
    width = 1 << max(4, (problem.c - 1).bit_length())
    return LayerNormTiles(max(1, 8192 // width), width, 8 if width >= 4096 else 4)


@dataclass(frozen=True)
class RmsNormProblem:
    """Y[r, c] = W[c] * round(X[r, c] / sqrt(mean_c X[r, c]^2 + eps)) over `rows` rows of `c`
    values: transformers' RMSNorm (Llama's, Mistral's, Qwen2's) as torch exports it, the
    statistics in f32, the normalized value rounded to X's type before the scale (as torch rounds
    it), the product rounded once. With `weight_f32`, W is f32 and the product is taken before
    the one rounding (Gemma's RMSNorm: `(1 + w)` in f32, which the exporter folds to one f32
    constant). Its tiles are a layer norm's (`layernorm_tiles_for`)."""

    rows: int
    c: int
    eps: float
    element: str = "f16"
    weight_f32: bool = False

    @property
    def name(self) -> str:
        return f"rmsnorm_{self.rows}x{self.c}_{self.element}" + ("_w32" if self.weight_f32 else "")
