"""llvm-cpu ConvTileAndDecomposeExpert for 2-D convolutions: distribution tiles over the output
rows, columns and channels, the vector tile over output columns and channels, and the reduction
step over input channels. The pipeline decomposes the 2-D convolution into 1-D ones, which needs
unit tiles on the output row and on both filter dims at the vector level, as the compiler's own
configs have."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import z3

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, default_pipeline_is, tiled_config
from pipelines.printed_config import tiling_level
from pipelines.dispatch import Dispatch, DispatchKind

if TYPE_CHECKING:
    from iree.compiler import ir
from pipelines.llvmcpu_common import ELEMENT_BYTES, MAX_WORKGROUP_TILE_BYTES, MIN_WORKGROUPS, vector_registers
from pipelines.llvmcpu_double_tiling import cpu_tile_features

PIPELINE = "#iree_cpu.pipeline<ConvTileAndDecomposeExpert>"
# The decomposed convolution's vector contraction spans output columns x output channels x input
# channels; IREE 3.13 rejects vectors of 32 KiB or more ("One or more operations with large
# vector sizes (32768 bytes) were found"): every 4x64 register tile with 32 or 64 input channels
# per step failed so on the 4x56x56x64 sample.
MAX_VECTOR_BYTES = 16384


def _tile_bytes(default: Mapping[str, int], acc_bytes: int) -> int:
    """The bytes of output the compiler's own workgroup tile holds (0 without one)."""
    if not default:
        return 0
    return (default["distribution_n"] * default["distribution_oh"] * default["distribution_ow"]
            * default["distribution_oc"] * acc_bytes)


def default_knobs(dispatch: Dispatch) -> dict[str, int]:
    """The compiler's own config for the convolution, as this pipeline's knobs (empty where it
    has none or another shape)."""
    c = dispatch.conv
    assert c is not None
    dist, vec, red = (tiling_level(dispatch.default.lowering_config, level)
                      for level in ("distribution", "vector_common_parallel", "vector_reduction"))
    rank = len(dispatch.loop_bounds)
    if not (len(dist) == len(vec) == len(red) == rank):
        return {}
    (oh, ow), [oc], [ic], [batch] = c.output_image, c.output_channel, c.input_channel, c.batch
    return {"distribution_n": dist[batch], "distribution_oh": dist[oh], "distribution_ow": dist[ow],
            "distribution_oc": dist[oc], "vector_common_parallel_ow": vec[ow], "vector_common_parallel_oc": vec[oc],
            "vector_reduction_ic": red[ic]}


SINGLE_IMAGE = ("a single-image convolution: IREE 3.13 folds its unit batch away before a tuning spec runs "
                "and puts it back afterwards, replacing the op the spec configured, so no spec config survives "
                "(checked: a spec written for the folded 6-loop op matches it, and the restored 7-loop op has no "
                "config at all); a batch of 2 or more images is tunable")


def _two_d(dispatch: Dispatch) -> bool:
    c = dispatch.conv
    return (c is not None and len(c.output_image) == 2 and len(c.filter) == 2 and len(c.output_channel) == 1
            and len(c.input_channel) == 1 and not c.depth and len(c.batch) <= 1)


def _single_image(dispatch: Dispatch) -> bool:
    c = dispatch.conv
    return c is not None and (not c.batch or dispatch.loop_bounds[c.batch[0]] == 1)


def _tunable(dispatch: Dispatch) -> bool:
    """A 2-D convolution with one batch dim of more than one image (SINGLE_IMAGE says why not one)."""
    return _two_d(dispatch) and not _single_image(dispatch)


class LLVMCPUConvTileAndDecompose(Pipeline):
    """Knobs (IREE's field names, per dim role): `distribution_n/oh/ow/oc`, the workgroup tile;
    `vector_common_parallel_ow/oc`, the register tile of output columns by output channels;
    `vector_reduction_ic`, input channels reduced per step."""

    name = "llvmcpu_conv_tile_and_decompose"
    model_flags = ()

    def supports(self, dispatch: Dispatch) -> bool:
        return (dispatch.target.backend == "llvm-cpu" and dispatch.kind == DispatchKind.CONVOLUTION
                and default_pipeline_is(dispatch, "iree_cpu.ConvTileAndDecomposeExpert") and _tunable(dispatch))

    def declines(self, dispatch: Dispatch) -> str | None:
        if (dispatch.target.backend == "llvm-cpu" and dispatch.kind == DispatchKind.CONVOLUTION
                and default_pipeline_is(dispatch, "iree_cpu.ConvTileAndDecomposeExpert") and _two_d(dispatch)
                and _single_image(dispatch)):
            return SINGLE_IMAGE
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        c = dispatch.conv
        assert c is not None  # supports() holds
        oh, ow = dispatch.sizes(c.output_image)
        [oc], [ic], [batch] = dispatch.sizes(c.output_channel), dispatch.sizes(c.input_channel), dispatch.sizes(c.batch)
        acc_bytes = ELEMENT_BYTES.get(dispatch.out_type, 4)
        lanes = max(1, dispatch.target.native_vector_bytes // acc_bytes)
        regs = vector_registers(dispatch)

        default = default_knobs(dispatch)
        p = Problem()

        def choices(name: str, values: list[int]) -> IntKnob:
            # The compiler's own value is always in the space (its neighbourhood is searched first).
            extra = default.get(name)
            return p.add_knob(IntKnob.of(name, sorted({*values, *([extra] if extra else [])})))

        dist_n = choices("distribution_n", tiling.tile_candidates(batch, 1, batch))
        dist_oh = choices("distribution_oh", tiling.tile_candidates(oh, 1, 64))
        dist_ow = choices("distribution_ow", tiling.tile_candidates(ow, 1, 256))
        dist_oc = choices("distribution_oc", tiling.tile_candidates(oc, 1, 512))
        # Output columns per register tile: the divisors of the row (the compiler's 7 of a
        # 28-wide row) and the powers of two.
        vec_ow = choices("vector_common_parallel_ow", tiling.tile_candidates(ow, 1, 32))
        vec_oc_choices = [v for v in tiling.powers_of_two(1, min(oc, 8 * lanes)) if v % lanes == 0 or v == oc]
        vec_oc = choices("vector_common_parallel_oc", vec_oc_choices or [oc])
        red_ic = choices("vector_reduction_ic", tiling.tile_candidates(ic, 1, 64))

        acc_regs = vec_ow.var * tiling.ceil_div(vec_oc.var, lanes)
        workgroups = (tiling.ceil_div(batch, dist_n.var) * tiling.ceil_div(oh, dist_oh.var)
                      * tiling.ceil_div(ow, dist_ow.var) * tiling.ceil_div(oc, dist_oc.var))
        p.require(
            # The register tile sits inside the workgroup tile.
            dist_ow.var % vec_ow.var == 0,
            dist_oc.var % vec_oc.var == 0,
            # Accumulators, one vector of filter values and a broadcast input stay in registers.
            tiling.within(acc_regs + tiling.ceil_div(vec_oc.var, lanes) + 1, regs),
            tiling.within(dist_n.var * dist_oh.var * dist_ow.var * dist_oc.var * acc_bytes,
                          max(MAX_WORKGROUP_TILE_BYTES, _tile_bytes(default, acc_bytes))),
            tiling.within(vec_ow.var * vec_oc.var * red_ic.var * acc_bytes, MAX_VECTOR_BYTES),
        )
        # Most important first: the compiler's own config with one or two knobs changed (its
        # neighbourhood: on held-out ResNet-50 convolutions, configs far from it ran 0.6-0.8x of
        # it), a register tile that fills at least half the register file, enough workgroups for
        # the cores, whole tiles (no partial tiles), at least half a vector of input channels per
        # reduction step.
        if default:
            same = z3.Sum(*(z3.If(p.knob(name).var == value, 1, 0) for name, value in default.items()))
            p.prefer("near_default", z3.And(same >= len(default) - 2, same < len(default)))
        p.prefer("fill_registers", acc_regs * 2 >= regs)
        p.prefer("enough_workgroups", workgroups >= MIN_WORKGROUPS)
        p.prefer("whole_tiles", z3.And(oh % dist_oh.var == 0, ow % dist_ow.var == 0, oc % dist_oc.var == 0))
        p.prefer("vector_ic_step", red_ic.var >= min(ic, max(1, lanes // 2)))
        p.diversify(vec_ow.name, vec_oc.name, red_ic.name, dist_oh.name, dist_ow.name, dist_oc.name, dist_n.name)
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        """As DoubleTilingExpert's: output columns as M, output channels as N, with the rows."""
        import math

        c = dispatch.conv
        assert c is not None  # supports() holds
        oh, ow = dispatch.sizes(c.output_image)
        [oc], [batch] = dispatch.sizes(c.output_channel), dispatch.sizes(c.batch)
        acc_bytes = ELEMENT_BYTES.get(dispatch.out_type, 4)
        lanes = max(1, dispatch.target.native_vector_bytes // acc_bytes)
        rows = int(s["distribution_oh"])
        out = cpu_tile_features(ow, oc, int(s["distribution_ow"]), int(s["distribution_oc"]),
                                 int(s["vector_common_parallel_ow"]), int(s["vector_common_parallel_oc"]), lanes,
                                 acc_bytes * rows)
        out["workgroups"] += math.log2(batch * -(-oh // rows))
        out["partial_tiles"] += float(bool(oh % rows))
        return out

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir
        from iree.compiler.dialects import iree_codegen

        c = dispatch.conv
        assert c is not None  # supports() holds
        rank = len(dispatch.loop_bounds)
        dist, vec, red = [0] * rank, [0] * rank, [0] * rank
        oh, ow = c.output_image
        [oc], [ic], [batch] = c.output_channel, c.input_channel, c.batch
        dist[batch], vec[batch] = int(s.get("distribution_n", 1)), 1  # one image per register tile
        dist[oh], dist[ow], dist[oc] = int(s["distribution_oh"]), int(s["distribution_ow"]), int(s["distribution_oc"])
        vec[oh], vec[ow], vec[oc] = 1, int(s["vector_common_parallel_ow"]), int(s["vector_common_parallel_oc"])
        for d in c.filter:
            red[d] = 1
        red[ic] = int(s["vector_reduction_ic"])
        # IREE 3.13's bindings have no constructor for #iree_cpu.lowering_config: parsed from
        # its canonical form, which the compiler's verifier checks on parse.
        with ctx:
            lowering = ir.Attribute.parse(f"#iree_cpu.lowering_config<distribution = {dist}, "
                                          f"vector_common_parallel = {vec}, vector_reduction = {red}>")
            translation = iree_codegen.TranslationInfoAttr.get(ir.Attribute.parse(PIPELINE))
        images = f"{s['distribution_n']}x" if int(s.get("distribution_n", 1)) > 1 else ""
        summary = (f"wg {images}{s['distribution_oh']}x{s['distribution_ow']}x{s['distribution_oc']} "
                   f"vec {s['vector_common_parallel_ow']}x{s['vector_common_parallel_oc']} ic{s['vector_reduction_ic']}")
        return tiled_config(s, lowering, translation, summary, expect_root_op=dispatch.op_name)
