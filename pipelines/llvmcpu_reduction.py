"""llvm-cpu DoubleTilingExpert for reductions (softmax, LayerNorm/RMSNorm-style normalizations,
row sums): the rows a workgroup takes, the rows a vector step covers and the vector width along
the reduced dimension.

IREE 3.13 configures the root reduction with `distribution`, `vector_common_parallel` and
`vector_reduction` tiles, and gives the dispatch's other ops (a softmax's max reduction and
division) the same vector tiles (`vector_common_parallel`, and `vector_reduction` or
`vector_inner_parallel` over the reduced dimension). A config here is the compiler's own config,
read from the dispatch, with these knobs changed in every op alike:

- `distribution_outer`, `distribution_inner`: the workgroup tile of the two innermost parallel
  loops (rows per workgroup);
- `vector_common_parallel_inner`: rows per vector step (the innermost parallel loop);
- `vector_reduction`: elements per vector step along the reduced loop."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping


from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, default_pipeline_is
from pipelines.dispatch import REDUCTION_KINDS, Dispatch
from pipelines.llvmcpu_common import (ELEMENT_BYTES, levels_span_loops, prefer_near_default, retiled_config,
                                      vector_registers)
from pipelines.printed_config import tiling_level

if TYPE_CHECKING:
    from iree.compiler import ir

ROOT_LEVELS = ("distribution", "vector_common_parallel", "vector_reduction")


def _dims(dispatch: Dispatch) -> tuple[int | None, int, int]:
    """The outer and inner parallel loops the knobs tile, and the reduced loop."""
    parallel = dispatch.m_dims
    return (parallel[-2] if len(parallel) > 1 else None), parallel[-1], dispatch.k_dims[-1]


def default_knobs(dispatch: Dispatch) -> dict[str, int]:
    """The compiler's own config as this pipeline's knobs."""
    text = dispatch.default.lowering_config
    dist, vec, red = (tiling_level(text, level) for level in ROOT_LEVELS)
    outer, inner, r = _dims(dispatch)
    knobs = {"distribution_inner": dist[inner], "vector_common_parallel_inner": vec[inner], "vector_reduction": red[r]}
    if outer is not None:
        knobs["distribution_outer"] = dist[outer]
    return knobs


def _readable(dispatch: Dispatch) -> bool:
    return bool(dispatch.m_dims and dispatch.k_dims) and levels_span_loops(dispatch, ROOT_LEVELS)


class LLVMCPUReduction(Pipeline):
    name = "llvmcpu_reduction"

    def supports(self, dispatch: Dispatch) -> bool:
        return (dispatch.target.backend == "llvm-cpu" and dispatch.kind in REDUCTION_KINDS
                and default_pipeline_is(dispatch, "iree_cpu.DoubleTilingExpert") and _readable(dispatch))

    def build_problem(self, dispatch: Dispatch) -> Problem:
        b = dispatch.loop_bounds
        outer, inner, r = _dims(dispatch)
        default = default_knobs(dispatch)
        lanes = max(1, dispatch.target.native_vector_bytes // ELEMENT_BYTES.get(dispatch.lhs_type, 4))
        regs = vector_registers(dispatch)

        p = Problem()
        knobs = {}
        if outer is not None:
            knobs["distribution_outer"] = p.add_knob(IntKnob.of(
                "distribution_outer", sorted({*tiling.tile_candidates(b[outer], 1, 64), default["distribution_outer"]})))
        knobs["distribution_inner"] = p.add_knob(IntKnob.of(
            "distribution_inner", sorted({*tiling.tile_candidates(b[inner], 1, 256), default["distribution_inner"]})))
        knobs["vector_common_parallel_inner"] = p.add_knob(IntKnob.of(
            "vector_common_parallel_inner",
            sorted({*tiling.powers_of_two(1, min(16, b[inner])), default["vector_common_parallel_inner"]})))
        knobs["vector_reduction"] = p.add_knob(IntKnob.of(
            "vector_reduction", sorted({*tiling.tile_candidates(b[r], 1, 8 * lanes), default["vector_reduction"]})))
        dist, vec, red = (knobs["distribution_inner"].var, knobs["vector_common_parallel_inner"].var,
                          knobs["vector_reduction"].var)
        # The vector step sits inside the workgroup tile; the tile a vector step reads (rows x
        # reduced elements) fits the register file.
        p.require(dist % vec == 0)
        p.require(vec * tiling.ceil_div(red, lanes) <= regs)
        workgroups = tiling.ceil_div(b[inner], dist)
        if outer is not None:
            workgroups = workgroups * tiling.ceil_div(b[outer], knobs["distribution_outer"].var)
        prefer_near_default(p, knobs, default, workgroups, red % lanes == 0)
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        import math

        b = dispatch.loop_bounds
        outer, inner, r = _dims(dispatch)
        rows = -(-b[inner] // int(s["distribution_inner"]))
        if outer is not None:
            rows *= -(-b[outer] // int(s["distribution_outer"]))
        return {"workgroups": math.log2(rows), "vector_tile": math.log2(int(s["vector_common_parallel_inner"])
                                                                         * int(s["vector_reduction"]))}

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        outer, inner, r = _dims(dispatch)
        new = {("distribution", inner): int(s["distribution_inner"]),
               ("vector_common_parallel", inner): int(s["vector_common_parallel_inner"]),
               ("vector_reduction", r): int(s["vector_reduction"]),
               ("vector_inner_parallel", r): int(s["vector_reduction"])}
        if outer is not None:
            new[("distribution", outer)] = int(s["distribution_outer"])
        summary = (f"wg {s.get('distribution_outer', '-')}x{s['distribution_inner']} rows, "
                   f"vec {s['vector_common_parallel_inner']} rows x {s['vector_reduction']}")
        return retiled_config(dispatch, s, new, summary, ctx)
