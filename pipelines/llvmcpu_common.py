"""What the llvm-cpu pipelines share: what they read of the target (element sizes, vector
registers) and the limits they tile to; and, for reductions and all-parallel dispatches, the
preferences around the compiler's own config and the config built from it with some tiles
changed in every op the compiler configures."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import z3

from constraints import IntKnob, Problem
from pipelines.base import Config, KnobValue
from pipelines.dispatch import ELEMENT_BYTES, Dispatch  # noqa: F401 (ELEMENT_BYTES: theirs)
from pipelines.parts import FusedOps
from pipelines.printed_config import levels, retiled, tiling_level

if TYPE_CHECKING:
    from iree.compiler import ir

# Workgroups the distribution tiles should at least make, so every core has work; the CPU
# target attribute does not say how many threads the runtime will use.
MIN_WORKGROUPS = 8
# A workgroup's output tile should stay in a core's L2 (1 MiB and up on current x86 and Arm).
MAX_WORKGROUP_TILE_BYTES = 1 << 20


def vector_registers(dispatch: Dispatch) -> int:
    """Architectural vector registers: 32 with AVX-512 or on AArch64, 16 otherwise on x86."""
    if dispatch.target.has_cpu_feature("avx512f") or "aarch64" in dispatch.target.arch:
        return 32
    return 16


def prefer_near_default(p: Problem, knobs: Mapping[str, IntKnob], default: Mapping[str, int],
                        workgroups: z3.ArithRef, whole_vectors: z3.BoolRef) -> None:
    """Most important first: near the compiler's own config (at most two knobs changed; its
    neighbourhood is where the convolutions' winners were, issue 24), enough workgroups for the
    cores, whole vectors, then variety."""
    changed = z3.Sum([z3.If(k.var == default[name], 0, 1) for name, k in knobs.items()])
    p.prefer("near_default", changed <= 2)
    p.prefer("enough_workgroups", workgroups >= MIN_WORKGROUPS)
    p.prefer("whole_vectors", whole_vectors)
    p.diversify(*knobs)


def retiled_config(dispatch: Dispatch, s: Mapping[str, KnobValue], new: dict[tuple[str, int], int], summary: str,
                   ctx: ir.Context) -> Config:
    """The compiler's own config of the root and of every other op it configures, with the tiles
    `new` gives ((level, loop) -> tile) changed, under the compiler's own translation_info.
    Lowering only: imports IREE. 3.13's bindings have no constructor for
    #iree_cpu.lowering_config, so each is parsed from its canonical form (verified on parse)."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_codegen

    texts = [dispatch.default.lowering_config, *(f.default_lowering_config for f in dispatch.fused)]
    with ctx:
        configs = [ir.Attribute.parse(retiled(text, new)) for text in texts]
        translation = ir.Attribute.parse(dispatch.default.translation_info)
        info = iree_codegen.CompilationInfoAttr.get(configs[0], translation)
    return Config(knobs=dict(s), compilation_info=str(info), summary=summary, expect_root_op=dispatch.op_name,
                  expect_lowering_config=str(configs[0]), expect_translation_info=str(translation),
                  parts=(FusedOps(tuple(str(c) for c in configs[1:])),), codegen_spec=True)


def levels_span_loops(dispatch: Dispatch, root_levels: tuple[str, ...]) -> bool:
    """Whether the compiler's config of the dispatch can be read as knobs and written back: its
    root op's `root_levels`, and every level of each fused op's config, hold one entry per loop."""
    rank = len(dispatch.loop_bounds)
    texts = [dispatch.default.lowering_config, *(f.default_lowering_config for f in dispatch.fused)]
    return (all(len(tiling_level(dispatch.default.lowering_config, lv)) == rank for lv in root_levels)
            and all(len(tiling_level(t, lv)) == rank for t in texts for lv in levels(t)))
