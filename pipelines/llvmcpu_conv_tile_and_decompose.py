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
from pipelines.dispatch import Dispatch, DispatchKind

if TYPE_CHECKING:
    from iree.compiler import ir
from pipelines.llvmcpu_double_tiling import (ELEMENT_BYTES, MAX_WORKGROUP_TILE_BYTES, MIN_WORKGROUPS, cpu_tile_features,
                                             vector_registers)

PIPELINE = "#iree_cpu.pipeline<ConvTileAndDecomposeExpert>"
# The decomposed convolution's vector contraction spans output columns x output channels x input
# channels; IREE 3.13 rejects vectors of 32 KiB or more ("One or more operations with large
# vector sizes (32768 bytes) were found"): every 4x64 register tile with 32 or 64 input channels
# per step failed so on the 4x56x56x64 sample.
MAX_VECTOR_BYTES = 16384


def _tunable(dispatch: Dispatch) -> bool:
    """A 2-D convolution with one batch dim of more than one image. With a single image, IREE
    3.13 folds the unit batch away before the tuning spec runs and puts it back afterwards,
    replacing the op the spec annotated: the config is lost (checked: the dispatch then has no
    lowering_config at all), so such convolutions are left to the compiler."""
    c = dispatch.conv
    return (c is not None and len(c.output_image) == 2 and len(c.filter) == 2 and len(c.output_channel) == 1
            and len(c.input_channel) == 1 and not c.depth and len(c.batch) == 1
            and dispatch.loop_bounds[c.batch[0]] > 1)


class LLVMCPUConvTileAndDecompose(Pipeline):
    """Knobs (IREE's field names, per dim role): `distribution_oh/ow/oc`, the workgroup tile;
    `vector_common_parallel_ow/oc`, the register tile of output columns by output channels;
    `vector_reduction_ic`, input channels reduced per step."""

    name = "llvmcpu_conv_tile_and_decompose"
    model_flags = ()

    def supports(self, dispatch: Dispatch) -> bool:
        return (dispatch.target.backend == "llvm-cpu" and dispatch.kind == DispatchKind.CONVOLUTION
                and default_pipeline_is(dispatch, "iree_cpu.ConvTileAndDecomposeExpert") and _tunable(dispatch))

    def build_problem(self, dispatch: Dispatch) -> Problem:
        c = dispatch.conv
        assert c is not None  # supports() holds
        oh, ow = dispatch.sizes(c.output_image)
        [oc], [ic], [batch] = dispatch.sizes(c.output_channel), dispatch.sizes(c.input_channel), dispatch.sizes(c.batch)
        acc_bytes = ELEMENT_BYTES.get(dispatch.out_type, 4)
        lanes = max(1, dispatch.target.native_vector_bytes // acc_bytes)
        regs = vector_registers(dispatch)

        p = Problem()
        dist_oh = p.add_knob(IntKnob.of("distribution_oh", tiling.tile_candidates(oh, 1, 64)))
        dist_ow = p.add_knob(IntKnob.of("distribution_ow", tiling.tile_candidates(ow, 1, 256)))
        dist_oc = p.add_knob(IntKnob.of("distribution_oc", tiling.tile_candidates(oc, 1, 512)))
        vec_ow = p.add_knob(IntKnob.of("vector_common_parallel_ow", tiling.powers_of_two(1, min(ow, 32))))
        vec_oc_choices = [v for v in tiling.powers_of_two(1, min(oc, 8 * lanes)) if v % lanes == 0 or v == oc]
        vec_oc = p.add_knob(IntKnob.of("vector_common_parallel_oc", vec_oc_choices or [oc]))
        red_ic = p.add_knob(IntKnob.of("vector_reduction_ic", tiling.tile_candidates(ic, 1, 64)))

        acc_regs = vec_ow.var * tiling.ceil_div(vec_oc.var, lanes)
        workgroups = (batch * tiling.ceil_div(oh, dist_oh.var) * tiling.ceil_div(ow, dist_ow.var)
                      * tiling.ceil_div(oc, dist_oc.var))
        p.require(
            # The register tile sits inside the workgroup tile.
            dist_ow.var % vec_ow.var == 0,
            dist_oc.var % vec_oc.var == 0,
            # Accumulators, one vector of filter values and a broadcast input stay in registers.
            tiling.within(acc_regs + tiling.ceil_div(vec_oc.var, lanes) + 1, regs),
            tiling.within(dist_oh.var * dist_ow.var * dist_oc.var * acc_bytes, MAX_WORKGROUP_TILE_BYTES),
            tiling.within(vec_ow.var * vec_oc.var * red_ic.var * acc_bytes, MAX_VECTOR_BYTES),
        )
        # Most important first: a register tile that fills at least half the register file,
        # enough workgroups for the cores, whole tiles (no partial tiles), at least half a
        # vector of input channels per reduction step.
        p.prefer("fill_registers", acc_regs * 2 >= regs)
        p.prefer("enough_workgroups", workgroups >= MIN_WORKGROUPS)
        p.prefer("whole_tiles", z3.And(oh % dist_oh.var == 0, ow % dist_ow.var == 0, oc % dist_oc.var == 0))
        p.prefer("vector_ic_step", red_ic.var >= min(ic, max(1, lanes // 2)))
        p.diversify(vec_ow.name, vec_oc.name, red_ic.name, dist_oh.name, dist_ow.name, dist_oc.name)
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
        dist[batch], vec[batch] = 1, 1  # one image per workgroup, as the compiler's configs have
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
        summary = (f"wg {s['distribution_oh']}x{s['distribution_ow']}x{s['distribution_oc']} "
                   f"vec {s['vector_common_parallel_ow']}x{s['vector_common_parallel_oc']} ic{s['vector_reduction_ic']}")
        return tiled_config(s, lowering, translation, summary, expect_root_op=dispatch.op_name)
