"""llvm-cpu Mmt4dTilingExpert: the data-tiled matmul (`linalg.mmt4d`, `linalg.batch_mmt4d`) that a
contraction becomes under data tiling. Its inner tiles (M0, N0, K0: the packed layout) are the
target's, chosen when encodings are materialized; what is tuned is the outer tiling: how many
inner tiles a workgroup takes along M and N (distribution) and how many a vector step unrolls.
(A reduction step of more than one K tile compiled to the same executable as one, every time it
was tried on the BERT-base-sized layer's mmt4d dispatches: it is not a knob.)

Where a config can go (IREE 3.13, read back from the compiled mmt4d dispatch): with
`--iree-opt-data-tiling` a tuning spec is applied before encodings are materialized, so a
config on the mmt4d is not taken (the compiler's own stays); with encodings materialized early
in global optimization (`EARLY_MATERIALIZATION`) the mmt4d exists when the spec runs and its
config is taken. The pipeline therefore tunes mmt4d dispatches found under those flags only."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping, Optional

import z3

from constraints import IntKnob, Problem, tiling
from pipelines.base import Config, KnobValue, Pipeline, default_pipeline_is, tiled_config
from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmcpu_common import ELEMENT_BYTES, MIN_WORKGROUPS, vector_registers
from pipelines.model_flags import EARLY_MATERIALIZATION
from pipelines.parts import DataTiled

if TYPE_CHECKING:
    from iree.compiler import ir

MMT4D_OPS = ("linalg.mmt4d", "linalg.batch_mmt4d")
# A workgroup's A and B panels (all of K) should stay in a core's L2 (1 MiB and up on current
# x86 and Arm cores), as the compiler's own `--iree-llvmcpu-matmul-tile-bytes` aims for.
MAX_PANEL_BYTES = 1 << 20
# Generated code instead of the mmt4d microkernel. In 3.13 on x86 the compiler's default already
# calls the microkernel for a data-tiled matmul (`--iree-llvmcpu-enable-ukernels=mmt4d` compiled
# to the same executables as the default, f32 and bf16, late and early materialization alike);
# `none` generates the code instead. A target attribute, so a flag for the whole module, read
# back from the compiled executable's target (`ukernels = "none"`).
CODEGEN_FLAG = "--iree-llvmcpu-enable-ukernels=none"
CODEGEN = "none"


def early_materialized(flags: tuple[str, ...]) -> bool:
    """Whether a program compiled with `flags` materializes encodings early (mmt4d configs take)."""
    return all(f in flags for f in EARLY_MATERIALIZATION)


@dataclass(frozen=True)
class Mmt4dShape:
    """An mmt4d's loops by role: batch (or 1), the outer tile counts M1, N1, K1 and the inner
    tiles M0, N0, K0, as the compiler formed them (read from the op, never assumed)."""

    batch: int
    m1: int
    n1: int
    k1: int
    m0: int
    n0: int
    k0: int
    lhs_bytes: int
    acc_bytes: int

    @staticmethod
    def of(d: Dispatch) -> "Mmt4dShape":
        b = d.loop_bounds
        batch = b[d.batch_dims[0]] if d.batch_dims else 1
        (m1, m0), (n1, n0), (k1, k0) = (d.sizes(d.m_dims), d.sizes(d.n_dims), d.sizes(d.k_dims))
        return Mmt4dShape(batch, m1, n1, k1, m0, n0, k0, ELEMENT_BYTES.get(d.lhs_type, 4),
                          ELEMENT_BYTES.get(d.out_type, 4))


def is_mmt4d(d: Dispatch) -> bool:
    return (d.kind == DispatchKind.CONTRACTION and d.op_name in MMT4D_OPS
            and len(d.m_dims) == len(d.n_dims) == len(d.k_dims) == 2)


def add_outer_tiles(p: Problem, d: Dispatch, prefix: str = "", active: Optional[z3.BoolRef] = None) -> list[str]:
    """The outer-tiling knobs of the mmt4d `d` (names prefixed with `prefix`) and their rules;
    with `active`, the knobs are 0 ("the compiler's own") where it is false and tiles where it is
    true (a contraction's problem offers its data-tiled form beside its own tiles)."""
    s = Mmt4dShape.of(d)
    lanes = max(1, d.target.native_vector_bytes // s.acc_bytes)
    zero = [0] if active is not None else []
    dm = p.add_knob(IntKnob.of(prefix + "distribution_m1", zero + tiling.tile_candidates(s.m1, 1, 64)))
    dn = p.add_knob(IntKnob.of(prefix + "distribution_n1", zero + tiling.tile_candidates(s.n1, 1, 64)))
    vm = p.add_knob(IntKnob.of(prefix + "vector_m1", zero + [v for v in (1, 2, 4) if v <= s.m1]))
    vn = p.add_knob(IntKnob.of(prefix + "vector_n1", zero + [v for v in (1, 2, 4) if v <= s.n1]))
    knobs = [dm, dn, vm, vn]
    # Accumulators (vm x vn inner tiles of M0 x N0) plus a vector of B and a broadcast of A in registers.
    n0_vectors = -(-s.n0 // lanes)
    acc_regs = vm.var * vn.var * s.m0 * n0_vectors
    panel_bytes = (dm.var * s.m0 + dn.var * s.n0) * s.k1 * s.k0 * s.lhs_bytes
    workgroups = s.batch * tiling.ceil_div(s.m1, dm.var) * tiling.ceil_div(s.n1, dn.var)
    rules = z3.And(
        dm.var % vm.var == 0,  # the vector step sits inside the workgroup tile
        dn.var % vn.var == 0,
        tiling.within(acc_regs + n0_vectors + 1, vector_registers(d)),
        tiling.within(panel_bytes, MAX_PANEL_BYTES),
    )
    if active is None:
        p.require(rules)
        on = z3.BoolVal(True)
    else:
        p.require(z3.If(active, z3.And(rules, *[k.var > 0 for k in knobs]), z3.And([k.var == 0 for k in knobs])))
        on = active
    # Enough workgroups for the cores, whole outer tiles, then variety over the tiles.
    p.prefer(prefix + "enough_workgroups", z3.Implies(on, workgroups >= min(MIN_WORKGROUPS, s.batch * s.m1 * s.n1)))
    p.prefer(prefix + "whole_tiles", z3.Implies(on, z3.And(s.m1 % dm.var == 0, s.n1 % dn.var == 0)))
    return [dm.name, dn.name, vm.name, vn.name]  # in the order variety should cycle them


def outer_tiles_summary(s: Mapping[str, KnobValue], prefix: str = "") -> str:
    return (f"mmt4d wg {s[prefix + 'distribution_m1']}x{s[prefix + 'distribution_n1']} "
            f"vec {s[prefix + 'vector_m1']}x{s[prefix + 'vector_n1']}")


def outer_tiles_config(d: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context, prefix: str = "",
                       flags: tuple[str, ...] = (), on: Optional[Dispatch] = None) -> Config:
    """The compilation_info of the mmt4d `d` with the outer tiles of `s` (Mmt4dTilingExpert),
    expected back unchanged from the compiled dispatch; `on`: the data-tiled mmt4d of the tuned
    contraction, which the config goes on (pipelines.parts.DataTiled). Lowering only: imports IREE."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_codegen

    sh = Mmt4dShape.of(d)
    lead = [1] if d.batch_dims else []
    dist = lead + [int(s[prefix + "distribution_m1"]), int(s[prefix + "distribution_n1"]), 0, 0, 0, 0]
    vec = lead + [int(s[prefix + "vector_m1"]), int(s[prefix + "vector_n1"]), 0, sh.m0, sh.n0, 0]
    red = [0] * len(lead) + [0, 0, 1, 0, 0, sh.k0]
    # 3.13's bindings have no constructor for #iree_cpu.lowering_config: parsed from its
    # canonical form, which the compiler's verifier checks on parse.
    with ctx:
        lowering = ir.Attribute.parse(f"#iree_cpu.lowering_config<distribution = {dist}, "
                                      f"vector_common_parallel = {vec}, vector_reduction = {red}>")
        translation = iree_codegen.TranslationInfoAttr.get(ir.Attribute.parse("#iree_cpu.pipeline<Mmt4dTilingExpert>"))
    config = tiled_config(s, lowering, translation, outer_tiles_summary(s, prefix), expect_root_op=d.op_name)
    return replace(config, flags=flags, parts=(DataTiled(on),) if on is not None else ())


class LLVMCPUMmt4d(Pipeline):
    """The outer tiles of a data-tiled matmul found under early materialization (tune-model's
    dispatches once the flag stage chose data tiling)."""

    name = "llvmcpu_mmt4d"

    def supports(self, dispatch: Dispatch) -> bool:
        return (dispatch.target.backend == "llvm-cpu" and is_mmt4d(dispatch)
                and default_pipeline_is(dispatch, "iree_cpu.Mmt4dTilingExpert")
                and early_materialized(dispatch.flags))

    def declines(self, dispatch: Dispatch) -> str | None:
        if dispatch.target.backend == "llvm-cpu" and is_mmt4d(dispatch) and not early_materialized(dispatch.flags):
            return (f"{dispatch.op_name}: formed with encodings materialized late (--iree-opt-data-tiling), where "
                    "a tuning spec runs before the mmt4d exists and its config is not taken; tunable under "
                    + " ".join(EARLY_MATERIALIZATION))
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        p = Problem()
        p.diversify(*add_outer_tiles(p, dispatch))
        return p

    def to_config(self, dispatch: Dispatch, solution: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        return outer_tiles_config(dispatch, solution, ctx)
