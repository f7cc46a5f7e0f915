"""What the tuner knows about one dispatch: plain data read from the compiler, shared by all layers."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional

# Bytes per element of each element type a dispatch's operands may have (one table for the CPU
# and GPU pipelines; types outside it are taken as 2 or 4 bytes where they are read).
ELEMENT_BYTES = {"f64": 8, "f32": 4, "i32": 4, "f16": 2, "bf16": 2, "i16": 2, "i8": 1}


class DispatchKind(str, enum.Enum):
    CONTRACTION = "contraction"
    CONVOLUTION = "convolution"
    ATTENTION = "attention"
    # Dispatches whose root op reduces without multiplying (discovery names them by what the
    # whole dispatch computes: tuner.discovery.other_kinds).
    SOFTMAX = "softmax"
    NORMALIZATION = "normalization"
    REDUCTION = "reduction"
    # Dispatches of parallel loops only: a transpose (maybe with elementwise work fused), or
    # elementwise work alone.
    TRANSPOSE = "transpose"
    ELEMENTWISE = "elementwise"


# The kinds whose root is a plain reduction: their loops are parallel (`m_dims`) or reduced
# (`k_dims`); `n_dims` and `batch_dims` are empty.
REDUCTION_KINDS = (DispatchKind.SOFTMAX, DispatchKind.NORMALIZATION, DispatchKind.REDUCTION)
# The kinds of all-parallel dispatches: every loop is in `m_dims`.
PARALLEL_KINDS = (DispatchKind.TRANSPOSE, DispatchKind.ELEMENTWISE)
# The kinds a spec matches by the root's structure and whose other configured ops it reaches
# from the root (tuner.specs.fused), rather than with one of IREE's op matchers.
MATCHED_BY_STRUCTURE = REDUCTION_KINDS + PARALLEL_KINDS


@dataclass(frozen=True)
class FusedOp:
    """Another op of a dispatch that the compiler configures besides the root (a GPU reduction
    dispatch gives each of its ops a lowering_config: a softmax's max reduction and division),
    and how a spec reaches it from the root: each step is ("input", i), the op producing the
    op's i-th input, or ("user", 0), the single op using its result."""

    op_name: str
    result_type: str  # e.g. "tensor<16x2048xf32>"
    path: tuple[tuple[str, int], ...]
    # "" for an op the compiler leaves bare where it should configure it (a GPU reduction's
    # stored elementwise op: tuner.discovery.by_structure.left_unconfigured).
    default_lowering_config: str
    loop_bounds: tuple[int, ...] = ()


@dataclass(frozen=True)
class MmaIntrinsic:
    """One matrix-multiply instruction the target offers, as the compiler describes it."""

    name: str  # IREE's enum name, e.g. "NV_MMA_SYNC_F32_16x8x16_F16"
    m: int
    n: int
    k: int
    a_type: str
    b_type: str
    c_type: str


@dataclass(frozen=True)
class TargetFacts:
    """The executable target the compiler chose, as read from its attribute.

    `backend` is IREE's name ("llvm-cpu", "cuda", "rocm"). CPU fields are set for llvm-cpu;
    GPU fields for GPU targets. Nothing here is hard-coded per chip: discovery reads it.
    """

    backend: str
    arch: str
    # llvm-cpu
    cpu_features: tuple[str, ...] = ()
    native_vector_bytes: int = 0
    # GPU
    subgroup_sizes: tuple[int, ...] = ()
    max_threads_per_workgroup: int = 0
    max_workgroup_sizes: tuple[int, ...] = ()
    max_workgroup_memory_bytes: int = 0
    mma_intrinsics: tuple[MmaIntrinsic, ...] = ()
    attribute: str = ""  # the target attribute's text, for building configs against it

    def has_cpu_feature(self, feature: str) -> bool:
        return f"+{feature}" in self.cpu_features


@dataclass(frozen=True)
class DefaultConfig:
    """The configuration the compiler picked on its own (the baseline)."""

    pipeline: str  # e.g. "#iree_cpu.pipeline<DoubleTilingExpert>"
    lowering_config: str
    workgroup_size: tuple[int, ...] = ()
    subgroup_size: Optional[int] = None
    translation_info: str = ""  # the whole attribute's text
    # The pipeline as discovery read it from the typed attribute: "<dialect>.<pipeline>", e.g.
    # "iree_gpu.TileAndFuse", "iree_cpu.DoubleTilingExpert" ("" where there is none).
    pipeline_id: str = ""


@dataclass(frozen=True)
class ConvDims:
    """A convolution's loop dims by role, as `linalg.infer_convolution_dimensions` gives them."""

    batch: tuple[int, ...]
    output_image: tuple[int, ...]
    output_channel: tuple[int, ...]
    filter: tuple[int, ...]
    input_channel: tuple[int, ...]
    depth: tuple[int, ...]  # depthwise convolutions' channel multiplier dims
    strides: tuple[int, ...]
    dilations: tuple[int, ...]


@dataclass(frozen=True)
class Dispatch:
    """One tunable root op of one dispatch, with everything a pipeline needs to build a problem."""

    name: str  # the dispatch function's symbol, e.g. "main_dispatch_0_matmul_1024x1024x1024_f32"
    kind: DispatchKind
    op_name: str  # e.g. "linalg.matmul"
    loop_bounds: tuple[int, ...]
    batch_dims: tuple[int, ...]
    m_dims: tuple[int, ...]
    n_dims: tuple[int, ...]
    k_dims: tuple[int, ...]
    lhs_type: str  # element types as MLIR spells them: "f32", "f16", "i8"
    rhs_type: str
    out_type: str
    indexing_maps: tuple[str, ...]
    target: TargetFacts
    default: DefaultConfig
    # For each operand (inputs, then output), the loop dim each of its tensor dims follows
    # (-1 where the map's result is not a plain dim): the operand's layout.
    operand_dims: tuple[tuple[int, ...], ...] = ()
    flags: tuple[str, ...] = field(default=())  # the flag knobs this dispatch was discovered under
    # A digest of the input it was found in: what is timed (the whole entry on CPUs) depends on
    # everything there, so results of equal dispatches from different inputs are kept apart.
    source_digest: str = ""
    # Convolutions: the dims by role. Their contraction view (the implicit GEMM) is also set:
    # batch_dims = batch, m_dims = output image, n_dims = output channel, k_dims = filter and
    # input channel.
    conv: Optional[ConvDims] = None
    # Attention: the compiler's own decomposition_config (its QK and PV matmuls' configs). Its
    # contraction view: M = queries, N = value columns, K = head dim (K1) then keys (K2).
    decomposition_config: str = ""
    # Reduction kinds: the root's result type (what a spec matches it by) and the other ops the
    # compiler configures in the same dispatch.
    result_type: str = ""
    fused: tuple[FusedOp, ...] = ()
    # The dispatch's compute ops besides the root and its fills, by name (a matmul's fused bias
    # and activation: linalg.generic), whatever the kind; () where none, or where not read.
    other_ops: tuple[str, ...] = ()
    # CPU contractions: the data-tiled op (linalg.mmt4d) the compiler forms from this one under
    # data tiling with early materialization, as discovery found it there; None where not looked for.
    data_tiled: Optional["Dispatch"] = None
    # Found in a program that is an executable already (an IREE dispatch benchmark): nothing that
    # acts before dispatches are formed reaches it (no split-K, which splits the op there).
    in_executable: bool = False

    def contiguous_dim(self, operand: int) -> int | None:
        """The loop dim along which an operand is contiguous in memory (its innermost)."""
        if operand >= len(self.operand_dims) or not self.operand_dims[operand]:
            return None
        d = self.operand_dims[operand][-1]
        return d if d >= 0 else None

    def sizes(self, dims: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.loop_bounds[d] for d in dims)

    @property
    def flops(self) -> int:
        n = 2
        for b in self.loop_bounds:
            n *= b
        return n

    @property
    def shape_name(self) -> str:
        if self.kind in MATCHED_BY_STRUCTURE:
            loops = "x".join(str(b) for b in self.loop_bounds)
            return f"{loops}_{self.lhs_type}"  # as `dispatches` names the kinds no pipeline takes

        def part(dims: tuple[int, ...]) -> str:
            return "x".join(str(s) for s in self.sizes(dims)) or "1"

        b = f"b{part(self.batch_dims)}_" if self.batch_dims else ""
        return f"{b}m{part(self.m_dims)}_n{part(self.n_dims)}_k{part(self.k_dims)}_{self.lhs_type}{self.rhs_type}{self.out_type}"
