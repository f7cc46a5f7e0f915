"""The support table of docs/support.md: for each dispatch kind (a sample dispatch) and each target, which
pipeline claims it and how many candidates it generates (up to --limit), by running discovery
and enumeration for real. Nothing is compiled beyond discovery.

    python benchmarks/support_table.py [--limit 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from iree.compiler import ir  # noqa: E402

from pipelines import pipeline_for  # noqa: E402
from pipelines.llvmcpu_mmt4d import MMT4D_OPS  # noqa: E402
from pipelines.model_flags import EARLY_MATERIALIZATION  # noqa: E402
from tuner.specs.candidates import generate_candidates  # noqa: E402
from tuner.discovery.program import discover  # noqa: E402
from tuner.targets import parse_target  # noqa: E402

# (kind, CPU sample, GPU sample): f32 on the CPU, f16 with f32 accumulation on GPUs.
ROWS = [
    ("matmul", "matmul_1024x1024x1024_f32.mlir", "matmul_4096x4096x4096_f16f16f32.mlir"),
    ("batch matmul", "batch_matmul_8x256x512x384_f32.mlir", "batch_matmul_16x1024x1024x1024_f16f16f32.mlir"),
    ("matmul, transposed B", "matmul_transpose_b_512x2048x768_f32.mlir", "matmul_transpose_b_2048x4096x1024_f16f16f32.mlir"),
    ("contraction + bias + ReLU (linalg.generic)", "generic_contraction_bias_relu_384x1000x1200_f32.mlir",
     "generic_contraction_bias_relu_2048x4096x1024_f16f16f32.mlir"),
    ("2-D convolution, NHWC", "conv_2d_nhwc_hwcf_4x58x58x64_3x3x64_f32.mlir",
     "conv_2d_nhwc_hwcf_2x34x34x256_3x3x256_f16f16f32.mlir"),
    ("2-D convolution, NCHW", "conv_2d_nchw_fchw_2x256x34x34_3x3_f16f16f32.mlir",
     "conv_2d_nchw_fchw_2x256x34x34_3x3_f16f16f32.mlir"),
    ("attention", "attention_8x1024x1024x64_f16.mlir", "attention_8x1024x1024x64_f16.mlir"),
    # Reductions, from the tests' fixtures (FILE#KIND: the file's first dispatch of that kind).
    ("softmax (f16 scores, f32 inside, f16 out)", "softmax_f16.mlir#softmax", "softmax_f16.mlir#softmax"),
    ("LayerNorm: the mean's reduction", "other_kinds.mlir#reduction", "other_kinds.mlir#reduction"),
    ("LayerNorm: the normalization", "other_kinds.mlir#normalization", "other_kinds.mlir#normalization"),
    ("transpose", "other_kinds.mlir#transpose", "other_kinds.mlir#transpose"),
    ("elementwise (a GELU)", "other_kinds.mlir#elementwise", "other_kinds.mlir#elementwise"),
    # Pooling windows, from the tests' fixtures: ResNet's stem max pooling as exporters write it
    # (NCHW; the file's other form, as the channels-last pass leaves it, is tuned the same way).
    ("max pooling 3x3, stride 2 (2x64x28x28 f16)", "maxpool_3x3s2_f16.mlir#convolution",
     "maxpool_3x3s2_f16.mlir#convolution"),
    # FILE@early: the file's linalg.mmt4d under data tiling materialized early (CPU only).
    ("data-tiled matmul (linalg.mmt4d, encodings materialized early)", "matmul_1024x1024x1024_f32.mlir@early", None),
]
KINDS = ROOT / "tests" / "fixtures" / "kinds"
# (target, pipeline): None is the pipeline for the compiler's own choice.
COLUMNS = [("llvm-cpu", None), ("cuda:sm_80", None), ("rocm:gfx942", None), ("rocm:gfx942", "llvmgpu_vector_distribute")]


def cell(sample: str | None, target_name: str, pipeline_name: str | None, limit: int, ctx: ir.Context) -> str:
    if sample is None:
        return "no (a CPU form)"
    target = parse_target(target_name)
    sample, _, form = sample.partition("@")
    name, _, kind = sample.partition("#")
    flags = EARLY_MATERIALIZATION if form == "early" else ()
    dispatches = discover((KINDS if kind else ROOT / "sample_dispatches") / name, target, ctx, flags)
    dispatches = [d for d in dispatches if (not kind or d.kind.value == kind) and (not form or d.op_name in MMT4D_OPS)]
    if not dispatches:
        return "no (not discovered as tunable)"
    d = dispatches[0]
    pipeline = pipeline_for(d, pipeline_name)
    default = d.default.pipeline.split("<")[-1].rstrip(">")
    if pipeline is None:
        return "no" if pipeline_name else f"no (default: {default})"
    count = len(generate_candidates(d, pipeline, limit, ctx, target.spec_entry)) - 1
    return f"{pipeline.name}: {count}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=30)
    args = parser.parse_args()
    ctx = ir.Context()
    print("| dispatch kind | " + " | ".join(f"`{t}`" + (f", `--pipeline {p}`" if p else "") for t, p in COLUMNS) + " |")
    print("|---" * (len(COLUMNS) + 1) + "|")
    for kind, cpu_sample, gpu_sample in ROWS:
        cells = [cell(cpu_sample if t == "llvm-cpu" else gpu_sample, t, p, args.limit, ctx) for t, p in COLUMNS]
        print(f"| {kind} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
