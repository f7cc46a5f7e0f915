"""Names to codegen pipelines. Adding a pipeline: one file in pipelines/ and one line here."""

from __future__ import annotations

from pipelines.base import Pipeline
from pipelines.dispatch import Dispatch
from pipelines.llvmcpu_conv_tile_and_decompose import LLVMCPUConvTileAndDecompose
from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
from pipelines.llvmcpu_elementwise import LLVMCPUElementwise
from pipelines.llvmcpu_mmt4d import LLVMCPUMmt4d
from pipelines.llvmcpu_reduction import LLVMCPUReduction
from pipelines.llvmgpu_mma_sync import LLVMGPUMmaSync
from pipelines.llvmgpu_tile_and_fuse import LLVMGPUTileAndFuse
from pipelines.llvmgpu_tile_and_fuse_elementwise import LLVMGPUTileAndFuseElementwise
from pipelines.llvmgpu_tile_and_fuse_pooling import LLVMGPUTileAndFusePooling
from pipelines.llvmgpu_vector_distribute import LLVMGPUVectorDistribute
from pipelines.llvmgpu_vector_distribute_attention import LLVMGPUVectorDistributeAttention
from pipelines.llvmgpu_vector_distribute_reduction import LLVMGPUVectorDistributeReduction

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        LLVMCPUDoubleTiling(),
        LLVMCPUMmt4d(),
        LLVMCPUConvTileAndDecompose(),
        LLVMCPUReduction(),
        LLVMCPUElementwise(),
        LLVMGPUTileAndFuse(),
        # After TileAndFuse: it claims contractions only when asked for by name.
        LLVMGPUVectorDistribute(),
        LLVMGPUVectorDistributeAttention(),
        LLVMGPUVectorDistributeReduction(),
        LLVMGPUTileAndFuseElementwise(),
        LLVMGPUTileAndFusePooling(),
        # By name only, like VectorDistribute: a transform-dialect mma.sync kernel for contractions.
        LLVMGPUMmaSync(),
    )
}


def _named(name: str) -> list[Pipeline]:
    """The pipelines a name stands for: its own, or those that answer to it as an alias (e.g.
    `llvmgpu_vector_distribute`: the contraction and the attention pipelines)."""
    return [p for p in PIPELINES.values() if p.name == name or name in p.aliases]


def pipeline_for(dispatch: Dispatch, name: str | None = None) -> Pipeline | None:
    """The pipeline named `name` if it can tune this dispatch; without a name, the first
    registered one that can (the one that tunes the compiler's own choice); or None."""
    if name is not None:
        named = _named(name)
        if not named:
            raise KeyError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")
        return next((p for p in named if p.supports(dispatch)), None)
    for pipeline in PIPELINES.values():
        if pipeline.supports(dispatch):
            return pipeline
    return None


def why_untunable(dispatch: Dispatch, name: str | None = None) -> str:
    """Why no pipeline of this tuner (or the one named `name`) takes the dispatch: what each that
    tunes its kind says of it (Pipeline.declines), else that none takes it."""
    pipelines = _named(name) if name is not None else PIPELINES.values()
    said = list(dict.fromkeys(r for r in (p.declines(dispatch) for p in pipelines) if r))
    if said:
        return "; ".join(said)
    return (f"{name} does not take it" if name is not None
            else f"no pipeline of this tuner takes it (the compiler's: {dispatch.default.pipeline})")


def flags_to_take(dispatch: Dispatch, name: str) -> tuple[tuple[str, ...], ...]:
    """The model-wide flag sets under which a pipeline `name` stands for would take the dispatch
    (Pipeline.flags_to_take), each once."""
    return tuple(dict.fromkeys(f for p in _named(name) for f in p.flags_to_take(dispatch)))


def taking_flags() -> set[tuple[str, ...]]:
    """Every flag set a pipeline's `flags_to_take` may give."""
    return {f for p in PIPELINES.values() for f in p.taking_flags}


def known_pipeline(name: str) -> bool:
    """Whether `--pipeline NAME` names a pipeline (by its name or an alias)."""
    return bool(_named(name))
