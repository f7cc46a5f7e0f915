"""LLVMGPU TileAndFuse for 2-D windows on cuda and rocm: pooling (max or average over a window,
NCHW or NHWC, as a `linalg.pooling_*` op or the `linalg.generic` IREE forms when the
channels-last pass reads the input NHWC and the output stays NCHW) and depthwise convolutions
(a filter window per channel, no channel contraction: ConvNeXt's 7x7, MobileNet's and
EfficientNet's 3x3 and 5x5, as `onnx.Conv` with `group` = channels imports). The knobs: the
workgroup tile over the channels, the output rows and the output columns, and the elements one
thread computes along the channels and the columns.

IREE 3.13 configures such a dispatch with `workgroup`, `thread` and `reduction` tiles: one
output element a thread, a small workgroup (32 threads on cuda: [1, 1, 4, 8] over n, c, oh, ow
for ResNet's stem pooling), the whole window in one reduction step. Where the input is NHWC and
the output NCHW, a subgroup's threads then read one channel at 32 different pixels, 128 bytes
apart for 64 f16 channels: ResNet-50's stem pooling ran 0.058 ms in the model on the H100 for
16 MB of traffic (about a tenth of the memory's bandwidth). A config here is the compiler's own
with these knobs changed:

- `workgroup_channels`, `workgroup_rows`, `workgroup_columns`: the workgroup tile of the
  channel loop, the output rows and the output columns (the batch loop stays at 1 a workgroup);
- `thread_channels`, `thread_columns`: the elements a thread computes along the channels and
  along the columns (a vector load or store where that loop is contiguous in memory).

For a depthwise convolution IREE 3.13's config is worse: a workgroup of 32 threads over 32
channels of one output pixel (workgroup [1, 1, 1, 32] over n, oh, ow, c for ConvNeXt-T's first
7x7, 8x96x56x56), so a subgroup reads and writes 32 channels a plane apart: the four 7x7
depthwise shapes of ConvNeXt-T took 2.3 ms of its 4.7 ms on an H200 (the 2-D linear layers
rewritten; BENCHMARKS.md), where cuDNN's take a fraction of that.

The window is reduced as the compiler does (whole, in one step, for pooling; a depthwise
convolution keeps its reduction tiles); the workgroup size follows,
linearized ([threads, 1, 1], as IREE's own configs have it). Which order the threads take the
tile in decides which accesses coalesce; the search times both kinds of tile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import z3

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, default_pipeline_is
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmgpu_common import ELEMENT_BYTES, retiled_default
from pipelines.model_flags import PAD_INTO_CONSUMER, PAD_INTO_PRODUCER
from pipelines.printed_config import mma_kind, tiling_level

if TYPE_CHECKING:
    from iree.compiler import ir

MAX_VECTOR_BYTES = 16
MAX_TILE = 64  # the largest workgroup tile offered along one loop
# Workgroups that fill a GPU at one or two a multiprocessor (the H100 has 132, MI300X 304).
ENOUGH_WORKGROUPS = 256


def _loops(dispatch: Dispatch) -> dict[str, int] | None:
    """The loops the knobs tile, by role: "channels", "rows", "columns"; None for a dispatch that
    is not a 2-D window: a pooling window (a batch loop, one channel loop that the window does
    not read, a 2-D output image, a window and nothing else) or a depthwise convolution (one
    batch loop, one depth loop: the channel the filter is read at, a 2-D output image and window)."""
    conv = dispatch.conv
    if (conv is None or conv.input_channel or conv.output_channel or len(conv.output_image) != 2
            or len(conv.filter) != 2):
        return None
    if len(conv.batch) == 2 and not conv.depth:
        channels = conv.batch[1]
    elif _depthwise(dispatch):
        channels = conv.depth[0]
    else:
        return None
    return {"channels": channels, "rows": conv.output_image[0], "columns": conv.output_image[1]}


def _depthwise(dispatch: Dispatch) -> bool:
    conv = dispatch.conv
    return conv is not None and len(conv.batch) == 1 and len(conv.depth) == 1


def _tiles(dispatch: Dispatch) -> tuple[list[int], list[int]] | None:
    """The compiler's workgroup and thread tiles where its config is the kind described above:
    every tile given, the batch loop one thread's work, a pooling window reduced whole (a
    depthwise convolution's reduction tiles are kept as they are; its MMA-free kind: _its_kind)."""
    text = dispatch.default.lowering_config
    wg, th, red = (tiling_level(text, level) for level in ("workgroup", "thread", "reduction"))
    rank = len(dispatch.loop_bounds)
    if dispatch.fused or any(len(t) != rank for t in (wg, th, red)):
        return None
    conv = dispatch.conv
    if conv is None or (not _depthwise(dispatch) and any(red[d] != dispatch.loop_bounds[d] for d in conv.filter)):
        return None
    if wg[conv.batch[0]] != 1:
        return None
    return wg, th


def _its_kind(dispatch: Dispatch) -> bool:
    """A pooling window or depthwise convolution the compiler gives TileAndFuse on a GPU target."""
    return (dispatch.target.backend in ("cuda", "rocm") and dispatch.kind == DispatchKind.CONVOLUTION
            and _loops(dispatch) is not None and default_pipeline_is(dispatch, "iree_gpu.TileAndFuse")
            and not mma_kind(dispatch.default.lowering_config))


def _written_role(dispatch: Dispatch, loops: Mapping[str, int]) -> str | None:
    """The role of the loop the output is contiguous along (the columns for NCHW, the channels
    for NHWC)."""
    output = dispatch.operand_dims[-1] if dispatch.operand_dims else ()
    return next((role for role, d in loops.items() if output and output[-1] == d), None)


class LLVMGPUTileAndFusePooling(Pipeline):
    name = "llvmgpu_tile_and_fuse_pooling"
    aliases = ("llvmgpu_tile_and_fuse",)

    def supports(self, dispatch: Dispatch) -> bool:
        return _its_kind(dispatch) and bool(dispatch.default.subgroup_size) and _tiles(dispatch) is not None

    def model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """A model with a depthwise convolution over a window is also tried with the input's
        padding fused into the op that produces it, and into the convolution (PAD_INTO_PRODUCER,
        PAD_INTO_CONSUMER: no `slow_memcpy` dispatch copying the input into a padded buffer),
        each judged with the convolutions it forms tuned first."""
        return self.tuned_model_flags_for(dispatch)

    def tuned_model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        conv = dispatch.conv
        if _its_kind(dispatch) and _depthwise(dispatch) and conv is not None \
                and any(dispatch.loop_bounds[d] > 1 for d in conv.filter):
            return (PAD_INTO_PRODUCER, PAD_INTO_CONSUMER)
        return ()

    def declines(self, dispatch: Dispatch) -> str | None:
        if _its_kind(dispatch) and _tiles(dispatch) is None:
            return ("the compiler's TileAndFuse config of this window tiles the batch (or a pooling window's "
                    "window), or configures several ops; not tunable yet")
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        loops = _loops(dispatch)
        assert loops is not None and _tiles(dispatch) is not None
        b = dispatch.loop_bounds
        subgroup = dispatch.default.subgroup_size or 32
        max_threads = dispatch.target.max_threads_per_workgroup or 1024
        lanes = max(1, MAX_VECTOR_BYTES // max(ELEMENT_BYTES.get(dispatch.lhs_type, 4),
                                              ELEMENT_BYTES.get(dispatch.out_type, 4)))

        p = Problem()
        wg = {role: p.add_knob(IntKnob.of(f"workgroup_{role}", [t for t in tiling.divisors(b[d]) if t <= MAX_TILE])).var
              for role, d in loops.items()}
        th = {role: p.add_knob(IntKnob.of(f"thread_{role}", [v for v in (1, 2, 4, 8) if v <= lanes])).var
              for role in ("channels", "columns")}
        th["rows"] = z3.IntVal(1)
        p.require(*(wg[role] % th[role] == 0 for role in loops))
        threads = z3.Product(*(wg[role] / th[role] for role in loops))
        p.require(threads % subgroup == 0, threads <= max_threads)
        # One image a workgroup: the tiles of the channels, rows and columns, times the images.
        workgroups = 1
        for role, d in loops.items():
            workgroups = workgroups * (b[d] / wg[role])
        workgroups = workgroups * b[dispatch.conv.batch[0]]
        # Most important first: enough workgroups to fill the GPU; 64 to 256 threads a workgroup
        # (the compiler's 32 leave a multiprocessor's schedulers idle); a thread's outputs a vector
        # along the loop the output is contiguous in (16 bytes of f16 along the columns for NCHW).
        p.prefer("enough_workgroups", workgroups >= ENOUGH_WORKGROUPS)
        p.prefer("busy_workgroups", z3.And(threads >= 64, threads <= 256))
        written = _written_role(dispatch, loops)
        if written in th:
            p.prefer("vector_writes", th[written] * 2 >= lanes)
        p.diversify(*(k.name for k in p.knobs))
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        import math

        return {f"{level}_{role}": math.log2(int(s.get(f"{level}_{role}", 1)))
                for level in ("workgroup", "thread") for role in ("channels", "rows", "columns")}

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        loops, tiles = _loops(dispatch), _tiles(dispatch)
        assert loops is not None and tiles is not None
        wg, th = list(tiles[0]), list(tiles[1])
        for role, d in loops.items():
            wg[d], th[d] = int(s[f"workgroup_{role}"]), int(s.get(f"thread_{role}", 1))
        lowering, translation, compilation, threads = retiled_default(dispatch, wg, th, ctx)
        tile = "x".join(str(s[f"workgroup_{role}"]) for role in ("channels", "rows", "columns"))
        return Config(knobs=dict(s), compilation_info=str(compilation),
                      summary=(f"wg {tile} (c x rows x cols), {s['thread_channels']}x{s['thread_columns']} "
                               f"per thread, {threads} threads"),
                      expect_root_op=dispatch.op_name, expect_lowering_config=str(lowering),
                      expect_translation_info=str(translation), codegen_spec=True)
