"""LLVMGPU TileAndFuse for all-parallel dispatches on cuda and rocm (transposes, elementwise
work): the workgroup tile over the two innermost loops and the elements a thread handles along
the innermost.

IREE 3.13 configures such a dispatch's root op with `workgroup` and `thread` tiles (a transpose
also promotes its input to shared memory: `promote_operands`), and a workgroup of as many
threads as the tiles make (workgroup tile / thread tile over every loop). A config here is the
compiler's own, read from the dispatch, with these knobs changed:

- `workgroup_outer`, `workgroup_inner`: the workgroup tile of the two innermost loops;
- `thread_inner`: the thread tile along the innermost loop (its elements per load);
- a transpose whose output's innermost dim follows another loop (NCHW read, NHWC written: the
  channels-last rewrite's copies) also `workgroup_write` and `thread_write`, the tiles along that
  loop, and `promote_input` (the input tile staged in shared memory, `promote_operands = [0]`). IREE 3.13's default tiles only the input's innermost loops, so each thread writes
  single elements a row apart (0.085 ms for a 2x640x64x64 f16 copy on the H100, a tenth of the
  memory's bandwidth); tiled along the write loop too, a thread writes a vector.

The workgroup size follows, linearized ([threads, 1, 1], as IREE's own 3-D configs have it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import z3

from constraints import BoolKnob, IntKnob, Problem, tiling
from pipelines.base import Config, KindPipeline, KnobValue, default_pipeline_is
from pipelines.dispatch import PARALLEL_KINDS, Dispatch
from pipelines.llvmgpu_common import ELEMENT_BYTES, i64_array, retiled_default
from pipelines.printed_config import tiling_level

if TYPE_CHECKING:
    from iree.compiler import ir

MAX_LOAD_BITS = 128


def _tiles(dispatch: Dispatch) -> tuple[list[int], list[int]] | None:
    """The compiler's workgroup and thread tiles, where they are the kind described above: every
    loop but the two innermost one thread's work (their workgroup tile equal to the thread tile)."""
    text = dispatch.default.lowering_config
    wg, th = tiling_level(text, "workgroup"), tiling_level(text, "thread")
    rank = len(dispatch.loop_bounds)
    if len(wg) != rank or len(th) != rank or rank < 1 or dispatch.fused:
        return None
    if any(t <= 0 or w % t for w, t in zip(wg[-2:], th[-2:])):
        return None
    if any(w != t and not (w == 1 and t == 0) for w, t in zip(wg[:-2], th[:-2])):
        return None
    return wg, th


def _its_kind(dispatch: Dispatch) -> bool:
    """A transpose or elementwise dispatch the compiler gives TileAndFuse on a GPU target."""
    return (dispatch.target.backend in ("cuda", "rocm") and dispatch.kind in PARALLEL_KINDS
            and default_pipeline_is(dispatch, "iree_gpu.TileAndFuse"))


def _loops(dispatch: Dispatch) -> dict[str, int]:
    """The loops the knobs tile: the two innermost, and the loop the output's innermost dim
    follows where that is neither ("write")."""
    rank = len(dispatch.loop_bounds)
    loops = {"inner": rank - 1, **({"outer": rank - 2} if rank > 1 else {})}
    written = dispatch.operand_dims[-1][-1] if dispatch.operand_dims and dispatch.operand_dims[-1] else -1
    if written >= 0 and written not in loops.values():
        loops["write"] = written
    return loops


def _transposed_input(dispatch: Dispatch) -> int | None:
    """The first input read in another order than the output is written (a full-rank one)."""
    *inputs, output = dispatch.operand_dims or ((),)
    return next((i for i, dims in enumerate(inputs) if len(dims) == len(output) and dims != output), None)


class LLVMGPUTileAndFuseElementwise(KindPipeline):
    name = "llvmgpu_tile_and_fuse_elementwise"
    aliases = ("llvmgpu_tile_and_fuse",)

    def takes(self, dispatch: Dispatch) -> bool:
        return _its_kind(dispatch)

    def limit(self, dispatch: Dispatch) -> str | None:
        if _tiles(dispatch) is None:
            return ("the compiler's TileAndFuse config of this dispatch tiles more than its two innermost loops "
                    "across threads, or configures several ops; not tunable yet")
        if not dispatch.default.subgroup_size:
            return "the compiler's config of this dispatch names no subgroup size"
        return None

    def build_problem(self, dispatch: Dispatch) -> Problem:
        tiles = _tiles(dispatch)
        assert tiles is not None
        wg, th = tiles
        b = dispatch.loop_bounds
        loops = _loops(dispatch)
        subgroup = dispatch.default.subgroup_size or 32
        max_threads = dispatch.target.max_threads_per_workgroup or 1024
        bits = 8 * max(ELEMENT_BYTES.get(dispatch.lhs_type, 4), ELEMENT_BYTES.get(dispatch.out_type, 4))
        inner = loops["inner"]

        p = Problem()
        wg_inner = p.add_knob(IntKnob.of("workgroup_inner", sorted({*tiling.powers_of_two(1, min(1024, b[inner])),
                                                                    wg[inner]})))
        th_inner = p.add_knob(IntKnob.of("thread_inner", sorted({*tiling.powers_of_two(1, MAX_LOAD_BITS // bits),
                                                                 th[inner]})))
        threads = wg_inner.var / th_inner.var
        p.require(wg_inner.var % th_inner.var == 0)
        whole = [b[inner] % wg_inner.var == 0]
        if "outer" in loops:
            outer = loops["outer"]
            wg_outer = p.add_knob(IntKnob.of("workgroup_outer", sorted({*tiling.powers_of_two(1, min(256, b[outer])),
                                                                        wg[outer]})))
            p.require(wg_outer.var % th[outer] == 0)
            threads = threads * (wg_outer.var / th[outer])
            whole.append(b[outer] % wg_outer.var == 0)
        if "write" in loops:
            write = loops["write"]
            wg_write = p.add_knob(IntKnob.of("workgroup_write", sorted({*tiling.powers_of_two(1, min(128, b[write])),
                                                                        wg[write]})))
            th_write = p.add_knob(IntKnob.of("thread_write", sorted({*tiling.powers_of_two(1, MAX_LOAD_BITS // bits),
                                                                     th[write]})))
            p.require(wg_write.var % th_write.var == 0)
            threads = threads * (wg_write.var / th_write.var)
            whole.append(b[write] % wg_write.var == 0)
            # The input tile staged in shared memory first (IREE's own transposes of an input do
            # that): read in rows of the input, then written in rows of the output.
            promote = p.add_knob(BoolKnob("promote_input"))
            if _transposed_input(dispatch) is None:
                p.require(z3.Not(promote.var))
            elif dispatch.target.max_workgroup_memory_bytes:
                tile = wg_inner.var * wg_write.var * (p.knob("workgroup_outer").var if "outer" in loops else 1)
                p.require(z3.Implies(promote.var, tile * (bits // 8) <= dispatch.target.max_workgroup_memory_bytes))
            # Writes of whole vectors, a warp's rows 64 bytes long at least.
            p.prefer("vector_writes", th_write.var * bits == MAX_LOAD_BITS)
            p.prefer("long_write_rows", wg_write.var * bits >= 8 * 64)
        # Whole subgroups, within the target's thread limit.
        p.require(z3.And(threads % subgroup == 0, threads <= max_threads))
        if "promote_operands" in dispatch.default.lowering_config and dispatch.target.max_workgroup_memory_bytes:
            # A transpose stages its input tile in shared memory: the tile must fit there.
            tile = wg_inner.var * (p.knob("workgroup_outer").var if "outer" in loops else 1)
            p.require(tile * ELEMENT_BYTES.get(dispatch.lhs_type, 4) <= dispatch.target.max_workgroup_memory_bytes)
        if "write" not in loops:  # (a transpose's loads are the knobs' to find)
            p.prefer("default_loads", th_inner.var == th[inner])
        p.prefer("whole_tiles", z3.And(*whole))
        p.diversify(*(k.name for k in p.knobs))
        return p

    def features(self, dispatch: Dispatch, s: Mapping[str, KnobValue]) -> dict[str, float]:
        import math

        return {"tile": math.log2(int(s["workgroup_inner"]) * int(s.get("workgroup_outer", 1))
                                  * int(s.get("workgroup_write", 1))),
                "loads": math.log2(int(s["thread_inner"])), "writes": math.log2(int(s.get("thread_write", 1)))}

    # The lowering: the only part that imports IREE.
    def to_config(self, dispatch: Dispatch, s: Mapping[str, KnobValue], ctx: ir.Context) -> Config:
        tiles = _tiles(dispatch)
        assert tiles is not None
        wg, th = list(tiles[0]), list(tiles[1])
        loops = _loops(dispatch)
        wg[loops["inner"]], th[loops["inner"]] = int(s["workgroup_inner"]), int(s["thread_inner"])
        if "outer" in loops:
            wg[loops["outer"]] = int(s["workgroup_outer"])
        if "write" in loops:
            wg[loops["write"]], th[loops["write"]] = int(s["workgroup_write"]), int(s["thread_write"])
        with ctx:
            promoted = {"promote_operands": i64_array([_transposed_input(dispatch)])} if s.get("promote_input") else {}
        lowering, translation, compilation, threads = retiled_default(dispatch, wg, th, ctx, **promoted)
        tile = "x".join(str(wg[d]) for d in sorted(loops.values()))
        per_thread = f"{s['thread_inner']}" + (f"x{s['thread_write']}" if "write" in loops else "")
        return Config(knobs=dict(s), compilation_info=str(compilation),
                      summary=f"wg {tile}, {per_thread} per thread, {threads} threads",
                      expect_root_op=dispatch.op_name, expect_lowering_config=str(lowering),
                      expect_translation_info=str(translation), codegen_spec=True)
