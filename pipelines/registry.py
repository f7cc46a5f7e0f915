"""Names to codegen pipelines. Adding a pipeline: one file in pipelines/ and one line here."""

from __future__ import annotations

from pipelines.base import Pipeline
from pipelines.dispatch import Dispatch
from pipelines.llvmcpu_conv_tile_and_decompose import LLVMCPUConvTileAndDecompose
from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
from pipelines.llvmgpu_tile_and_fuse import LLVMGPUTileAndFuse

PIPELINES: dict[str, Pipeline] = {
    p.name: p
    for p in (
        LLVMCPUDoubleTiling(),
        LLVMCPUConvTileAndDecompose(),
        LLVMGPUTileAndFuse(),
    )
}


def pipeline_for(dispatch: Dispatch) -> Pipeline | None:
    """The registered pipeline that tunes this dispatch, or None."""
    for pipeline in PIPELINES.values():
        if pipeline.supports(dispatch):
            return pipeline
    return None
