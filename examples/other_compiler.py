"""A compiler that is not IREE reusing the tuner's constraint generation: it describes a matmul and
an attention for a GPU of its own, builds the problems of two GPU pipelines (TileAndFuse for the
matmul, VectorDistribute for the attention), and enumerates their valid configs. Nothing here
imports IREE (the tests run it with IREE unimportable); only `z3-solver` is needed besides this
repository's `constraints/` and `pipelines/`.

    python examples/other_compiler.py

A config is the pipeline's knobs (e.g. TileAndFuse: `mma_kind` indexes the GPU's MMA list that
fits the operand types, `subgroup_m/n` MMA tiles per subgroup, `subgroups_m/n` subgroups per
workgroup, `reduction_k` MMA K steps per iteration). What the client lowers them to is its own
business; `workgroup_tile` below shows the arithmetic.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from constraints.fast_enumerate import enumerate_space  # noqa: E402
from pipelines.describe import attention, contraction, gpu_target, mma  # noqa: E402
from pipelines.dispatch import TargetFacts  # noqa: E402
from pipelines.llvmgpu_common import compatible_intrinsics  # noqa: E402
from pipelines.llvmgpu_tile_and_fuse import LLVMGPUTileAndFuse  # noqa: E402
from pipelines.llvmgpu_vector_distribute_attention import LLVMGPUVectorDistributeAttention  # noqa: E402

# A GPU that does not exist: 32-wide subgroups, 512 threads and 64 KiB of shared memory per
# workgroup, two f16 MMA shapes accumulating in f32.
MADE_UP_GPU = gpu_target(
    "made-up-gpu", subgroup_size=32, max_threads=512, shared_memory_bytes=64 * 1024,
    mma=[mma("MMA_F32_16x16x16_F16", 16, 16, 16, "f16", "f16", "f32"),
         mma("MMA_F32_32x8x16_F16", 32, 8, 16, "f16", "f16", "f32")])


def matmul_configs(target: TargetFacts, m: int, n: int, k: int) -> list[dict]:
    """Every valid TileAndFuse config of an f16 x f16 -> f32 matmul on `target`."""
    problem = LLVMGPUTileAndFuse().build_problem(contraction(m, n, k, ("f16", "f16", "f32"), target))
    return list(enumerate_space(problem))


def attention_configs(target: TargetFacts, batch: int, queries: int, keys: int, head_dim: int) -> list[dict]:
    """Every valid VectorDistribute config of an f16 attention on `target`."""
    problem = LLVMGPUVectorDistributeAttention().build_problem(
        attention(batch, queries, keys, head_dim, head_dim, "f16", target))
    return list(enumerate_space(problem))


def workgroup_tile(target: TargetFacts, config: dict) -> tuple[int, int, int]:
    """The M x N x K a TileAndFuse config's workgroup computes per K step."""
    shape = compatible_intrinsics(contraction(1, 1, 1, ("f16", "f16", "f32"), target))[config["mma_kind"]]
    return (config["subgroups_m"] * config["subgroup_m"] * shape.m,
            config["subgroups_n"] * config["subgroup_n"] * shape.n, config["reduction_k"] * shape.k)


def main() -> None:
    gemm = matmul_configs(MADE_UP_GPU, 2048, 2048, 1024)
    print(f"matmul 2048x2048x1024 on {MADE_UP_GPU.arch}: {len(gemm)} valid TileAndFuse configs")
    for config in gemm[:3]:
        print("  ", config, "-> workgroup tile %dx%dx%d" % workgroup_tile(MADE_UP_GPU, config))
    attn = attention_configs(MADE_UP_GPU, 16, 2048, 2048, 64)
    print(f"attention 16 heads x 2048 queries x 2048 keys, head dim 64: {len(attn)} valid VectorDistribute configs")
    for config in attn[:3]:
        print("  ", config)


if __name__ == "__main__":
    main()
