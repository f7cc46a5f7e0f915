"""llvm-cpu DoubleTilingExpert for contractions: distribution, vector and reduction tiles, plus
the data-tiling flag (which hands the op to the compiler's mmt4d path instead)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import z3

from constraints import BoolKnob, IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, default_pipeline_is, tiled_config
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmcpu_common import ELEMENT_BYTES, MAX_WORKGROUP_TILE_BYTES, MIN_WORKGROUPS, vector_registers
from pipelines.llvmcpu_mmt4d import CODEGEN, CODEGEN_FLAG, add_outer_tiles, outer_tiles_config
from pipelines.model_flags import DATA_TILING_FLAG, EARLY_MATERIALIZATION
from pipelines.parts import Microkernels

if TYPE_CHECKING:
    from iree.compiler import ir

MMT4D_TILES = "mmt4d_tiles"  # a data-tiled config with our outer tiles on the mmt4d
MMT4D_CODEGEN = "mmt4d_codegen"  # a data-tiled config with generated code, not the mmt4d microkernel
MMT4D_PREFIX = "mmt4d_"


def cpu_tile_features(m: int, n: int, dm: int, dn: int, vm: int, vn: int, lanes: int,
                       acc_bytes: int) -> dict[str, float]:
    """Derived quantities of a CPU register-tiled config (log2 where they multiply)."""
    import math

    vectors = vm * -(-vn // lanes)
    return {
        "workgroups": math.log2(-(-m // dm) * -(-n // dn)),
        "accumulators": float(vectors),
        "register_intensity": vm * vn / (vm + vn),  # FMAs per element loaded
        "partial_tiles": float(bool(m % dm) + bool(n % dn)),
        "tile_bytes": math.log2(dm * dn * acc_bytes),
    }


def _innermost(dims: tuple[int, ...]) -> int | None:
    return dims[-1] if dims else None


class LLVMCPUDoubleTiling(Pipeline):
    """Tiles a contraction at three levels: workgroup distribution over M/N, the vector tile
    (the register-resident accumulator), and the reduction step over K."""

    name = "llvmcpu_double_tiling"
    # Flags that change every dispatch of a model (data tiling turns contractions into mmt4d):
    # tried at the model level, with and without, by `tune-model`.
    # Data tiling with encodings materialized late (--iree-opt-data-tiling) or early, where the
    # mmt4d dispatches take configs (llvmcpu_mmt4d), which tune-model then tunes. Early
    # materialization forms packs and unpacks as dispatches of their own (0.95-0.98x of the late
    # form on the BERT-base-sized f32 layer, BENCHMARKS.md): which wins is the model's to say.
    # (Generated code instead of the microkernel is a candidate of `tune`, not offered here: each
    # flag set is a whole-model build, and with program rewrites it is two.)
    model_flags = ((DATA_TILING_FLAG,), EARLY_MATERIALIZATION)
    # Judged with its largest mmt4d dispatches tuned (their outer tiles are the point of it: a
    # bf16 layer's gained 1.71x over the flag alone, BENCHMARKS.md).
    tuned_model_flags = (EARLY_MATERIALIZATION,)
    # Knobs that stand for such flags: a model's tuning leaves them to the model (tune-model).
    flag_knobs = ("data_tiling",)
    families = ("data_tiling", "data tiling", "its own tiles")
    # Under these flags discovery also finds the contraction's data-tiled op (Dispatch.data_tiled),
    # whose outer tiles this pipeline's problem offers beside its own (`tune` on one contraction).
    data_tiling_flags = EARLY_MATERIALIZATION
    # A config that names none of the data-tiled knobs means none of that part of the space.
    optional_knobs = {MMT4D_TILES: False, MMT4D_CODEGEN: False, **{
        MMT4D_PREFIX + name: 0 for name in ("distribution_m1", "distribution_n1", "vector_m1", "vector_n1")}}

    def supports(self, dispatch: Dispatch) -> bool:
        return (
            dispatch.target.backend == "llvm-cpu"
            and dispatch.kind == DispatchKind.CONTRACTION
            and default_pipeline_is(dispatch, "iree_cpu.DoubleTilingExpert")
            and bool(dispatch.m_dims and dispatch.n_dims and dispatch.k_dims)
        )

    def build_problem(self, dispatch: Dispatch) -> Problem:
        m = dispatch.loop_bounds[dispatch.m_dims[-1]]
        n = dispatch.loop_bounds[dispatch.n_dims[-1]]
        k = dispatch.loop_bounds[dispatch.k_dims[-1]]
        acc_bytes = ELEMENT_BYTES.get(dispatch.out_type, 4)
        lanes = max(1, dispatch.target.native_vector_bytes // acc_bytes)
        regs = vector_registers(dispatch)

        p = Problem()
        data_tiling = p.add_knob(BoolKnob("data_tiling"))
        # 0 stands for "not tiled by us": the data-tiling candidate keeps the compiler's mmt4d config.
        dist_m = p.add_knob(IntKnob.of("distribution_m", [0] + tiling.tile_candidates(m, 8, 512)))
        dist_n = p.add_knob(IntKnob.of("distribution_n", [0] + tiling.tile_candidates(n, 8, 512)))
        vec_m = p.add_knob(IntKnob.of("vector_common_parallel_m", [0] + tiling.powers_of_two(1, min(m, 32))))
        vec_n_choices = [v for v in tiling.powers_of_two(1, min(n, 8 * lanes)) if v % lanes == 0 or v == n]
        vec_n = p.add_knob(IntKnob.of("vector_common_parallel_n", [0] + (vec_n_choices or [n])))
        red_k = p.add_knob(IntKnob.of("vector_reduction_k", [0] + tiling.tile_candidates(k, 1, 16)))
        tiles = [dist_m.var, dist_n.var, vec_m.var, vec_n.var, red_k.var]

        p.require(z3.If(data_tiling.var, z3.And([t == 0 for t in tiles]), z3.And([t > 0 for t in tiles])))
        tiled = z3.Not(data_tiling.var)
        # Data tiling with our outer tiles on the mmt4d the compiler forms (where discovery found
        # it): beside the flag alone, the data-tiled op's own space.
        # And generated code instead of the mmt4d microkernel (a flag, with the compiler's config).
        flag_alone = data_tiling.var
        mmt4d_knobs: list[str] = []
        if dispatch.data_tiled is not None:
            mmt4d_tiles = p.add_knob(BoolKnob(MMT4D_TILES))
            codegen = p.add_knob(BoolKnob(MMT4D_CODEGEN))
            p.require(z3.Implies(z3.Or(mmt4d_tiles.var, codegen.var), data_tiling.var))
            # Generated code with the compiler's tiles (a flag candidate); our tiles with the
            # microkernel. (tune-model tries generated code model-wide, then tunes the tiles under it.)
            p.require(z3.Not(z3.And(codegen.var, mmt4d_tiles.var)))
            mmt4d_knobs = [codegen.name, *add_outer_tiles(p, dispatch.data_tiled, MMT4D_PREFIX, active=mmt4d_tiles.var)]
            flag_alone = z3.And(data_tiling.var, z3.Not(mmt4d_tiles.var), z3.Not(codegen.var))
        acc_regs = vec_m.var * tiling.ceil_div(vec_n.var, lanes)
        workgroups = tiling.ceil_div(m, dist_m.var) * tiling.ceil_div(n, dist_n.var)
        p.require(
            z3.Implies(
                tiled,
                z3.And(
                    # The vector tile sits inside the workgroup tile.
                    dist_m.var % vec_m.var == 0,
                    dist_n.var % vec_n.var == 0,
                    # Accumulators plus one row of B and a broadcast of A stay in registers.
                    tiling.within(acc_regs + tiling.ceil_div(vec_n.var, lanes) + 1, regs),
                    tiling.within(dist_m.var * dist_n.var * acc_bytes, MAX_WORKGROUP_TILE_BYTES),
                ),
            )
        )
        # Most important first: data tiling (a different, often much faster code path), a
        # register tile that fills at least half the register file, enough workgroups for the
        # cores, tiles that divide the problem (no partial tiles), then the reduction step
        # that suits B's layout.
        # The flag alone first; our mmt4d tiles then take turns with the tiled configs (variety).
        p.prefer("data_tiling", flag_alone)
        p.prefer("fill_registers", z3.Implies(tiled, acc_regs * 2 >= regs))
        p.prefer("enough_workgroups", z3.Implies(tiled, workgroups >= min(MIN_WORKGROUPS, (m * n) // 64 or 1)))
        # Separately for M and N: an unaligned N must not stop M from getting whole tiles.
        p.prefer("whole_tiles_m", z3.Implies(tiled, m % dist_m.var == 0))
        p.prefer("whole_tiles_n", z3.Implies(tiled, n % dist_n.var == 0))
        if dispatch.contiguous_dim(1) == dispatch.k_dims[-1]:
            # B is K-contiguous (B^T, a linear layer's weight): vectorize the reduction over a
            # full vector of K. Measured on AVX-512, 512x2048x768: vec 16x16 k16 ran 8.9 ms,
            # vec 8x32 k1 23.8 ms.
            p.prefer("vector_k_step", z3.Implies(tiled, red_k.var == lanes))
        else:
            # B is N-contiguous: one K step per iteration of an outer-product register tile.
            # Measured on AVX-512, 1024^3: vec 8x32 k1 ran 17 ms, vec 2x128 k1 50 ms.
            p.prefer("single_k_step", z3.Implies(tiled, red_k.var == 1))
            p.prefer("tall_register_tile", z3.Implies(tiled, vec_m.var >= 4))
        # Cycle through register tiles first, then reduction steps, then workgroup tiles.
        if mmt4d_knobs:
            p.diversify(data_tiling.name, vec_m.name, vec_n.name, red_k.name, dist_m.name, dist_n.name, *mmt4d_knobs)
        else:
            p.diversify(vec_m.name, vec_n.name, red_k.name, dist_m.name, dist_n.name)
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        """What a config means for the core, for a search's model: workgroups, accumulator
        registers, the register tile's loads per FMA, partial tiles, the workgroup tile's bytes."""
        if s["data_tiling"]:  # (the same features for our mmt4d tiles: the knobs say them)
            return {"workgroups": 0.0, "accumulators": 0.0, "register_intensity": 0.0, "partial_tiles": 0.0,
                    "tile_bytes": 0.0}
        m = dispatch.loop_bounds[dispatch.m_dims[-1]]
        n = dispatch.loop_bounds[dispatch.n_dims[-1]]
        lanes = max(1, dispatch.target.native_vector_bytes // ELEMENT_BYTES.get(dispatch.out_type, 4))
        dm, dn = int(s["distribution_m"]), int(s["distribution_n"])
        vm, vn = int(s["vector_common_parallel_m"]), int(s["vector_common_parallel_n"])
        return cpu_tile_features(m, n, dm, dn, vm, vn, lanes, ELEMENT_BYTES.get(dispatch.out_type, 4))

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, solution: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        from iree.compiler import ir
        from iree.compiler.dialects import iree_codegen

        codegen = (CODEGEN_FLAG,) if solution.get(MMT4D_CODEGEN) else ()
        if solution.get(MMT4D_TILES):
            # Our outer tiles on the mmt4d, which exists for a spec only under early materialization.
            return outer_tiles_config(dispatch.data_tiled, solution, ctx, MMT4D_PREFIX, flags=EARLY_MATERIALIZATION,
                                      on=dispatch.data_tiled)
        if solution["data_tiling"]:
            # The contraction becomes linalg.mmt4d in its own dispatch; the compiler configures it.
            return Config(knobs=dict(solution), compilation_info=None, flags=(DATA_TILING_FLAG, *codegen),
                          summary="data tiling (mmt4d)" + (", no ukernel" if codegen else ""),
                          expect_root_op="linalg.batch_mmt4d" if dispatch.batch_dims else "linalg.mmt4d",
                          parts=(Microkernels(CODEGEN),) if codegen else ())
        lowering = self._lowering_config(dispatch, solution, ctx)
        with ctx:
            translation = iree_codegen.TranslationInfoAttr.get(
                ir.Attribute.parse("#iree_cpu.pipeline<DoubleTilingExpert>")
            )
        summary = (f"wg {solution['distribution_m']}x{solution['distribution_n']} "
                   f"vec {solution['vector_common_parallel_m']}x{solution['vector_common_parallel_n']} "
                   f"k{solution['vector_reduction_k']}")
        return tiled_config(solution, lowering, translation, summary, expect_root_op=dispatch.op_name)

    @staticmethod
    def _lowering_config(dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> ir.Attribute:
        from iree.compiler import ir

        m_in, n_in, k_in = _innermost(dispatch.m_dims), _innermost(dispatch.n_dims), _innermost(dispatch.k_dims)
        reduction = set(dispatch.k_dims)
        dist, vec, red = [], [], []
        for d in range(len(dispatch.loop_bounds)):
            if d in reduction:
                dist.append(0)
                vec.append(0)
                red.append(int(s["vector_reduction_k"]) if d == k_in else 1)
            else:
                dist.append(int(s["distribution_m"]) if d == m_in else int(s["distribution_n"]) if d == n_in else 1)
                vec.append(int(s["vector_common_parallel_m"]) if d == m_in
                           else int(s["vector_common_parallel_n"]) if d == n_in else 1)
                red.append(0)
        # IREE 3.13's Python bindings have no constructor for #iree_cpu.lowering_config, so it
        # is parsed from its canonical form; the compiler's verifier checks it on parse.
        text = (f"#iree_cpu.lowering_config<distribution = {dist}, "
                f"vector_common_parallel = {vec}, vector_reduction = {red}>")
        with ctx:
            return ir.Attribute.parse(text)
