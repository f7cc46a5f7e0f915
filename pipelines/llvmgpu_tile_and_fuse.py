"""LLVMGPU TileAndFuse for contractions: workgroup and subgroup tiles in MMA tiles, the MMA
intrinsic, subgroup counts (hence workgroup size), the K step, prefetch stages and split-K, with
limits read from the target attribute."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Mapping

import z3

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, NotInCompilerKnobs, default_pipeline_is, tiled_config
from pipelines.dispatch import Dispatch, DispatchKind, MmaIntrinsic
from pipelines.parts import SplitReduction
from pipelines.llvmgpu_common import (ELEMENT_BYTES, MAX_ACCUMULATOR_REGISTERS, compatible_intrinsics, i64_array,
                                      mma_shape, shared_memory_bytes, subgroup_size)
from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default
from pipelines.llvmgpu_gemm_view import (GemmTiles, GemmView, channels_first, column_tiles_fit, gemm_features, gemm_view,
                                         igemm_convolution, tile_and_fuse_convolution, tile_sizes, workgroup_count)
from pipelines.llvmgpu_split_k import split_factors, split_view
from pipelines.model_flags import AGGRESSIVE_FUSION, CHANNELS_LAST, DIRECT_CONVOLUTION, GENERALIZE_MATMUL, O3

__all__ = ["LLVMGPUTileAndFuse", "split_factors", "split_view"]

if TYPE_CHECKING:
    from iree.compiler import ir

PREFETCH_STAGES = (0, 2, 3)
# Not a knob: `amdgpu-waves-per-eu` (translation_info's llvm_func_attrs) is carried into the
# compiled dispatch, but on gfx942 values 1, 2 and 4 gave a byte-identical executable to leaving
# it unset (4096^3 f16, wg 256x128, 2x2 subgroups of 8x4), so it would only add twins.
# On cuda, IREE 3.13's TileAndFuse emits the same executable whatever prefetch_num_stages and
# reorder_workgroups_strategy say: of 41 sm_80 candidates for 4096^3, 9 compiled to a binary
# identical to another candidate's, and each such pair differed only in those two options (the
# kernels use neither cp.async nor a workgroup remap). There they stay at the compiler's default.
FIXED_PREFETCH_BACKENDS = ("cuda",)
# On rocm (gfx942) prefetch stages do change the executable, but the workgroup reorder does not
# either: of 25 candidates for 4096^3, 10 pairs compiled to identical binaries and each pair
# differed only in reorder_workgroups_strategy. So the order stays at the default everywhere: the
# knob `reorder_workgroups` has the one value 0 (kept so that the spaces recorded with it,
# tests/fixtures/spaces, still replay).
PIPELINE = "#iree_gpu.pipeline<TileAndFuse>"


SPLIT_NOT_MODELLED = "split-K: a knob the compiler's constraints do not model (they describe the op unsplit)"


def unit_batch_contraction(dispatch: Dispatch) -> bool:
    """A contraction whose batch dims are all 1 (`batch_matmul_1xMxNxK`)."""
    return (dispatch.kind == DispatchKind.CONTRACTION and bool(dispatch.batch_dims)
            and all(size == 1 for size in dispatch.sizes(dispatch.batch_dims)))


# Workgroups that fill the GPU: a preference, not a rule. Where even the smallest tiles launch
# fewer, half as many as those do (a classifier over a batch of 8, 8x1000x2048: one MMA tile of
# rows, at most 125 workgroups of 8 columns; asked for 128 the preference could not hold, and
# the next ones, a full register tile first, chose 4-16 workgroups of 64-256 columns).
ENOUGH_WORKGROUPS = 128


def enough_workgroups(dispatch: Dispatch, view: GemmView, intrinsics: list[MmaIntrinsic], split: int) -> int:
    """ENOUGH_WORKGROUPS, or half what the smallest tiles of any intrinsic launch where those
    launch fewer (split `split` ways)."""
    most = split * max(workgroup_count(dispatch, view, i.m, i.n, i.m, i.n) for i in intrinsics)
    return ENOUGH_WORKGROUPS if most >= ENOUGH_WORKGROUPS else max(1, most // 2)


class LLVMGPUTileAndFuse(Pipeline):
    """Knobs (IREE's names): `mma_kind`, `subgroup_m/n` (MMA tiles per subgroup, the lowering
    config's `subgroup`), `subgroups_m/n` (subgroups per workgroup; with the tiles they give the
    `workgroup` tile and the workgroup size), `reduction_k` (MMA K steps per iteration, the
    `reduction` tile), the pipeline options `prefetch_num_stages` and `reorder_workgroups`, and
    where K is long against the output, `split_k` (split_factors; the config then goes on the
    split op, whose loops split_view describes)."""

    name = "llvmgpu_tile_and_fuse"
    # Decided on the whole model: O3 folds the transposes around contractions into them (fewer
    # dispatches); aggressive fusion fuses more producers into them. On a BERT-large-sized f16
    # layer on the H100, O3 was 1.04x and aggressive fusion 1.01x alone (BENCHMARKS.md).
    model_flags = (O3, AGGRESSIVE_FUSION)

    def model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        """A model with channels-first convolutions is also tried with them made channels last
        (CHANNELS_LAST: IREE 3.13's preprocessing pass, which folds the transposes into the
        dispatch), judged with the convolutions it forms tuned first; a model with implicit-GEMM
        convolutions also as direct convolutions (DIRECT_CONVOLUTION, channels last first where
        they are channels first), judged with the convolutions it forms tuned first too; a model
        with a batch matmul of batch 1 (a linear layer on rank-3 activations, as exporters write
        it) also with named matmuls generalized (GENERALIZE_MATMUL: the unit batch folds away),
        judged with the matmuls it forms tuned first."""
        return (*self.model_flags, *self.tuned_model_flags_for(dispatch))

    def tuned_model_flags_for(self, dispatch: Dispatch) -> tuple[tuple[str, ...], ...]:
        if unit_batch_contraction(dispatch):
            return (GENERALIZE_MATMUL,)
        if not igemm_convolution(dispatch):
            return ()
        return ((CHANNELS_LAST, (*CHANNELS_LAST, *DIRECT_CONVOLUTION)) if channels_first(dispatch)
                else (DIRECT_CONVOLUTION,))

    def supports(self, dispatch: Dispatch) -> bool:
        return (
            dispatch.target.backend in ("cuda", "rocm")
            and (dispatch.kind == DispatchKind.CONTRACTION or tile_and_fuse_convolution(dispatch))
            and default_pipeline_is(dispatch, "iree_gpu.TileAndFuse")
            and bool(dispatch.m_dims and dispatch.n_dims and dispatch.k_dims)
            and bool(compatible_intrinsics(dispatch))
        )

    def declines(self, dispatch: Dispatch) -> str | None:
        if (dispatch.target.backend in ("cuda", "rocm") and dispatch.kind == DispatchKind.CONTRACTION
                and default_pipeline_is(dispatch, "iree_gpu.TileAndFuse") and not compatible_intrinsics(dispatch)):
            return (f"no MMA intrinsic of {dispatch.target.arch} takes {dispatch.lhs_type} x {dispatch.rhs_type} -> "
                    f"{dispatch.out_type}: the compiler's config runs it on plain threads, which this tuner does not tune")
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        t = dispatch.target
        view = gemm_view(dispatch)
        m, n, k = view.m_total, view.n_total, view.k_extent
        intrinsics = compatible_intrinsics(dispatch)
        subgroup = subgroup_size(dispatch)
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
        # Workgroup order: the default's on every backend (no compiler here acts on another).
        p.add_knob(IntKnob.of("reorder_workgroups", [0]))
        splits = split_factors(dispatch)
        split: z3.ArithRef | int = 1
        if len(splits) > 1:
            split = p.add_knob(IntKnob.of("split_k", splits)).var
            k = k / split  # each part's K (the factors divide K)

        mma_m, mma_n, mma_k = mma_shape(mma.var, intrinsics)
        tiles = GemmTiles({"subgroups_m": sg_m.var, "subgroup_m": tile_m.var, "subgroups_n": sg_n.var,
                           "subgroup_n": tile_n.var, "reduction_k": red_k.var}, mma_m, mma_n, mma_k)
        wg_m, wg_n, k_tile = tiles.wg_m, tiles.wg_n, tiles.k_tile
        threads = tiles.threads(subgroup)
        acc_regs = tiles.accumulators(subgroup)
        stages = z3.If(prefetch.var >= 2, prefetch.var, 1)
        shared = (wg_m + wg_n) * k_tile * in_bytes * stages
        if len(splits) > 1:
            # A split op's partial result tile is promoted to shared memory too (IREE 3.13, read from
            # the compiled gfx942 code: a [wg_m x wg_n+2] f32 buffer besides the operands' tiles;
            # "uses 98304 bytes of shared memory" for 128x128 tiles of K 64 split 4, where the
            # operands alone need 32768).
            shared = shared + z3.If(split > 1, wg_m * wg_n * ELEMENT_BYTES.get(dispatch.out_type, 4), 0)
        def padded(extent: int, tile: z3.ArithRef) -> z3.ArithRef:
            return tiling.ceil_div(extent, tile) * tile

        if view.rows:
            # An implicit GEMM's column tile (M channels last, N channels first) lies on whole
            # padded rows or images of the output (column_tiles), its subgroups share it out;
            # the other side divides the problem, and K is padded as a matmul's (the stem's
            # 7x7x3 = 147 to 160, as the compiler's config pads it). Padding the columns is judged
            # on the row (the smallest tile may pad 7 columns to 16, as the compiler's own configs do).
            if view.rows_on_n:
                side, mma_side, other, other_tile = wg_n, mma_n, m, wg_m
            else:
                side, mma_side, other, other_tile = wg_m, mma_m, n, wg_n
            padded_row = (view.columns + mma_side - 1) / mma_side * mma_side
            p.require(column_tiles_fit(view, side, mma_side), other % other_tile == 0,
                      z3.Or(padded_row * 4 <= view.columns * 5, padded_row == mma_side))
        else:
            # Tiles that do not divide the problem are padded (the lowering config's `padding`);
            # padding may add at most a quarter of the work, or make a side shorter than one MMA
            # tile one MMA tile (the compiler pads a classifier's batch of 8 rows to 16 so; without
            # it ResNet-50's 8x1000x2048 had no config in the space).
            p.require(z3.Or(padded(m, wg_m) * 4 <= m * 5, z3.And(wg_m == mma_m, m < mma_m)),
                      z3.Or(padded(n, wg_n) * 4 <= n * 5, z3.And(wg_n == mma_n, n < mma_n)))
        p.require(
            padded(k, k_tile) * 4 <= k * 5,
            tiling.within(threads, t.max_threads_per_workgroup or 1024),
            tiling.within(shared, shared_memory_bytes(dispatch)),
            tiling.within(acc_regs, MAX_ACCUMULATOR_REGISTERS),
        )
        if len(splits) > 1:
            # A split reduction is not padded: each part is whole K tiles.
            p.require(z3.Or(split == 1, k % k_tile == 0))
        workgroups = split * workgroup_count(dispatch, view, wg_m, wg_n, mma_m, mma_n)
        if view.rows and (default := compiler_knobs_of_default(dispatch)):
            # An implicit-GEMM convolution: first the compiler's own config with one or two knobs
            # changed. On the H100 the 8 configs that the order below chose for ResNet-50's 14x14
            # 3x3 convolution (one subgroup of a full register tile each) all ran 1.3-5x slower
            # than the compiler's 8 subgroups of 2x2; on the CPU too, convolutions' winners lay
            # next to the compiler's config (issue 24).
            changed = z3.Sum([z3.If(p.knob(name).var == value, 0, 1) for name, value in default.items()])
            p.prefer("near_default", z3.And(changed >= 1, changed <= 2))
        # Then, most important first: whole tiles (no padding); enough workgroups to fill
        # the GPU; a register tile that uses most of the accumulator budget, then at least half
        # of it (on the H100, 4096^3: 4x8 tiles of 16x8 MMAs, 128 accumulators, ran 0.63 ms of
        # dispatch; the best 4x4 or 2x8 tiles 0.72 ms; 8x1 tiles 3-4.7 ms); 4 to 8 subgroups; a
        # K step of at least 32; then the intrinsic the compiler lists first.
        p.prefer("whole_tiles", z3.And(m % wg_m == 0, n % wg_n == 0, k % k_tile == 0))
        p.prefer("enough_workgroups", workgroups >= enough_workgroups(dispatch, view, intrinsics, max(splits)))
        p.prefer("full_register_tile", acc_regs * 4 >= MAX_ACCUMULATOR_REGISTERS * 3)
        p.prefer("busy_subgroups", acc_regs * 2 >= MAX_ACCUMULATOR_REGISTERS)
        p.prefer("four_to_eight_subgroups", z3.And(sg_m.var * sg_n.var >= 4, sg_m.var * sg_n.var <= 8))
        p.prefer("deep_k_step", k_tile >= 32)
        p.prefer("first_intrinsic", mma.var == 0)
        # Within those, cycle through K steps, prefetch depths and tile shapes.
        # (no_reduce_shared_memory_bank_conflicts stays at the compiler's default: on the H100,
        # 100 configs of 4096^3 without the padding ran 1.75-3 ms, their twins with it 1.06-2 ms.)
        p.diversify(red_k.name, prefetch.name, tile_m.name, tile_n.name, sg_m.name, sg_n.name, mma.name,
                    *(["split_k"] if len(splits) > 1 else []))
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        """What a config means for the hardware, for a search's model: tile sizes in elements,
        workgroups launched (split-K's parts included), the work padding adds, threads, shared
        memory, accumulators, and the split."""
        import math

        split = int(s.get("split_k", 1))
        view = split_view(dispatch, split)
        return {**gemm_features(view, gemm_view(view), compatible_intrinsics(view)[int(s["mma_kind"])], s),
                "split_k": math.log2(split)}

    compiler_pipeline = "iree_gpu.TileAndFuse"  # the pipeline of its emitted constraints

    def maps_to_compiler(self, dispatch: Dispatch) -> bool:
        """Whether `compiler_knobs` can say this dispatch's configs in the compiler's knobs: not
        for implicit-GEMM convolutions, whose emitted knobs index the convolution's own loops
        while these configs index the GEMM's positions."""
        return gemm_view(dispatch).rows is None

    def compiler_knobs(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, object]:
        """This config in the knobs of the compiler's emitted constraints: per loop dim d,
        `wg_d` (workgroup tile), `sg_d` (MMA tiles per subgroup), `red_d` (K steps); the
        subgroup and workgroup sizes, the prefetch stages, the subgroup counts (`sg_m_cnt`,
        `sg_n_cnt`), and under "mma" the intrinsic (the caller turns it into the compiler's
        `mma_idx`). A split-K config has none (NotInCompilerKnobs): the compiler's constraints
        describe the op unsplit."""
        if int(s.get("split_k", 1)) > 1:
            raise NotInCompilerKnobs(SPLIT_NOT_MODELLED)
        t = tile_sizes(dispatch, s)
        out: dict[str, object] = {f"wg_{d}": v for d, v in enumerate(t.workgroup) if v}
        out.update({f"sg_{d}": v for d, v in enumerate(t.subgroup) if v})
        out.update({f"red_{d}": v for d, v in enumerate(t.reduction) if v})
        out.update(sg_size=t.subgroup_size, wg_size_x=t.threads, wg_size_y=1, wg_size_z=1,
                   prefetch_num_stages=int(s["prefetch_num_stages"]), mma=t.intrinsic,
                   # Not knobs there but variables its assertions solve for: the subgroup counts.
                   sg_m_cnt=int(s["subgroups_m"]), sg_n_cnt=int(s["subgroups_n"]))
        return out

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir
        from iree.compiler.dialects import iree_codegen, iree_gpu

        split = int(s.get("split_k", 1))
        tuned = split_view(dispatch, split)  # the op the config goes on
        t = tile_sizes(tuned, s)
        intrinsic, view, threads = t.intrinsic, gemm_view(tuned), t.threads
        md, nd, kd, rank = view.m, view.n, view.k, view.rank
        workgroup, reduction, subgroup = list(t.workgroup), list(t.reduction), list(t.subgroup)
        tiles = GemmTiles.of(s, intrinsic)
        wg_m, wg_n = tiles.wg_m, tiles.wg_n
        with ctx:
            fields: dict[str, ir.Attribute] = {
                "mma_kind": iree_gpu.MMAAttr.get(getattr(iree_gpu.MMAIntrinsic, intrinsic.name)),
                "promote_operands": i64_array([0, 1]),
                "reduction": i64_array(reduction),
                "subgroup": i64_array(subgroup),
                "workgroup": i64_array(workgroup),
            }
            # Keep the unit flags the compiler set on its own config (e.g. convert_acc_gemm,
            # which folds the fill into the accumulator): they describe the op, not the tiling.
            m, n, k = view.m_total, view.n_total, view.k_extent
            k_tile = tiles.k_tile
            unaligned = (view.columns % workgroup[nd if view.rows_on_n else md] if view.rows
                         else m % wg_m or n % wg_n)
            if view.direct:
                # As the compiler's own direct configs (which always carry it): each workgroup
                # tile padded to its full size on the convolution's loops, the input channels
                # to the K step, the filter taps not at all.
                padding_conv = [0 if d in view.unit_reduction else t for d, t in enumerate(workgroup)]
                padding_conv[kd] = k_tile
                fields["padding_conv"] = i64_array(padding_conv)
            elif unaligned or k % k_tile:
                # As the compiler pads unaligned shapes and an image's columns (its own configs):
                # each workgroup tile to its full size, the unit-tiled loops to 1 (a 0 there
                # crashed iree-compile with SIGFPE: every candidate of ResNet-50's
                # 8x14x14x256x1024 1x1 convolution as a contraction), K to the K step; for a
                # convolution on its own loops too.
                padding = list(workgroup)
                padding[kd] = k_tile
                fields["padding"] = i64_array(padding)
                if tuned.conv is not None:
                    loops = len(tuned.loop_bounds)
                    fields["padding_conv"] = i64_array([*workgroup[:-1], *[0] * (loops - rank + 1)])
            default = ir.Attribute.parse(dispatch.default.lowering_config) if dispatch.default.lowering_config else None
            if isinstance(default, iree_gpu.LoweringConfigAttr):
                for named in default.attributes:
                    if isinstance(named.attr, ir.UnitAttr):
                        fields[named.name] = named.attr
            lowering = iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get(fields))
            reorder = iree_gpu.ReorderWorkgroupsStrategyAttr.get(iree_gpu.ReorderWorkgroupsStrategy.None_)
            options = iree_gpu.PipelineOptionsAttr.get(prefetch_num_stages=int(s["prefetch_num_stages"]),
                                                       reorder_workgroups_strategy=reorder,
                                                       use_igemm_convolution=(not view.direct) if tuned.conv else None)
            translation = iree_codegen.TranslationInfoAttr.get(
                ir.Attribute.parse(PIPELINE), None, [threads, 1, 1], subgroup_size(dispatch),
                ir.DictAttr.get({"gpu_pipeline_options": options}),
            )
        summary = (f"{intrinsic.name.removeprefix('NV_')} wg {wg_m}x{wg_n} "
                   f"subgroups {s['subgroups_m']}x{s['subgroups_n']} of {s['subgroup_m']}x{s['subgroup_n']} "
                   f"k{s['reduction_k']} prefetch {s['prefetch_num_stages']}"
                   + (f" split-K {split}" if split > 1 else ""))
        config = tiled_config(s, lowering, translation, summary)
        if split == 1:
            # On cuda the config goes in where the compiler configures the dispatch: a preprocessing
            # spec's is not taken under --iree-opt-level=O3 (BENCHMARKS.md), the codegen stage's is.
            return replace(config, codegen_spec=dispatch.target.backend == "cuda")
        # Read back from the split op: its loops must be the ones the config's positions index.
        return replace(config, parts=(SplitReduction(split, tuned.loop_bounds),))
