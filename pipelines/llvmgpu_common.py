"""What the LLVMGPU pipelines (TileAndFuse, VectorDistribute, VectorDistribute for attention)
share: element sizes, the accumulator budget, which MMA intrinsics they can lower, an
intrinsic's shape as Z3 terms, and i64 array attributes for the configs they build."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import z3

from pipelines.dispatch import ELEMENT_BYTES, Dispatch, MmaIntrinsic  # noqa: F401 (ELEMENT_BYTES: theirs)

if TYPE_CHECKING:
    from iree.compiler import ir

# 32-bit registers a thread may spend on accumulators. A thread has at most 255; the rest hold
# operand fragments, addresses and the pipeline's copies. Measured on the H100 (issue 4): a
# 256x128 workgroup with 8x8 MMA tiles per subgroup (256 accumulator registers) spilled and ran
# 20.6 ms against 0.89 ms.
MAX_ACCUMULATOR_REGISTERS = 128

# What a GPU target that does not say (a described one, pipelines.describe) is taken to have: the
# smallest subgroup and shared memory among the targets this tuner knows (cuda's 32 lanes and
# sm_80's 48 KiB without opt-in), so a config that fits it fits any of them.
FALLBACK_SUBGROUP_SIZE = 32
FALLBACK_SHARED_MEMORY_BYTES = 49152


def subgroup_size(dispatch: Dispatch) -> int:
    """The target's (first) subgroup size, or FALLBACK_SUBGROUP_SIZE where it names none."""
    return (dispatch.target.subgroup_sizes or (FALLBACK_SUBGROUP_SIZE,))[0]


def shared_memory_bytes(dispatch: Dispatch) -> int:
    """The target's shared memory per workgroup, or FALLBACK_SHARED_MEMORY_BYTES where it says none."""
    return dispatch.target.max_workgroup_memory_bytes or FALLBACK_SHARED_MEMORY_BYTES

# Intrinsics the target lists but TileAndFuse cannot lower in IREE 3.13: every NV_WMMA config
# tried on sm_80 (4096^3 and 16x4096x4096 f16, 14 tile shapes) failed with "'tensor.expand_shape'
# op expected dimension 2 of collapsed type to be static value of <garbage>".
UNSUPPORTED_INTRINSIC_PREFIXES = ("NV_WMMA_",)
# AMD's multi-block MFMAs (MFMA_F32_4x4x4x16B_F16, ..._16x16x4x4B_..., ..._32x32x4x2B_...) fail
# the same way on gfx942: "contraction like operation missing critical dimension".
UNSUPPORTED_INTRINSIC = re.compile(r"x\d+B_")


def compatible_intrinsics(dispatch: Dispatch, accumulator: str | None = None) -> list[MmaIntrinsic]:
    """The target's MMA intrinsics whose operand types match the dispatch's and whose
    accumulator type is `accumulator` (default: the dispatch's result type), that the GPU
    pipelines can lower."""
    wanted = (dispatch.lhs_type, dispatch.rhs_type, accumulator or dispatch.out_type)
    return [i for i in dispatch.target.mma_intrinsics
            if (i.a_type, i.b_type, i.c_type) == wanted
            and not i.name.startswith(UNSUPPORTED_INTRINSIC_PREFIXES) and not UNSUPPORTED_INTRINSIC.search(i.name)]


def mma_shape(choice: z3.ArithRef, intrinsics: list[MmaIntrinsic]) -> tuple[z3.ArithRef, z3.ArithRef, z3.ArithRef]:
    """The M, N and K of the intrinsic a knob picks (by index into `intrinsics`), as Z3 terms."""
    def field(name: str) -> z3.ArithRef:
        expr: z3.ArithRef = z3.IntVal(getattr(intrinsics[-1], name))
        for i, intrinsic in reversed(list(enumerate(intrinsics[:-1]))):
            expr = z3.If(choice == i, getattr(intrinsic, name), expr)
        return expr

    return field("m"), field("n"), field("k")


def i64_array(values: list[int]) -> ir.ArrayAttr:
    """An array of i64 attributes (in the current MLIR context). Lowering only: imports IREE."""
    from iree.compiler import ir

    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.IntegerAttr.get(i64, v) for v in values])


def retiled_default(dispatch: Dispatch, workgroup: list[int], thread: list[int], ctx: ir.Context,
                    **entries: ir.Attribute) -> tuple[ir.Attribute, ir.Attribute, ir.Attribute, int]:
    """The compiler's own TileAndFuse config of the dispatch with its `workgroup` and `thread`
    tiles (and any other `entries`) replaced, and a workgroup of as many threads as the tiles
    make (workgroup tile / thread tile over every loop), linearized ([threads, 1, 1], as IREE's
    own configs have it): (lowering config, translation info, compilation info, threads).
    Lowering only: imports IREE."""
    from iree.compiler import ir
    from iree.compiler.dialects import iree_codegen, iree_gpu

    threads = 1
    for w, t in zip(workgroup, thread):
        threads *= w // t if t else 1
    with ctx:
        default = iree_gpu.LoweringConfigAttr(ir.Attribute.parse(dispatch.default.lowering_config))
        fields = {n.name: n.attr for n in default.attributes}
        fields.update(workgroup=i64_array(workgroup), thread=i64_array(thread), **entries)
        lowering = iree_gpu.LoweringConfigAttr.get(ir.DictAttr.get(fields))
        info = iree_codegen.TranslationInfoAttr(ir.Attribute.parse(dispatch.default.translation_info))
        translation = iree_codegen.TranslationInfoAttr.get(info.pass_pipeline, None, [threads, 1, 1],
                                                           info.subgroup_size, info.configuration)
        compilation = iree_codegen.CompilationInfoAttr.get(lowering, translation)
    return lowering, translation, compilation, threads
