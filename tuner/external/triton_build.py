"""Triton kernels compiled for Hopper without the GPU, brought to IREE's launch ABI (tuner.external).

Triton compiles for a GPU target it does not see (`GPUTarget("cuda", 90, 32)`): its PTX for
sm_90a carries `wgmma.mma_async` where the kernel's `tl.dot` allows it. The pointers are declared
16-byte aligned (`tt.divisibility`), as IREE's bindings are, so Triton loads with 16-byte
`cp.async`. The PTX is written at ISA 8.5 (CUDA 12.5) so that a driver of CUDA 12.5 or newer
compiles it (Triton 3.9's own default, 9.4, is newer than CUDA 13.0's driver takes). Triton is
an optional dependency (`pip install triton`, on the machine that builds the model);
`TritonMissing` says so in one line. Triton keeps what it compiled in ~/.triton/cache unless
TRITON_CACHE_DIR names another place: a run puts it in its own directory (`cache_in`)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from tuner.external.abi import SHARED_LIMIT, ExternKernel, KernelAbiError, for_iree

PTX_VERSION = 85
# TMA's bulk tensor copies into a workgroup's shared memory need PTX ISA 8.6 (CUDA 12.7); CUDA
# 13.0's driver takes it. Only the kernels that use TMA are written at it.
TMA_PTX_VERSION = 86
ARCH = 90


class TritonMissing(RuntimeError):
    pass


CACHE = "triton-cache"  # the run directory's folder for Triton's compiled kernels


@contextmanager
def cache_in(run_dir: Path) -> Iterator[None]:
    """Triton's cache in RUN_DIR/triton-cache while the block runs (read when Triton compiles),
    where the user has not named one (TRITON_CACHE_DIR): nothing outside the run's directory is
    written. The variable is as it was after."""
    if "TRITON_CACHE_DIR" in os.environ:
        yield
        return
    os.environ["TRITON_CACHE_DIR"] = str(Path(run_dir).resolve() / CACHE)
    try:
        yield
    finally:
        os.environ.pop("TRITON_CACHE_DIR", None)


def language():
    """(triton, triton.language), or TritonMissing."""
    try:
        import triton
        import triton.language as tl
    except ImportError as e:  # an optional dependency
        raise TritonMissing("external Hopper kernels need Triton: pip install triton") from e
    return triton, tl


def compile_for_iree(kernel: Callable, pointers: dict[str, str], constants: dict[str, object], tiles,
                     name: str, grid: tuple[int, int, int], bindings: int | None = None,
                     ptx_version: int = PTX_VERSION) -> ExternKernel:
    """`kernel` (a triton.jit function whose parameters are `pointers`, name -> Triton pointer
    type such as "*fp16", then `constants`, every one a tl.constexpr) compiled for sm_90a with the
    `tiles`' warps and pipeline stages (GemmTiles, AttentionTiles: `.warps`, `.stages`, `.label`),
    its entry named `name`, launched on `grid`. The first `bindings` pointers (default: all) are
    IREE's bindings in order; any after them must be unread, but Triton's global scratch (the
    parameter after the pointers) where the kernel uses one (device-made TMA descriptors): it is
    then one more binding, `scratch_bytes` of the ExternKernel for the whole grid."""
    triton, _ = language()
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    source = ASTSource(fn=kernel, signature={**pointers, **{c: "constexpr" for c in constants}}, constexprs=constants,
                       attrs={(i,): [["tt.divisibility", 16]] for i in range(len(pointers))})
    compiled = triton.compile(source, target=GPUTarget("cuda", ARCH, 32),
                              options={"num_warps": tiles.warps, "num_stages": tiles.stages, "ptx_version": ptx_version})
    meta = compiled.metadata
    if meta.shared > SHARED_LIMIT:
        raise KernelAbiError(f"{name} with tiles {tiles.label} needs {meta.shared} bytes of shared memory, more than "
                             f"the {SHARED_LIMIT} a block may have on Hopper")
    bindings = len(pointers) if bindings is None else bindings
    scratch = getattr(meta, "global_scratch_size", 0) * grid[0] * grid[1] * grid[2]
    if scratch and bindings != len(pointers):
        raise KernelAbiError(f"{name} uses global scratch after pointers that are no bindings")
    bindings += bool(scratch)
    return ExternKernel(name, for_iree(compiled.asm["ptx"], meta.name, name, bindings), bindings,
                        32 * meta.num_warps, meta.shared, grid, tiles.label, scratch)
