"""The GEMM a GPU TileAndFuse config tiles: a contraction's innermost M, N and K, or a 2-D
convolution's implicit GEMM (channels last or first), and the lowering-config arrays a knob
assignment sets on it (IREE-free: the pipeline in pipelines.llvmgpu_tile_and_fuse builds its
problem and its configs from these)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from pipelines.base import KnobValue
from pipelines.dispatch import Dispatch, MmaIntrinsic
from pipelines.llvmgpu_common import ELEMENT_BYTES, compatible_intrinsics, subgroup_size
from pipelines.printed_config import mma_kind, tiling_level


@dataclass(frozen=True)
class GemmView:
    """The dispatch as the GEMM its lowering config tiles. For a contraction, the config indexes
    its loops and M, N, K are the innermost M, N, K dims (other dims get unit tiles). For a
    convolution on the implicit-GEMM path, the config indexes the parallel loops followed by one
    K (filter x input channels). Channels last (NHWC), M is the output column and N the output
    channel; channels first (NCHW), M is the output channel and N the output column
    (`rows_on_n`), as IREE 3.13's own configs have them (NCHW [1, 128, 1, 32, 0]: 128 channels,
    32 columns). A tile of columns wider than a row spills into output rows (`rows`)."""

    rank: int
    m: int  # positions in the config
    n: int
    k: int
    m_extent: int
    n_extent: int
    k_extent: int
    unit_parallel: tuple[int, ...]  # other parallel positions: tile 1 per workgroup
    unit_reduction: tuple[int, ...]  # other reduction positions: one step each
    rows: tuple[int, int] | None = None  # convolutions: (position, extent) of the output rows
    rows_on_n: bool = False  # the output rows extend N (channels first), else M
    images: tuple[int, int] | None = None  # convolutions: (position, extent) of the batch, if any
    direct: bool = False  # a convolution configured on its own loops (direct_convolution), K its input channels

    @property
    def columns(self) -> int:
        """A convolution's output columns: the GEMM side they lie on is N channels first, else M."""
        return self.n_extent if self.rows_on_n else self.m_extent

    @property
    def m_total(self) -> int:
        return self.m_extent * (self.rows[1] if self.rows and not self.rows_on_n else 1)

    @property
    def n_total(self) -> int:
        return self.n_extent * (self.rows[1] if self.rows and self.rows_on_n else 1)


def gemm_view(dispatch: Dispatch) -> GemmView:
    """The dispatch as the GEMM its config tiles. A direct convolution (direct_convolution) is
    the channels-last implicit GEMM on the convolution's own loops: M its output columns (then
    rows, then images), N its output channels, K its input channels, one filter tap per step."""
    b = dispatch.loop_bounds
    c = dispatch.conv
    if direct_convolution(dispatch):
        row, col = c.output_image
        ic = c.input_channel[0]
        return GemmView(len(b), col, c.output_channel[0], ic, b[col], b[c.output_channel[0]], b[ic],
                        tuple(c.batch), tuple(c.filter), rows=(row, b[row]),
                        images=(c.batch[0], b[c.batch[0]]) if c.batch else None, direct=True)
    if c is None:
        md, nd, kd = dispatch.m_dims[-1], dispatch.n_dims[-1], dispatch.k_dims[-1]
        image = image_rows(dispatch)
        if image:
            # Columns, rows and images of an output image (a 1x1 convolution made channels last):
            # the M tile lies on whole padded rows, then images, as a convolution's does.
            row, images = image[-2], image[:-2]
            outer = tuple(d for d in dispatch.m_dims if d not in image)
            return GemmView(len(b), md, nd, kd, b[md], b[nd], b[kd],
                            (*dispatch.batch_dims, *outer, *dispatch.n_dims[:-1]), dispatch.k_dims[:-1],
                            rows=(row, b[row]), images=(images[0], b[images[0]]) if images else None)
        return GemmView(len(b), md, nd, kd, b[md], b[nd], b[kd],
                        (*dispatch.batch_dims, *dispatch.m_dims[:-1], *dispatch.n_dims[:-1]), dispatch.k_dims[:-1])
    parallel = sorted((*c.batch, *c.output_image, *c.output_channel))
    at = {d: i for i, d in enumerate(parallel)}
    row, col = c.output_image
    k_extent = 1
    for d in (*c.filter, *c.input_channel):
        k_extent *= b[d]
    channel = c.output_channel[0]
    images = (at[c.batch[0]], b[c.batch[0]]) if c.batch else None
    if channels_first(dispatch):
        return GemmView(len(parallel) + 1, at[channel], at[col], len(parallel), b[channel], b[col], k_extent,
                        tuple(at[d] for d in c.batch), (), rows=(at[row], b[row]), rows_on_n=True, images=images)
    return GemmView(len(parallel) + 1, at[col], at[channel], len(parallel), b[col],
                    b[channel], k_extent, tuple(at[d] for d in c.batch), (), rows=(at[row], b[row]), images=images)


def image_rows(dispatch: Dispatch) -> tuple[int, ...]:
    """A contraction's M loops that are an output image's (images,) rows and columns: its last
    two or three M loops, consecutive and innermost-last, where the columns are not whole MMA
    tiles (ROW_MULTIPLE). IREE 3.13 forms such a contraction from a channels-last 1x1
    convolution whose result is written into the next convolution's padded input (ResNet-50's
    8x14x14x256x1024) and configures it as a convolution: workgroup [2, 2, 16, 64, 0] is 2
    images of 2 rows of 14 columns padded to 16. () where the M loops are not such an image."""
    m = dispatch.m_dims
    if dispatch.conv is not None or len(m) < 2 or dispatch.loop_bounds[m[-1]] % ROW_MULTIPLE == 0:
        return ()
    for image in (m[-3:], m[-2:]):
        if len(image) >= 2 and all(b == a + 1 for a, b in zip(image, image[1:])):
            return tuple(image)
    return ()


ROW_MULTIPLE = 16  # the largest MMA tile side among the GPU targets' intrinsics


# How a tile along the columns' GEMM side lies on a convolution's output image. The columns are
# padded to a multiple of the MMA's size there (IREE 3.13 pads 14 columns to 16, 7 to 16 and 56
# to 64 in its own configs of ResNet's 3x3 convolutions: workgroup [4, 2, 16, 32, 0] with padding
# [4, 2, 16, 32, 128] for 8x14x14x256). A tile no wider than a padded row divides it; a wider one
# spans whole padded rows: as many rows as the row count shares with the spans, then as many
# images as are left, which must divide the batch (the compiler's 4 images of 2 rows above; 8
# images of one row for the 7-row output); a tile wider than a row but not a multiple of it pads
# that one row to the tile, where that adds at most a quarter (112 columns in 128, the compiler's
# config of ResNet's stem). The same rule in integers (column_tiles) and in Z3
# terms (column_tiles_fit). A subgroup's tile is the workgroup's divided among its subgroups,
# innermost first: columns (in MMA tiles), then rows, then images (subgroup_placement), which
# gives the compiler's subgroup [2, 1, 1, 2, 0] (2 images of one row) for both outputs.


def padded_columns(view: GemmView, mma: int) -> int:
    return -(-view.columns // mma) * mma


def _spans(view: GemmView, spans: int) -> tuple[int, int] | None:
    """Padded rows that `spans` of them make as (rows, images), or None where they lie on nothing."""
    rows = math.gcd(view.rows[1], spans)
    images = spans // rows
    return (rows, images) if (view.images[1] if view.images else 1) % images == 0 else None


def column_tiles(view: GemmView, tile: int, mma: int) -> tuple[int, int, int] | None:
    """A column-side tile of `tile` GEMM rows as (columns, rows, images) of the output image, or
    None where it does not lie on whole padded rows or images."""
    padded = padded_columns(view, mma)
    if tile <= padded:
        return (tile, 1, 1) if padded % tile == 0 else None
    if tile % padded:
        # One row padded to the tile, where that adds at most a quarter (the compiler's own
        # config of ResNet's stem: 112 columns in a tile of 128).
        return (tile, 1, 1) if tile * 4 <= view.columns * 5 else None
    placed = _spans(view, tile // padded)
    return (padded, *placed) if placed else None


def column_tiles_fit(view: GemmView, tile, mma):
    """column_tiles(view, tile, mma) is not None, for Z3 terms `tile` and `mma` (a tile spans at
    most MAX_SPANS padded rows)."""
    import z3

    padded = (view.columns + mma - 1) / mma * mma
    wide = [s for s in range(2, MAX_SPANS + 1) if _spans(view, s)]
    return z3.Or(z3.And(tile <= padded, padded % tile == 0),
                 z3.And(tile > padded, tile % padded != 0, tile * 4 <= view.columns * 5),
                 z3.And(tile > padded, z3.Or([tile == padded * s for s in wide]) if wide else z3.BoolVal(False)))


MAX_SPANS = 128  # padded rows of at least 8 columns in a side of at most 8 x 8 x 16


def workgroup_count(dispatch: Dispatch, view: GemmView, wg_m, wg_n, mma_m, mma_n):
    """The workgroups a config launches (Z3 terms, or ints): the tiles of the GEMM's two sides,
    times every parallel loop a workgroup takes one step of. A convolution's or image
    contraction's column side is counted over its whole output grid: each row padded to whole
    MMA tiles, then rows, then images (a tile wider than a padded row that is no multiple of it
    covers one row). The images are counted once, in the grid (ResNet-50's 8x14x14x256x1024
    contraction: 112 workgroups for the compiler's 64x64 tiles; counted without its 8 images,
    every config near the compiler's but the smallest read as too few, and the search tried
    larger tiles)."""
    import z3

    from constraints.tiling import ceil_div

    terms = any(isinstance(x, z3.ArithRef) for x in (wg_m, wg_n, mma_m, mma_n))
    up = ceil_div if terms else (lambda a, c: -(-a // c))
    b = dispatch.loop_bounds
    parallel = math.prod(b[d] for d in range(len(b)) if d not in dispatch.k_dims)
    if view.rows is None:
        outer = max(1, parallel // (view.m_extent * view.n_extent))
        return outer * up(view.m_extent, wg_m) * up(view.n_extent, wg_n)
    side, mma, other, other_tile = ((wg_n, mma_n, view.m_extent, wg_m) if view.rows_on_n
                                    else (wg_m, mma_m, view.n_extent, wg_n))
    rows, images = view.rows[1], view.images[1] if view.images else 1
    padded = up(view.columns, mma) * mma
    spread = up(padded * rows * images, side)
    if terms:
        grid = z3.If(z3.And(side > padded, side % padded != 0), rows * images, spread)
    else:
        grid = rows * images if side > padded and side % padded else spread
    outer = max(1, parallel // (view.columns * rows * images * other))
    return outer * grid * up(other, other_tile)


def subgroup_placement(placed: tuple[int, int, int], count: int, mma: int) -> tuple[int, int, int]:
    """A subgroup's share (columns, rows, images) of a workgroup's column-side tile `placed`,
    divided among `count` subgroups innermost first: its columns (in MMA tiles), then its rows,
    then its images."""
    columns, rows, images = placed
    shares = []
    for extent in (columns // mma, rows, images):
        f = math.gcd(extent, count)
        shares.append(extent // f)
        count //= f
    if count != 1:
        raise ValueError(f"{placed} does not divide among its subgroups")
    return shares[0] * mma, shares[1], shares[2]


def channels_first(dispatch: Dispatch) -> bool:
    """A convolution whose output channel loop comes before its output image loops (NCHW)."""
    c = dispatch.conv
    return c is not None and c.output_channel[0] < min(c.output_image)


def _plain_2d(dispatch: Dispatch) -> bool:
    """A 2-D convolution with no depthwise multiplier, at most one batch loop, and every
    reduction loop after the parallel ones."""
    c = dispatch.conv
    if c is None or c.depth or len(c.output_image) != 2 or len(c.output_channel) != 1 or len(c.batch) > 1:
        return False
    return max((*c.batch, *c.output_image, *c.output_channel)) < min((*c.filter, *c.input_channel))


def _channel_innermost(dispatch: Dispatch) -> bool:
    """The output channel is the innermost parallel loop (NHWC)."""
    c = dispatch.conv
    return c.output_channel[0] == max((*c.batch, *c.output_image, *c.output_channel))


def igemm_convolution(dispatch: Dispatch) -> bool:
    """A 2-D convolution (_plain_2d) the compiler lowers as an implicit GEMM, the output channel
    either the innermost parallel loop (NHWC) or the one right after the batch, before the
    output rows and columns (NCHW)."""
    if not _plain_2d(dispatch):
        return False
    c = dispatch.conv
    channel = c.output_channel[0]
    image = tuple(sorted(c.output_image))
    layout_known = _channel_innermost(dispatch) or (
        image[1] == image[0] + 1 == channel + 2 and all(b < channel for b in c.batch))
    return layout_known and "use_igemm_convolution = true" in dispatch.default.translation_info


def direct_convolution(dispatch: Dispatch) -> bool:
    """A channels-last 2-D convolution (_plain_2d: loops n, oh, ow, f, then the filter and one
    input-channel loop) that the compiler configures on its own loops, IREE 3.13's direct
    convolution (--iree-codegen-llvmgpu-use-direct-convolution): its TileAndFuse config with
    `use_igemm_convolution = false` and an MMA intrinsic, a list per loop (reduction [0, 0, 0,
    0, 1, 1, 8]: one filter tap per step, 8 MMA K steps of input channels)."""
    if not _plain_2d(dispatch) or len(dispatch.conv.input_channel) != 1 or not _channel_innermost(dispatch):
        return False
    config = dispatch.default.lowering_config
    return ("use_igemm_convolution = false" in dispatch.default.translation_info and bool(mma_kind(config))
            and len(tiling_level(config, "reduction")) == len(dispatch.loop_bounds))


def tile_and_fuse_convolution(dispatch: Dispatch) -> bool:
    """A convolution TileAndFuse configures as a GEMM: an implicit GEMM or a direct one."""
    return igemm_convolution(dispatch) or direct_convolution(dispatch)


@dataclass(frozen=True)
class GemmTiles:
    """A GPU GEMM config's tile arithmetic, one home for both the Z3 problem (knob variables and
    the intrinsic's shape as Z3 terms) and the configs (integers): `s` maps subgroups_m,
    subgroup_m, subgroups_n, subgroup_n and reduction_k to either."""

    s: Mapping
    mma_m: object
    mma_n: object
    mma_k: object

    @classmethod
    def of(cls, s: Mapping[str, KnobValue], intrinsic: MmaIntrinsic) -> "GemmTiles":
        """From an assignment, in integers."""
        return cls({k: int(s[k]) for k in ("subgroups_m", "subgroup_m", "subgroups_n", "subgroup_n", "reduction_k")},
                   intrinsic.m, intrinsic.n, intrinsic.k)

    @property
    def sub_m(self):
        """A subgroup's M tile (its MMA tiles along M, in elements)."""
        return self.s["subgroup_m"] * self.mma_m

    @property
    def sub_n(self):
        return self.s["subgroup_n"] * self.mma_n

    @property
    def wg_m(self):
        """The workgroup's M tile: its subgroups along M times theirs."""
        return self.s["subgroups_m"] * self.sub_m

    @property
    def wg_n(self):
        return self.s["subgroups_n"] * self.sub_n

    @property
    def k_tile(self):
        """The K step: reduction_k MMA K tiles."""
        return self.s["reduction_k"] * self.mma_k

    def threads(self, subgroup_size):
        """The workgroup's threads: its subgroups."""
        return self.s["subgroups_m"] * self.s["subgroups_n"] * subgroup_size

    def accumulators(self, subgroup_size):
        """Accumulator registers per thread: a subgroup's M x N tile over its threads."""
        return self.sub_m * self.sub_n / subgroup_size


def gemm_features(dispatch: Dispatch, view: GemmView, intrinsic: MmaIntrinsic,
                  s: Mapping[str, KnobValue]) -> dict[str, float]:
    """A GPU GEMM config's derived quantities (log2 where they multiply)."""
    subgroup = subgroup_size(dispatch)
    tiles = GemmTiles.of(s, intrinsic)
    wg_m, wg_n, k_tile = tiles.wg_m, tiles.wg_n, tiles.k_tile
    m, n, k = view.m_total, view.n_total, view.k_extent
    batch = max(1, dispatch.flops // (2 * m * n * k))  # batch dims (and unit-tiled M, N dims)
    count = -(-m // wg_m) * -(-n // wg_n)
    padded = (-(-m // wg_m) * wg_m) * (-(-n // wg_n) * wg_n) * (-(-k // k_tile) * k_tile)
    in_bytes = ELEMENT_BYTES.get(dispatch.lhs_type, 2)
    stages = max(1, int(s.get("prefetch_num_stages", 1)))
    return {
        "wg_m": math.log2(wg_m), "wg_n": math.log2(wg_n), "k_tile": math.log2(k_tile),
        "workgroups": math.log2(batch * count),
        "padding_waste": padded / (m * n * k) - 1.0,
        "threads": math.log2(tiles.threads(subgroup)),
        "shared_bytes": math.log2((wg_m + wg_n) * k_tile * in_bytes * stages),
        "accumulators": tiles.accumulators(subgroup),
        "tile_intensity": wg_m * wg_n / (wg_m + wg_n),
        "mma_m": intrinsic.m, "mma_n": intrinsic.n, "mma_k": intrinsic.k,
    }


@dataclass(frozen=True)
class TileSizes:
    """A TileAndFuse config's lowering-config arrays (one entry per config position) and sizes."""

    intrinsic: MmaIntrinsic
    workgroup: tuple[int, ...]
    reduction: tuple[int, ...]  # in MMA K steps
    subgroup: tuple[int, ...]  # in MMA tiles
    threads: int
    subgroup_size: int


def tile_sizes(dispatch: Dispatch, s: Mapping[str, KnobValue]) -> TileSizes:
    """The tiles a config sets, per position of the lowering config (IREE-free)."""
    intrinsic = compatible_intrinsics(dispatch)[int(s["mma_kind"])]
    view = gemm_view(dispatch)
    md, nd, kd, rank = view.m, view.n, view.k, view.rank
    workgroup, reduction, subgroup = [0] * rank, [0] * rank, [0] * rank
    for d in view.unit_parallel:
        workgroup[d] = 1
    for d in view.unit_reduction:
        reduction[d] = 1
    tiles = GemmTiles.of(s, intrinsic)
    wg_m, wg_n = tiles.wg_m, tiles.wg_n
    workgroup[nd] = wg_n
    reduction[kd] = int(s["reduction_k"])
    subgroup[md], subgroup[nd] = int(s["subgroup_m"]), int(s["subgroup_n"])
    workgroup[md] = wg_m
    if view.rows:
        # The column-side tile on the output image (column_tiles): columns, then whole (padded)
        # rows or images, in elements, as the compiler's own implicit-GEMM configs have it; a
        # subgroup's tile the same way within it. The columns are M channels last, N channels first.
        row = view.rows[0]
        pos, wg, sub, mma = ((nd, wg_n, tiles.sub_n, intrinsic.n) if view.rows_on_n else
                             (md, wg_m, tiles.sub_m, intrinsic.m))
        placed = column_tiles(view, wg, mma)
        if placed is None:
            raise ValueError(f"a tile of {wg} does not lie on the {view.columns} columns of {view.rows[1]} rows")
        columns, rows, images = placed
        workgroup[pos], workgroup[row] = columns, rows
        sub_columns, sub_rows, sub_images = subgroup_placement(placed, wg // sub, mma)
        subgroup[pos], subgroup[row] = sub_columns // mma, sub_rows
        if view.images:
            workgroup[view.images[0]], subgroup[view.images[0]] = images, sub_images
    lanes = subgroup_size(dispatch)
    return TileSizes(intrinsic, tuple(workgroup), tuple(reduction), tuple(subgroup), tiles.threads(lanes), lanes)
