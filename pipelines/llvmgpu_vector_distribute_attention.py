"""LLVMGPU VectorDistribute for attention on cuda and rocm (the compiler's own pipeline for it
there): queries and value columns per workgroup, keys per step, subgroups along the queries, and
the MMA intrinsic of its QK and PV matmuls (the op's decomposition_config)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KindPipeline, KnobValue, default_pipeline_is, tiled_config
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmgpu_common import (ELEMENT_BYTES, MAX_ACCUMULATOR_REGISTERS, compatible_intrinsics, i64_array,
                                      mma_shape, shared_memory_bytes, subgroup_size)

if TYPE_CHECKING:
    from iree.compiler import ir

PIPELINE = "#iree_gpu.pipeline<VectorDistribute>"


def attention_intrinsics(dispatch: Dispatch) -> list:
    """The target's MMA intrinsics for attention's two matmuls: query/key type in, f32 out."""
    return compatible_intrinsics(dispatch, accumulator="f32")


VECTOR_BYTES = 16  # what one thread copies at a time into shared memory


def row_lanes(columns: int, element_bytes: int) -> int:
    """The threads that copy one row of a promoted tile `columns` wide, VECTOR_BYTES each."""
    return max(1, columns * element_bytes // VECTOR_BYTES)


def lays_out(columns: int, element_bytes: int, subgroup: int) -> bool:
    """Whether IREE 3.13 can distribute a promoted tile `columns` wide over a subgroup: a row is
    a whole number of 16-byte vectors, and its lanes divide the subgroup or are whole subgroups.
    Else every config fails with "failed to derive layout for promoted read-like op" (head dims
    48, 80, 96 in f16 on cuda, compile-only, every candidate; 64, 128 and 512 (64 lanes: a VAE's
    single head) compile), and the compiler's own config is a scalar one, no MMA."""
    lanes = row_lanes(columns, element_bytes)
    return (columns * element_bytes) % VECTOR_BYTES == 0 and (subgroup % lanes == 0 or lanes % subgroup == 0)


class LLVMGPUVectorDistributeAttention(KindPipeline):
    """Knobs: `workgroup_m` (queries per workgroup), `workgroup_n` (value columns),
    `reduction_k2` (keys per step), `subgroups_m` (subgroups along the queries) and `mma_kind`
    (the intrinsic of its QK and PV matmuls, set in the op's decomposition_config)."""

    name = "llvmgpu_vector_distribute_attention"
    aliases = ("llvmgpu_vector_distribute",)  # `--pipeline llvmgpu_vector_distribute` picks it for attention
    model_flags = ()

    def takes(self, dispatch: Dispatch) -> bool:
        return (dispatch.kind == DispatchKind.ATTENTION and dispatch.target.backend in ("cuda", "rocm")
                and default_pipeline_is(dispatch, "iree_gpu.VectorDistribute")
                and len(dispatch.k_dims) == 2 and bool(attention_intrinsics(dispatch)))

    def limit(self, dispatch: Dispatch) -> str | None:
        k1 = dispatch.loop_bounds[dispatch.k_dims[0]]
        if not lays_out(k1, ELEMENT_BYTES.get(dispatch.lhs_type, 2), subgroup_size(dispatch)):
            return (f"a head dim of {k1}: IREE 3.13 lays out promoted tiles whose rows are whole 16-byte vectors over "
                    "lanes that divide a subgroup or are whole subgroups, so no MMA config of it compiles; "
                    "tune-model's raise-attention pads such heads to a power of two on GPUs")
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        t = dispatch.target
        b = dispatch.loop_bounds
        m, n = b[dispatch.m_dims[-1]], b[dispatch.n_dims[-1]]
        k1, k2 = b[dispatch.k_dims[0]], b[dispatch.k_dims[-1]]
        intrinsics = attention_intrinsics(dispatch)
        subgroup = subgroup_size(dispatch)
        in_bytes = ELEMENT_BYTES.get(dispatch.lhs_type, 2)

        p = Problem()
        mma = p.add_knob(IntKnob.of("mma_kind", range(len(intrinsics))))
        tile_m = p.add_knob(IntKnob.of("workgroup_m", tiling.tile_candidates(m, 16, 256, multiple_of=16)))
        tile_n = p.add_knob(IntKnob.of("workgroup_n", [c for c in tiling.tile_candidates(n, 16, 256, multiple_of=16)
                                                       if lays_out(c, in_bytes, subgroup)] or [n]))
        red = p.add_knob(IntKnob.of("reduction_k2", tiling.tile_candidates(k2, 16, 256, multiple_of=16)))
        sg = p.add_knob(IntKnob.of("subgroups_m", [1, 2, 4, 8]))

        mma_m, mma_n, mma_k = mma_shape(mma.var, intrinsics)
        rows = tile_m.var / sg.var  # queries per subgroup
        # Per thread: the PV accumulator (rows x value columns) and the QK scores (rows x keys).
        regs = (rows * tile_n.var + rows * red.var) / subgroup
        p.require(
            tile_m.var % (sg.var * mma_m) == 0, tile_n.var % mma_n == 0, red.var % mma_k == 0,
            red.var % mma_n == 0, k1 % mma_k == 0,
            tiling.within(sg.var * subgroup, t.max_threads_per_workgroup or 1024),
            # Query, key and value tiles staged in shared memory.
            tiling.within((tile_m.var * k1 + red.var * k1 + red.var * tile_n.var) * in_bytes,
                          shared_memory_bytes(dispatch)),
            tiling.within(regs, MAX_ACCUMULATOR_REGISTERS),
        )
        batch = 1
        for d in (*dispatch.batch_dims, *dispatch.m_dims[:-1], *dispatch.n_dims[:-1]):
            batch *= b[d]
        p.prefer("enough_workgroups", batch * (m / tile_m.var) * (n / tile_n.var) >= 128)
        p.prefer("whole_head", tile_n.var == n)
        p.prefer("four_subgroups", sg.var == 4)
        p.prefer("key_step_64", red.var == 64)
        p.prefer("first_intrinsic", mma.var == 0)
        p.diversify(tile_m.name, red.name, sg.name, tile_n.name, mma.name)
        return p

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir
        from iree.compiler.dialects import iree_codegen, iree_gpu

        intrinsic = attention_intrinsics(dispatch)[int(s["mma_kind"])]
        rank = len(dispatch.loop_bounds)
        md, nd = dispatch.m_dims[-1], dispatch.n_dims[-1]
        k1_dims, k2_dims = dispatch.k_dims[:1], dispatch.k_dims[1:]
        workgroup, reduction, counts = [0] * rank, [0] * rank, [1] * rank
        for d in (*dispatch.batch_dims, *dispatch.m_dims[:-1], *dispatch.n_dims[:-1]):
            workgroup[d] = 1
        workgroup[md], workgroup[nd] = int(s["workgroup_m"]), int(s["workgroup_n"])
        reduction[k2_dims[-1]] = int(s["reduction_k2"])
        counts[md] = int(s["subgroups_m"])
        lanes = subgroup_size(dispatch)
        batch_m = (*dispatch.batch_dims, *dispatch.m_dims)
        qk_dims = sorted((*batch_m, *k1_dims, *k2_dims))
        pv_dims = sorted((*batch_m, *dispatch.n_dims, *k2_dims))
        with ctx:
            derived = ir.Attribute.parse("#iree_gpu.derived_thread_config")
            mma_attr = iree_gpu.MMAAttr.get(getattr(iree_gpu.MMAIntrinsic, intrinsic.name))

            def matmul_config(promote: list[int], dims: list[int]) -> ir.Attribute:
                return ir.DictAttr.get({"lowering_config": iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get({
                    "mma_kind": mma_attr,
                    "promote_operands": i64_array(promote),
                    "promotion_types": ir.ArrayAttr.get([derived] * len(promote)),
                    "subgroup_basis": ir.ArrayAttr.get([i64_array(counts), i64_array(dims)]),
                }))})

            decomposition = ir.DictAttr.get({"qk_attrs": matmul_config([0, 1], qk_dims),
                                             "pv_attrs": matmul_config([1], pv_dims)})
            lowering = iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get({
                "promote_operands": i64_array([0, 1, 2]),
                "promotion_types": ir.ArrayAttr.get([derived] * 3),
                "reduction": i64_array(reduction),
                "workgroup": i64_array(workgroup),
            }))
            translation = iree_codegen.TranslationInfoAttr.get(
                ir.Attribute.parse(PIPELINE), None, [int(s["subgroups_m"]) * lanes, 1, 1], lanes)
        summary = (f"VD {intrinsic.name.removeprefix('NV_')} wg {s['workgroup_m']}x{s['workgroup_n']} "
                   f"k2 {s['reduction_k2']} subgroups {s['subgroups_m']}")
        config = tiled_config(s, lowering, translation, summary)
        # On cuda the config goes in where the compiler configures the dispatch: a preprocessing
        # spec sees the attention before dispatches are formed, where a masked or grouped-query
        # attention has other maps and loops than the dispatch's and nothing matches it.
        return replace(config, root_attributes=(("decomposition_config", str(decomposition)),),
                       codegen_spec=dispatch.target.backend == "cuda")
