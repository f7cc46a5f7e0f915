"""LLVMGPU VectorDistribute for contractions on rocm and cuda: the MMA intrinsic, subgroups per workgroup
(`subgroup_basis`), MMA tiles per subgroup (which give the `workgroup` tile) and the K step (the
`reduction` tile, in elements). IREE 3.13 picks TileAndFuse for rocm matmuls by default;
VectorDistribute is the other pipeline that lowers them, chosen with `--pipeline` (its
candidates set the pipeline in their translation_info)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, tiled_config
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmgpu_common import (ELEMENT_BYTES, MAX_ACCUMULATOR_REGISTERS, compatible_intrinsics, i64_array,
                                      mma_shape, shared_memory_bytes, subgroup_size)
from pipelines.llvmgpu_gemm_view import GemmTiles
from pipelines.llvmgpu_vector_distribute_reduction import matrix_vector

if TYPE_CHECKING:
    from iree.compiler import ir

PIPELINE = "#iree_gpu.pipeline<VectorDistribute>"


class LLVMGPUVectorDistribute(Pipeline):
    """Knobs (IREE's names where it has them): `mma_kind`, `subgroups_m/n` (the subgroup basis),
    `subgroup_m/n` (MMA tiles per subgroup), `reduction_k` (MMA K steps per iteration). Attention
    on VectorDistribute is its own pipeline (`llvmgpu_vector_distribute_attention`); the name
    `llvmgpu_vector_distribute` picks whichever of the two fits the dispatch."""

    name = "llvmgpu_vector_distribute"
    model_flags = ()

    def supports(self, dispatch: Dispatch) -> bool:
        # Contractions on cuda too (by name: TileAndFuse is the compiler's choice there): on sm_80
        # a sample of 4096^3 f16 configs (mma.sync 16x8x16) compiled and carried their config.
        # Not a matrix-vector product the compiler configures as a reduction (no MMA there): the
        # reduction pipeline takes it (its space here was empty: M = 1 is no multiple of a tile).
        return (dispatch.target.backend in ("cuda", "rocm") and dispatch.kind == DispatchKind.CONTRACTION
                and bool(dispatch.m_dims and dispatch.n_dims and dispatch.k_dims)
                and bool(compatible_intrinsics(dispatch)) and not matrix_vector(dispatch))

    def build_problem(self, dispatch: Dispatch) -> Problem:
        t = dispatch.target
        b = dispatch.loop_bounds
        m, n, k = b[dispatch.m_dims[-1]], b[dispatch.n_dims[-1]], b[dispatch.k_dims[-1]]
        intrinsics = compatible_intrinsics(dispatch)
        subgroup = subgroup_size(dispatch)
        in_bytes = ELEMENT_BYTES.get(dispatch.lhs_type, 2)

        p = Problem()
        mma = p.add_knob(IntKnob.of("mma_kind", range(len(intrinsics))))
        tile_m = p.add_knob(IntKnob.of("subgroup_m", [1, 2, 4, 8]))
        tile_n = p.add_knob(IntKnob.of("subgroup_n", [1, 2, 4, 8]))
        sg_m = p.add_knob(IntKnob.of("subgroups_m", [1, 2, 4]))
        sg_n = p.add_knob(IntKnob.of("subgroups_n", [1, 2, 4]))
        # Powers of two only: on gfx942, VectorDistribute configs with other reduction tiles
        # failed on the shared-memory copy ("unsupported number of elements").
        red_k = p.add_knob(IntKnob.of("reduction_k", [1, 2, 4, 8]))

        mma_m, mma_n, mma_k = mma_shape(mma.var, intrinsics)
        tiles = GemmTiles({"subgroups_m": sg_m.var, "subgroup_m": tile_m.var, "subgroups_n": sg_n.var,
                           "subgroup_n": tile_n.var, "reduction_k": red_k.var}, mma_m, mma_n, mma_k)
        wg_m, wg_n = tiles.wg_m, tiles.wg_n
        k_tile = tiles.k_tile
        acc_regs = tiles.accumulators(subgroup)
        p.require(
            # No padding on this path: tiles divide the problem.
            m % wg_m == 0, n % wg_n == 0, k % k_tile == 0,
            tiling.within(tiles.threads(subgroup), t.max_threads_per_workgroup or 1024),
            tiling.within((wg_m + wg_n) * k_tile * in_bytes, shared_memory_bytes(dispatch)),
            tiling.within(acc_regs, MAX_ACCUMULATOR_REGISTERS),
        )
        batch = 1
        for d in (*dispatch.batch_dims, *dispatch.m_dims[:-1], *dispatch.n_dims[:-1]):
            batch *= b[d]
        # As for TileAndFuse: enough workgroups for the GPU's compute units, a full register
        # tile, 4 subgroups (the compiler's own choice), a K step of at least 64 elements (the
        # compiler's own), then the first intrinsic.
        p.prefer("enough_workgroups", batch * (m / wg_m) * (n / wg_n) >= 256)
        p.prefer("busy_subgroups", acc_regs * 2 >= MAX_ACCUMULATOR_REGISTERS)
        p.prefer("four_subgroups", sg_m.var * sg_n.var == 4)
        p.prefer("deep_k_step", k_tile >= 64)
        p.prefer("first_intrinsic", mma.var == 0)
        p.diversify(red_k.name, tile_m.name, tile_n.name, sg_m.name, sg_n.name, mma.name)
        return p

    compiler_pipeline = "iree_gpu.VectorDistribute"  # the pipeline of its emitted constraints

    def maps_to_compiler(self, dispatch: Dispatch) -> bool:
        return True

    def compiler_knobs(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, object]:
        """This config in the knobs of the compiler's emitted constraints: the workgroup tile
        (`wg_d`) and K step in elements (`red_d`) of the innermost M, N, K dims, subgroups along
        M and N (`sg_m_cnt`, `sg_n_cnt`), the subgroup and workgroup sizes, and under "mma" the
        intrinsic (the caller turns it into `mma_idx`). Prefetch stages are not a knob here: the
        compiler's is left free."""
        intrinsic = compatible_intrinsics(dispatch)[int(s["mma_kind"])]
        md, nd, kd = dispatch.m_dims[-1], dispatch.n_dims[-1], dispatch.k_dims[-1]
        lanes = subgroup_size(dispatch)
        tiles = GemmTiles.of(s, intrinsic)
        return {f"wg_{md}": tiles.wg_m, f"wg_{nd}": tiles.wg_n, f"red_{kd}": tiles.k_tile,
                "sg_m_cnt": int(s["subgroups_m"]), "sg_n_cnt": int(s["subgroups_n"]), "sg_size": lanes,
                "wg_size_x": tiles.threads(lanes), "wg_size_y": 1,
                "wg_size_z": 1, "mma": intrinsic}

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir
        from iree.compiler.dialects import iree_codegen, iree_gpu

        intrinsic = compatible_intrinsics(dispatch)[int(s["mma_kind"])]
        md, nd, kd = dispatch.m_dims[-1], dispatch.n_dims[-1], dispatch.k_dims[-1]
        rank = len(dispatch.loop_bounds)
        workgroup, reduction, counts = [0] * rank, [0] * rank, [1] * rank
        for d in (*dispatch.batch_dims, *dispatch.m_dims[:-1], *dispatch.n_dims[:-1]):
            workgroup[d] = 1
        for d in dispatch.k_dims[:-1]:
            reduction[d] = 1
        tiles = GemmTiles.of(s, intrinsic)
        workgroup[md], workgroup[nd], reduction[kd] = tiles.wg_m, tiles.wg_n, tiles.k_tile
        counts[md], counts[nd] = int(s["subgroups_m"]), int(s["subgroups_n"])
        lanes = subgroup_size(dispatch)
        threads = tiles.threads(lanes)
        with ctx:
            derived = ir.Attribute.parse("#iree_gpu.derived_thread_config")
            lowering = iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get({
                "mma_kind": iree_gpu.MMAAttr.get(getattr(iree_gpu.MMAIntrinsic, intrinsic.name)),
                "promote_operands": i64_array([0, 1]),
                "promotion_types": ir.ArrayAttr.get([derived, derived]),
                "reduction": i64_array(reduction),
                "subgroup_basis": ir.ArrayAttr.get([i64_array(counts), i64_array(list(range(rank)))]),
                "workgroup": i64_array(workgroup),
            }))
            options = iree_gpu.PipelineOptionsAttr.get(no_reduce_shared_memory_bank_conflicts=False,
                                                       use_igemm_convolution=False)
            translation = iree_codegen.TranslationInfoAttr.get(
                ir.Attribute.parse(PIPELINE), None, [threads, 1, 1], lanes,
                ir.DictAttr.get({"gpu_pipeline_options": options}),
            )
        summary = (f"VD {intrinsic.name} wg {workgroup[md]}x{workgroup[nd]} "
                   f"subgroups {s['subgroups_m']}x{s['subgroups_n']} of {s['subgroup_m']}x{s['subgroup_n']} "
                   f"k{reduction[kd]}")
        return tiled_config(s, lowering, translation, summary)
