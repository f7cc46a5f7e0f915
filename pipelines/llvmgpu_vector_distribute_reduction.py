"""LLVMGPU VectorDistribute for reductions on cuda and rocm (softmax, LayerNorm/RMSNorm-style
normalizations, row sums): how many subgroups share one row's reduction and how many elements
each thread loads at a time.

In IREE 3.13 the compiler configures every op of such a dispatch, not only the root: each gets a
lowering_config with its `lane_basis`, `subgroup_basis`, `thread` tile and `partial_reduction`
(reductions) or `serial` (the elementwise op after them, e.g. a softmax's division) tile over
the reduced dimension, and the root a `workgroup` tile; the translation_info's workgroup size is
the subgroups times the subgroup size (`setReductionConfig`). A dispatch where the root alone is
configured fails to compile ("failed to distribute"). So a config here is the compiler's own
config of every op, read from the dispatch (Dispatch.fused), with the two knobs changed
consistently in all of them. An op the compiler should configure and leaves bare (a LayerNorm's
centred values stored as a result of their own: the dispatch then fails to compile, "failed to
distribute") is given the config the compiler gives a softmax's division, so that every config
here, the knobs at the compiler's values included, builds a dispatch the compiler's own does not:

- `subgroups` S: the subgroup basis over the reduced dimension (the workgroup has S subgroups);
- `thread_loads` V: the elements a thread loads at once (its `thread` tile).

Each op's tile over the reduced dimension is then S x lanes x V (lanes: the lane basis there,
which stays the compiler's). IREE's own heuristic uses one subgroup whenever the rows outnumber
the GPU's SIMDs (a 16x2048x2048 softmax runs each 2048-wide row on 32 threads)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

import z3

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KindPipeline, KnobValue, default_pipeline_is
from pipelines.dispatch import REDUCTION_KINDS, Dispatch, DispatchKind
from pipelines.parts import FusedOps
from pipelines.llvmgpu_common import ELEMENT_BYTES, i64_array, subgroup_size
from pipelines.printed_config import basis, mma_kind, tiling_level

if TYPE_CHECKING:
    from iree.compiler import ir

# The widest load one thread issues (128 bits on both vendors: IREE's `max_load_instruction_bits`).
MAX_LOAD_BITS = 128
# Levels that tile the reduced dimension by S x lanes x V.
ROW_LEVELS = ("partial_reduction", "serial")


@dataclass(frozen=True)
class Layout:
    """How the compiler's config lays one op's reduced dimension out: which loop (`dim`), the
    lanes over it and its thread tile (the same for every op of the dispatch in 3.13)."""

    dim: int
    lanes: int
    thread_loads: int
    subgroups: int


def layout(lowering_config: str) -> Layout | None:
    """One op's layout from its printed config; None where it is not the one described above
    (more than one dim with a thread tile, a permuted basis, no row level)."""
    thread = tiling_level(lowering_config, "thread")
    lanes, lane_map = basis(lowering_config, "lane_basis")
    groups, group_map = basis(lowering_config, "subgroup_basis")
    tiled = [d for d, t in enumerate(thread) if t]
    if len(tiled) != 1 or not lanes or not groups or len(lanes) != len(thread) or len(groups) != len(thread):
        return None
    if lane_map != list(range(len(thread))) or group_map != list(range(len(thread))):
        return None
    if not any(tiling_level(lowering_config, level) for level in ROW_LEVELS):
        return None
    d = tiled[0]
    if any(c != 1 for i, c in enumerate(groups) if i != d) or any(c != 1 for i, c in enumerate(lanes) if i != d):
        return None
    return Layout(d, lanes[d], thread[d], groups[d])


def _layouts(dispatch: Dispatch) -> list[Layout] | None:
    """The root's layout, then each fused op's; None where one is unreadable or they disagree
    on the lanes or the thread tile (the compiler gives all the same). An op the compiler left
    unconfigured (Dispatch.fused, "") takes the root's."""
    root = layout(dispatch.default.lowering_config)
    found = [root, *(layout(f.default_lowering_config) if f.default_lowering_config else root for f in dispatch.fused)]
    if any(x is None for x in found):
        return None
    first = found[0]
    if any((x.lanes, x.thread_loads, x.subgroups) != (first.lanes, first.thread_loads, first.subgroups) for x in found):
        return None
    return found  # type: ignore[return-value]


def elementwise_like(root_text: str) -> str:
    """The config the compiler gives an elementwise op after a dispatch's reductions (a
    softmax's division), from the root's: its lanes, subgroups and thread tile, the row tile as
    `serial`, no workgroup tile (the root's alone distributes the rows)."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_gpu

    entries = {n.name: n.attr for n in iree_gpu.LoweringConfigAttr(ir.Attribute.parse(root_text)).attributes}
    row = next(level for level in ROW_LEVELS if level in entries)
    kept = {name: value for name, value in entries.items()
            if name in ("lane_basis", "subgroup_basis", "thread")}
    kept["serial"] = entries[row]
    return str(iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get(kept)))


def matrix_vector(dispatch: Dispatch) -> bool:
    """A contraction the compiler configures as a reduction (a matrix-vector product: a decoder's
    projections for one token, 1x4096x4096): on VectorDistribute with a lane basis and a
    `partial_reduction` over K, no MMA intrinsic."""
    text = dispatch.default.lowering_config
    return (dispatch.kind == DispatchKind.CONTRACTION and default_pipeline_is(dispatch, "iree_gpu.VectorDistribute")
            and mma_kind(text) is None and bool(basis(text, "lane_basis")[0])
            and bool(tiling_level(text, "partial_reduction")))


def _its_kind(dispatch: Dispatch) -> bool:
    """A reduction the compiler gives VectorDistribute on a GPU target, or a contraction it
    configures as one (matrix_vector)."""
    return (dispatch.target.backend in ("cuda", "rocm")
            and ((dispatch.kind in REDUCTION_KINDS and default_pipeline_is(dispatch, "iree_gpu.VectorDistribute"))
                 or matrix_vector(dispatch)))


class LLVMGPUVectorDistributeReduction(KindPipeline):
    name = "llvmgpu_vector_distribute_reduction"
    aliases = ("llvmgpu_vector_distribute",)

    def takes(self, dispatch: Dispatch) -> bool:
        return _its_kind(dispatch)

    def limit(self, dispatch: Dispatch) -> str | None:
        if _layouts(dispatch) is None:
            return ("the compiler's reduction config of this dispatch is not one subgroup basis over one "
                    "reduced dimension shared by its ops; not tunable yet")
        if not dispatch.default.subgroup_size:
            return "the compiler's config of this dispatch names no subgroup size"
        return None

    def untimed_alone(self, dispatch: Dispatch) -> str | None:
        if matrix_vector(dispatch):
            return ("a matrix-vector product is timed inside the model only (--gpu-timing model: CUDA with CUPTI): "
                    "IREE 3.13's dumped dispatch benchmark of one does not compile (iree-compile grew to 24 GB)")
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        layouts = _layouts(dispatch)
        assert layouts is not None
        root = layouts[0]
        t = dispatch.target
        row = dispatch.loop_bounds[root.dim]
        subgroup = dispatch.default.subgroup_size or subgroup_size(dispatch)
        bits = 8 * ELEMENT_BYTES.get(dispatch.lhs_type, 4)
        max_threads = t.max_threads_per_workgroup or 1024

        p = Problem()
        groups = p.add_knob(IntKnob.of("subgroups", tiling.powers_of_two(1, max(1, max_threads // subgroup))))
        loads = p.add_knob(IntKnob.of("thread_loads", tiling.powers_of_two(1, max(1, MAX_LOAD_BITS // bits))))
        # Every op's row tile (S x lanes x V) divides the row: no partial tiles over the reduced
        # dimension (the compiler's own config takes the gcd of the two instead).
        per_pass = groups.var * root.lanes * loads.var
        p.require(row % per_pass == 0)
        p.require(groups.var * subgroup <= max_threads)
        # Most important first: the compiler's own choice of loads (widest that divides), each
        # thread reading several vectors per row (few subgroups on short rows), then variety.
        p.prefer("default_loads", loads.var == root.thread_loads)
        p.prefer("several_passes", z3.Implies(groups.var > 1, row >= 2 * per_pass))
        p.diversify(groups.name, loads.name)
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        """Passes over a row per thread and threads per workgroup, for a search's model."""
        import math

        layouts = _layouts(dispatch)
        assert layouts is not None
        per_pass = int(s["subgroups"]) * layouts[0].lanes * int(s["thread_loads"])
        return {"passes": math.log2(max(1, dispatch.loop_bounds[layouts[0].dim] // per_pass)),
                "threads": math.log2(int(s["subgroups"]) * layouts[0].lanes)}

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir
        from iree.compiler.dialects import iree_codegen

        layouts = _layouts(dispatch)
        assert layouts is not None
        groups, loads = int(s["subgroups"]), int(s["thread_loads"])
        with ctx:
            root = dispatch.default.lowering_config
            texts = [root, *(f.default_lowering_config or elementwise_like(root) for f in dispatch.fused)]
            configs = [_rescaled(text, lay, groups, loads) for text, lay in zip(texts, layouts)]
            default = iree_codegen.TranslationInfoAttr(ir.Attribute.parse(dispatch.default.translation_info))
            subgroup = default.subgroup_size
            translation = iree_codegen.TranslationInfoAttr.get(
                default.pass_pipeline, None, [groups * subgroup, 1, 1], subgroup, default.configuration)
            info = iree_codegen.CompilationInfoAttr.get(configs[0], translation)
        row_tile = groups * layouts[0].lanes * loads
        return Config(knobs=dict(s), compilation_info=str(info),
                      summary=f"{groups} subgroup{'s' if groups > 1 else ''} x {layouts[0].lanes} lanes x {loads} "
                              f"loads ({row_tile}/row pass)",
                      expect_root_op=dispatch.op_name, expect_lowering_config=str(configs[0]),
                      expect_translation_info=str(translation),
                      parts=(FusedOps(tuple(str(c) for c in configs[1:])),), codegen_spec=True)


def _rescaled(text: str, lay: Layout, groups: int, loads: int) -> "ir.Attribute":
    """One op's config with S subgroups and V loads over its reduced dimension, every other
    entry as the compiler had it. Uses the current context."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_gpu

    entries = {n.name: n.attr for n in iree_gpu.LoweringConfigAttr(ir.Attribute.parse(text)).attributes}
    rank = len(tiling_level(text, "thread"))
    new: dict[str, ir.Attribute] = {}
    for name, value in entries.items():
        if name == "thread":
            sizes = tiling_level(text, name)
            sizes[lay.dim] = loads
            new[name] = i64_array(sizes)
        elif name in ROW_LEVELS:
            sizes = tiling_level(text, name)
            sizes[lay.dim] = groups * lay.lanes * loads
            new[name] = i64_array(sizes)
        elif name == "subgroup_basis":
            counts = [1] * rank
            counts[lay.dim] = groups
            new[name] = ir.ArrayAttr.get([i64_array(counts), i64_array(list(range(rank)))])
        else:
            new[name] = value
    return iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get(new))
