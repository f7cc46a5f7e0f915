"""LLVMGPU TileAndFuse for contractions: workgroup and subgroup tiles in MMA tiles, the MMA
intrinsic, subgroup counts (hence workgroup size), the K step and prefetch stages, with limits
read from the target attribute."""

from __future__ import annotations

import re
from typing import Mapping

import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, tiled_config
from pipelines.dispatch import Dispatch, DispatchKind, MmaIntrinsic

ELEMENT_BYTES = {"f64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i8": 1}
# 32-bit registers a thread may spend on accumulators. A thread has at most 255; the rest hold
# operand fragments, addresses and the pipeline's copies. Measured on the H100 (issue 4): a
# 256x128 workgroup with 8x8 MMA tiles per subgroup (256 accumulator registers) spilled and ran
# 20.6 ms against 0.89 ms.
MAX_ACCUMULATOR_REGISTERS = 128
PREFETCH_STAGES = (0, 2, 3)
# On cuda, IREE 3.13's TileAndFuse emits the same executable whatever prefetch_num_stages and
# reorder_workgroups_strategy say: of 41 sm_80 candidates for 4096^3, 9 compiled to a binary
# identical to another candidate's, and each such pair differed only in those two options (the
# kernels use neither cp.async nor a workgroup remap). There they stay at the compiler's default.
FIXED_PREFETCH_BACKENDS = ("cuda",)
# On rocm (gfx942) prefetch stages do change the executable, but the workgroup reorder does not
# either: of 25 candidates for 4096^3, 10 pairs compiled to identical binaries and each pair
# differed only in reorder_workgroups_strategy. So the order stays at the default everywhere.
REORDER_TAKES_EFFECT_BACKENDS: tuple[str, ...] = ()
PIPELINE = "#iree_gpu.pipeline<TileAndFuse>"


# Intrinsics the target lists but TileAndFuse cannot lower in IREE 3.13: every NV_WMMA config
# tried on sm_80 (4096^3 and 16x4096x4096 f16, 14 tile shapes) failed with "'tensor.expand_shape'
# op expected dimension 2 of collapsed type to be static value of <garbage>".
UNSUPPORTED_INTRINSIC_PREFIXES = ("NV_WMMA_",)
# AMD's multi-block MFMAs (MFMA_F32_4x4x4x16B_F16, ..._16x16x4x4B_..., ..._32x32x4x2B_...) fail
# the same way on gfx942: "contraction like operation missing critical dimension".
UNSUPPORTED_INTRINSIC = re.compile(r"x\d+B_")


def compatible_intrinsics(dispatch: Dispatch) -> list[MmaIntrinsic]:
    """The target's MMA intrinsics whose operand and accumulator types match the contraction
    and that this pipeline can lower."""
    return [i for i in dispatch.target.mma_intrinsics
            if (i.a_type, i.b_type, i.c_type) == (dispatch.lhs_type, dispatch.rhs_type, dispatch.out_type)
            and not i.name.startswith(UNSUPPORTED_INTRINSIC_PREFIXES) and not UNSUPPORTED_INTRINSIC.search(i.name)]


def _dims(dispatch: Dispatch) -> tuple[int, int, int]:
    return dispatch.m_dims[-1], dispatch.n_dims[-1], dispatch.k_dims[-1]


def _i64_array(values: list[int]) -> ir.ArrayAttr:
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, v) for v in values])


class LLVMGPUTileAndFuse:
    """Knobs (IREE's names): `mma_kind`, `subgroup_m/n` (MMA tiles per subgroup, the lowering
    config's `subgroup`), `subgroups_m/n` (subgroups per workgroup; with the tiles they give the
    `workgroup` tile and the workgroup size), `reduction_k` (MMA K steps per iteration, the
    `reduction` tile), and the pipeline options `prefetch_num_stages` and `reorder_workgroups`."""

    name = "llvmgpu_tile_and_fuse"

    def supports(self, dispatch: Dispatch) -> bool:
        return (
            dispatch.target.backend in ("cuda", "rocm")
            and dispatch.kind == DispatchKind.CONTRACTION
            and "TileAndFuse" in dispatch.default.pipeline
            and bool(dispatch.m_dims and dispatch.n_dims and dispatch.k_dims)
            and bool(compatible_intrinsics(dispatch))
        )

    def build_problem(self, dispatch: Dispatch) -> Problem:
        t = dispatch.target
        md, nd, kd = _dims(dispatch)
        m, n, k = dispatch.loop_bounds[md], dispatch.loop_bounds[nd], dispatch.loop_bounds[kd]
        intrinsics = compatible_intrinsics(dispatch)
        subgroup = t.subgroup_sizes[0] if t.subgroup_sizes else 32
        in_bytes = ELEMENT_BYTES.get(dispatch.lhs_type, 2)

        p = Problem()
        mma = p.add_knob(IntKnob.of("mma_kind", range(len(intrinsics))))
        tile_m = p.add_knob(IntKnob.of("subgroup_m", [1, 2, 4, 8]))
        tile_n = p.add_knob(IntKnob.of("subgroup_n", [1, 2, 4, 8]))
        sg_m = p.add_knob(IntKnob.of("subgroups_m", [1, 2, 4, 8]))
        sg_n = p.add_knob(IntKnob.of("subgroups_n", [1, 2, 4, 8]))
        red_k = p.add_knob(IntKnob.of("reduction_k", [1, 2, 4, 8]))
        fixed = t.backend in FIXED_PREFETCH_BACKENDS
        prefetch = p.add_knob(IntKnob.of("prefetch_num_stages", (2,) if fixed else PREFETCH_STAGES))
        # Workgroup order: 0 launches in the default order, 1 transposes it (better L2 reuse of
        # B tiles when there are many workgroups along M), where the compiler acts on it.
        reorder = p.add_knob(IntKnob.of("reorder_workgroups",
                                        [0, 1] if t.backend in REORDER_TAKES_EFFECT_BACKENDS else [0]))

        def by_mma(field: str) -> z3.ArithRef:
            expr: z3.ArithRef = z3.IntVal(getattr(intrinsics[-1], field))
            for i, intr in reversed(list(enumerate(intrinsics[:-1]))):
                expr = z3.If(mma.var == i, getattr(intr, field), expr)
            return expr

        mma_m, mma_n, mma_k = by_mma("m"), by_mma("n"), by_mma("k")
        wg_m = sg_m.var * tile_m.var * mma_m
        wg_n = sg_n.var * tile_n.var * mma_n
        k_tile = red_k.var * mma_k
        threads = sg_m.var * sg_n.var * subgroup
        acc_regs = tile_m.var * tile_n.var * mma_m * mma_n / subgroup
        stages = z3.If(prefetch.var >= 2, prefetch.var, 1)
        shared = (wg_m + wg_n) * k_tile * in_bytes * stages
        def padded(extent: int, tile: z3.ArithRef) -> z3.ArithRef:
            return tiling.ceil_div(extent, tile) * tile

        p.require(
            # Tiles that do not divide the problem are padded (the lowering config's `padding`);
            # padding may add at most a quarter of the work.
            padded(m, wg_m) * 4 <= m * 5, padded(n, wg_n) * 4 <= n * 5, padded(k, k_tile) * 4 <= k * 5,
            tiling.within(threads, t.max_threads_per_workgroup or 1024),
            tiling.within(shared, t.max_workgroup_memory_bytes or 49152),
            tiling.within(acc_regs, MAX_ACCUMULATOR_REGISTERS),
        )
        workgroups = tiling.ceil_div(m, wg_m) * tiling.ceil_div(n, wg_n)
        # Preferences, most important first: whole tiles (no padding); enough workgroups to fill
        # the GPU; a register tile that uses most of the accumulator budget, then at least half
        # of it (on the H100, 4096^3: 4x8 tiles of 16x8 MMAs, 128 accumulators, ran 0.63 ms of
        # dispatch; the best 4x4 or 2x8 tiles 0.72 ms; 8x1 tiles 3-4.7 ms); 4 to 8 subgroups; a
        # K step of at least 32; then the intrinsic the compiler lists first.
        p.prefer("whole_tiles", z3.And(m % wg_m == 0, n % wg_n == 0, k % k_tile == 0))
        p.prefer("enough_workgroups", workgroups >= 128)
        p.prefer("full_register_tile", acc_regs * 4 >= MAX_ACCUMULATOR_REGISTERS * 3)
        p.prefer("busy_subgroups", acc_regs * 2 >= MAX_ACCUMULATOR_REGISTERS)
        p.prefer("four_to_eight_subgroups", z3.And(sg_m.var * sg_n.var >= 4, sg_m.var * sg_n.var <= 8))
        p.prefer("deep_k_step", k_tile >= 32)
        p.prefer("first_intrinsic", mma.var == 0)
        # Within those, cycle through K steps, prefetch depths, workgroup orders and tile shapes.
        # (no_reduce_shared_memory_bank_conflicts stays at the compiler's default: on the H100,
        # 100 configs of 4096^3 without the padding ran 1.75-3 ms, their twins with it 1.06-2 ms.)
        p.diversify(red_k.name, prefetch.name, tile_m.name, tile_n.name, sg_m.name, sg_n.name, reorder.name, mma.name)
        return p

    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        intrinsic = compatible_intrinsics(dispatch)[int(s["mma_kind"])]
        md, nd, kd = _dims(dispatch)
        rank = len(dispatch.loop_bounds)
        workgroup, reduction, subgroup = [0] * rank, [0] * rank, [0] * rank
        for d in (*dispatch.batch_dims, *dispatch.m_dims[:-1], *dispatch.n_dims[:-1]):
            workgroup[d] = 1
        for d in dispatch.k_dims[:-1]:
            reduction[d] = 1
        workgroup[md] = int(s["subgroups_m"]) * int(s["subgroup_m"]) * intrinsic.m
        workgroup[nd] = int(s["subgroups_n"]) * int(s["subgroup_n"]) * intrinsic.n
        reduction[kd] = int(s["reduction_k"])
        subgroup[md], subgroup[nd] = int(s["subgroup_m"]), int(s["subgroup_n"])
        threads = int(s["subgroups_m"]) * int(s["subgroups_n"]) * (dispatch.target.subgroup_sizes or (32,))[0]
        with ctx:
            fields: dict[str, ir.Attribute] = {
                "mma_kind": iree_gpu.MMAAttr.get(getattr(iree_gpu.MMAIntrinsic, intrinsic.name)),
                "promote_operands": _i64_array([0, 1]),
                "reduction": _i64_array(reduction),
                "subgroup": _i64_array(subgroup),
                "workgroup": _i64_array(workgroup),
            }
            # Keep the unit flags the compiler set on its own config (e.g. convert_acc_gemm,
            # which folds the fill into the accumulator): they describe the op, not the tiling.
            m, n, k = (dispatch.loop_bounds[d] for d in (md, nd, kd))
            k_tile = reduction[kd] * intrinsic.k
            if m % workgroup[md] or n % workgroup[nd] or k % k_tile:
                # As the compiler does for unaligned shapes: pad each tile to its full size.
                padding = [0] * rank
                padding[md], padding[nd], padding[kd] = workgroup[md], workgroup[nd], k_tile
                fields["padding"] = _i64_array(padding)
            default = ir.Attribute.parse(dispatch.default.lowering_config) if dispatch.default.lowering_config else None
            if isinstance(default, iree_gpu.LoweringConfigAttr):
                for named in default.attributes:
                    if isinstance(named.attr, ir.UnitAttr):
                        fields[named.name] = named.attr
            lowering = iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get(fields))
            reorder = iree_gpu.ReorderWorkgroupsStrategyAttr.get(
                iree_gpu.ReorderWorkgroupsStrategy.Transpose if s["reorder_workgroups"]
                else iree_gpu.ReorderWorkgroupsStrategy.None_)
            options = iree_gpu.PipelineOptionsAttr.get(prefetch_num_stages=int(s["prefetch_num_stages"]),
                                                       reorder_workgroups_strategy=reorder)
            translation = iree_codegen.TranslationInfoAttr.get(
                ir.Attribute.parse(PIPELINE), None, [threads, 1, 1], (dispatch.target.subgroup_sizes or (32,))[0],
                ir.DictAttr.get({"gpu_pipeline_options": options}),
            )
        summary = (f"{intrinsic.name.removeprefix('NV_')} wg {workgroup[md]}x{workgroup[nd]} "
                   f"subgroups {s['subgroups_m']}x{s['subgroups_n']} of {s['subgroup_m']}x{s['subgroup_n']} "
                   f"k{s['reduction_k']} prefetch {s['prefetch_num_stages']}"
                   + (" transposed" if s["reorder_workgroups"] else ""))
        return tiled_config(s, lowering, translation, summary)
