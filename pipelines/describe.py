"""Describe an op and a GPU for a pipeline's problem without IREE: the plain data a compiler that
is not IREE fills in to build a pipeline's constraint problem and enumerate its configs.

    from pipelines.describe import contraction, gpu_target, mma
    gpu = gpu_target("my-gpu", subgroup_size=32, max_threads=1024, shared_memory_bytes=65536,
                     mma=[mma("MMA_16x8x16_F16", 16, 8, 16, "f16", "f16", "f32")])
    problem = LLVMGPUTileAndFuse().build_problem(contraction(4096, 4096, 4096, ("f16", "f16", "f32"), gpu))
    configs = list(constraints.fast_enumerate.enumerate_space(problem))

The dims follow IREE's loop order for each kind (contraction: batch, M, N, K; attention: batch,
queries, value columns, head dim, keys), so the same shape gives the same problem as a dispatch
the tuner reads from IREE. Nothing here imports IREE."""

from __future__ import annotations

from typing import Sequence

from pipelines.dispatch import DefaultConfig, Dispatch, DispatchKind, MmaIntrinsic, TargetFacts

# Where IREE would have its own config for the op: a described op has none.
NO_DEFAULT = DefaultConfig(pipeline="", lowering_config="")


def mma(name: str, m: int, n: int, k: int, a_type: str, b_type: str, c_type: str) -> MmaIntrinsic:
    """One matrix-multiply instruction: its M x N x K and operand/accumulator element types
    (MLIR's spelling: "f16", "bf16", "f32", "i8", "i32")."""
    return MmaIntrinsic(name, m, n, k, a_type, b_type, c_type)


def gpu_target(name: str, *, subgroup_size: int, max_threads: int, shared_memory_bytes: int,
               mma: Sequence[MmaIntrinsic], backend: str = "cuda") -> TargetFacts:
    """A GPU as the problems see it: subgroup (warp) size, threads per workgroup, shared memory
    per workgroup and the MMA instructions it offers. `backend` is the family ("cuda", "rocm")
    whose measured quirks the problems apply (on "cuda" TileAndFuse's prefetch stages stay
    fixed: IREE 3.13 builds the same kernel whatever they say)."""
    return TargetFacts(backend=backend, arch=name, subgroup_sizes=(subgroup_size,),
                       max_threads_per_workgroup=max_threads, max_workgroup_sizes=(max_threads, max_threads, 1),
                       max_workgroup_memory_bytes=shared_memory_bytes, mma_intrinsics=tuple(mma))


def contraction(m: int, n: int, k: int, types: tuple[str, str, str], target: TargetFacts,
                batch: int | None = None, transpose_b: bool = False, name: str = "matmul") -> Dispatch:
    """C[b, m, n] += A[b, m, k] * B[b, k, n] (B[b, n, k] with `transpose_b`); loops (b,) m, n, k;
    `types`: A's, B's and C's element types ("f16", "f16", "f32")."""
    lhs_type, rhs_type, out_type = types
    b = (batch,) if batch else ()
    nb = len(b)
    md, nd, kd = nb, nb + 1, nb + 2
    bd = tuple(range(nb))
    rhs = (*bd, nd, kd) if transpose_b else (*bd, kd, nd)
    return Dispatch(
        name=name, kind=DispatchKind.CONTRACTION, op_name="contraction", loop_bounds=(*b, m, n, k),
        batch_dims=bd, m_dims=(md,), n_dims=(nd,), k_dims=(kd,), lhs_type=lhs_type, rhs_type=rhs_type,
        out_type=out_type, indexing_maps=(), target=target, default=NO_DEFAULT,
        operand_dims=((*bd, md, kd), rhs, (*bd, md, nd)))


def attention(batch: int, queries: int, keys: int, head_dim: int, value_dim: int, element_type: str,
              target: TargetFacts, name: str = "attention") -> Dispatch:
    """O[b, q, v] = softmax(Q[b, q, d] K[b, s, d]^T) V[b, s, v]; loops b, q (M), v (N), d (K1),
    s (K2), as IREE's attention op has them."""
    return Dispatch(
        name=name, kind=DispatchKind.ATTENTION, op_name="attention",
        loop_bounds=(batch, queries, value_dim, head_dim, keys), batch_dims=(0,), m_dims=(1,), n_dims=(2,),
        k_dims=(3, 4), lhs_type=element_type, rhs_type=element_type, out_type=element_type, indexing_maps=(),
        target=target, default=NO_DEFAULT, operand_dims=((0, 1, 3), (0, 4, 3), (0, 4, 2), (), (0, 1, 2)))
