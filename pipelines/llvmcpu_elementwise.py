"""llvm-cpu DoubleTilingExpert for all-parallel dispatches (transposes, elementwise work): the
workgroup tile and the vector tile over the two innermost loops.

IREE 3.13 configures such a dispatch's root op with `distribution` and `vector_common_parallel`
tiles. A config here is the compiler's own, read from the dispatch, with these knobs changed
(in every op it configures alike, where there are others):

- `distribution_outer`, `distribution_inner`: the workgroup tile of the two innermost loops;
- `vector_common_parallel_outer`, `vector_common_parallel_inner`: the vector tile there (a
  transpose's register block: rows x columns moved per step)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import z3

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, default_pipeline_is
from pipelines.dispatch import PARALLEL_KINDS, Dispatch
from pipelines.llvmcpu_common import (ELEMENT_BYTES, levels_span_loops, prefer_near_default, retiled_config,
                                      vector_registers)
from pipelines.printed_config import tiling_level

if TYPE_CHECKING:
    from iree.compiler import ir

ROOT_LEVELS = ("distribution", "vector_common_parallel")


def _loops(dispatch: Dispatch) -> dict[str, int]:
    """Which loop each knob suffix tiles: the innermost, and the one before it if any."""
    rank = len(dispatch.loop_bounds)
    return {"inner": rank - 1, **({"outer": rank - 2} if rank > 1 else {})}


def default_knobs(dispatch: Dispatch) -> dict[str, int]:
    """The compiler's own config as this pipeline's knobs."""
    dist, vec = (tiling_level(dispatch.default.lowering_config, level) for level in ROOT_LEVELS)
    out = {}
    for suffix, d in _loops(dispatch).items():
        out[f"distribution_{suffix}"] = dist[d]
        out[f"vector_common_parallel_{suffix}"] = vec[d]
    return out


def _readable(dispatch: Dispatch) -> bool:
    # Every knob's loop is tiled by the compiler, too (a zero there: a loop it leaves whole).
    return levels_span_loops(dispatch, ROOT_LEVELS) and all(v > 0 for v in default_knobs(dispatch).values())


class LLVMCPUElementwise(Pipeline):
    name = "llvmcpu_elementwise"

    def supports(self, dispatch: Dispatch) -> bool:
        return (dispatch.target.backend == "llvm-cpu" and dispatch.kind in PARALLEL_KINDS
                and default_pipeline_is(dispatch, "iree_cpu.DoubleTilingExpert") and _readable(dispatch))

    def build_problem(self, dispatch: Dispatch) -> Problem:
        b = dispatch.loop_bounds
        default = default_knobs(dispatch)
        lanes = max(1, dispatch.target.native_vector_bytes // ELEMENT_BYTES.get(dispatch.out_type, 4))
        regs = vector_registers(dispatch)

        p = Problem()
        knobs = {}
        for suffix, d in _loops(dispatch).items():
            dist = p.add_knob(IntKnob.of(f"distribution_{suffix}", sorted(
                {*tiling.tile_candidates(b[d], 1, 4096), default[f"distribution_{suffix}"]})))
            vec = p.add_knob(IntKnob.of(f"vector_common_parallel_{suffix}", sorted(
                {*tiling.powers_of_two(1, min(32, b[d])), default[f"vector_common_parallel_{suffix}"]})))
            p.require(dist.var % vec.var == 0)
            knobs[dist.name], knobs[vec.name] = dist, vec
        inner_vec = knobs["vector_common_parallel_inner"].var
        outer_vec = knobs["vector_common_parallel_outer"].var if "outer" in _loops(dispatch) else z3.IntVal(1)
        # The vector tile, read and written (a transpose's in two layouts), within the registers.
        p.require(2 * outer_vec * tiling.ceil_div(inner_vec, lanes) <= regs)
        workgroups = z3.IntVal(1)
        for suffix, d in _loops(dispatch).items():
            workgroups = workgroups * tiling.ceil_div(b[d], knobs[f"distribution_{suffix}"].var)
        prefer_near_default(p, knobs, default, workgroups, inner_vec % lanes == 0)
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        import math

        b = dispatch.loop_bounds
        groups = 1
        for suffix, d in _loops(dispatch).items():
            groups *= -(-b[d] // int(s[f"distribution_{suffix}"]))
        tile = 1
        for suffix in _loops(dispatch):
            tile *= int(s[f"vector_common_parallel_{suffix}"])
        return {"workgroups": math.log2(groups), "vector_tile": math.log2(tile)}

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        new = {}
        for suffix, d in _loops(dispatch).items():
            new[("distribution", d)] = int(s[f"distribution_{suffix}"])
            new[("vector_common_parallel", d)] = int(s[f"vector_common_parallel_{suffix}"])
        shape = lambda level: "x".join(str(s[f"{level}_{x}"]) for x in ("outer", "inner") if f"{level}_{x}" in s)  # noqa: E731
        return retiled_config(dispatch, s, new, f"wg {shape('distribution')} vec {shape('vector_common_parallel')}", ctx)
