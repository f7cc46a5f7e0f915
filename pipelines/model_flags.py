"""The model-wide flags the pipelines offer (tune-model's flag stage decides them for a whole
model, tuner.stages.flags), and the short name each is printed by: the flags written to
model_flags.txt stay whole. Neither IREE nor z3 is imported: reports read it on a machine that
has neither."""

from __future__ import annotations

from typing import Iterable

# llvm-cpu: data tiling with encodings materialized late (the contraction keeps its own op).
DATA_TILING_FLAG = "--iree-opt-data-tiling"
# Data tiling with encodings materialized in global optimization: what makes an mmt4d config take.
EARLY_MATERIALIZATION = ("--iree-global-opt-data-tiling", "--iree-global-opt-enable-early-materialization")
# GPUs: the optimization level and the fusion TileAndFuse offers (pipelines.llvmgpu_tile_and_fuse
# says why).
O3 = ("--iree-opt-level=O3",)
AGGRESSIVE_FUSION = ("--iree-dispatch-creation-enable-aggressive-fusion",)
# Convolutions made channels last before dispatches are formed (NCHW -> NHWC, the transposes
# folded into the dispatch: a 2x256x34x34 3x3 sample becomes one conv_2x32x32x256x256x3x3 dispatch).
CHANNELS_LAST = ("--iree-preprocessing-pass-pipeline="
                 "builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))",)
# IREE 3.13's direct convolution in TileAndFuse: the config tiles the convolution's own loops, the
# filter window one tap per step, instead of an implicit GEMM's gathered K. Where the implicit GEMM
# pads the output rows (ResNet's 14 and 7 columns) it gathers one f16 at a time (64
# `ld.global.nc.b16` per K step for 8x14x14x256 3x3); the direct form loads 16 bytes (10
# `ld.global.nc.v4`, none scalar: benchmarks/ptx_loads.py). On the H100, ResNet-50 (b8, f16,
# channels last) ran 1.125x faster by kernel time with it, with the compiler's configs
# (BENCHMARKS.md). Offered as a model-wide choice, judged with the convolutions it forms tuned:
# this pipeline configures them too (gemm_view's direct view: K the input channels).
DIRECT_CONVOLUTION = ("--iree-codegen-llvmgpu-use-direct-convolution",)
# Named matmuls made linalg.generic in global optimization, where unit dims fold away: the
# batch_matmul of batch 1 that exporters write for a linear layer on rank-3 activations
# ([1, T, H] x [1, H, N]) becomes a plain matmul (part of O3 in 3.13, alone here). Judged with
# the matmuls it forms tuned first.
GENERALIZE_MATMUL = ("--iree-opt-generalize-matmul",)

# Transposes kept where the program has them, not folded into the ops around them in global
# optimization: a constant operand's transpose (a channels-last 1x1 convolution's filter [F, C],
# a linear layer's weight) is then evaluated once at compile time, and the contraction reads B
# stored K x N, which the mma.sync kernel takes (under channels-last ResNet-50's 1x1 convolutions
# read the filter N x K, which it declines). Judged with the contractions it forms tuned.
KEEP_TRANSPOSES = ("--iree-global-opt-propagate-transposes=false",)

# A depthwise convolution's input padding (ConvNeXt's 7x7 pads 3 pixels a side) is a dispatch of
# its own in IREE 3.13, `slow_memcpy`, copying the input into a zero-filled larger buffer each call
# (0.123 ms of ConvNeXt-T's tuned 2.28 ms on an H200). Fused into the op that produces the input
# (it then writes into the padded buffer; the convolution's dispatch is unchanged) or into the
# convolution (which reads the border as zeros), the copy is gone: both judged on the model with
# the convolutions they form tuned (pipelines.llvmgpu_tile_and_fuse_pooling).
PAD_INTO_PRODUCER = ("--iree-dispatch-creation-enable-fuse-padding-into-linalg-producer-ops",)
PAD_INTO_CONSUMER = ("--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",)

# Concatenations made along the outermost dimension (the operands transposed so the axis is
# outermost, the result transposed back where it is read): each operand's slice of the result is
# then contiguous, and the producer writes it in place. Off the outermost axis (NCHW channels)
# IREE 3.13 copies each operand into its slice in a dispatch of its own, `slow_memcpy`, one f16 a
# thread: DenseNet-121's 117 copies (after chain-concats) took 1.20 of its 3.19 ms tuned on the
# H200; with this flag 4 copy dispatches are left of 120, the BN+ReLU dispatches transpose, and
# the model with the external kernels ran 3.21 -> 2.02 ms untuned (BENCHMARKS.md ⁶). Offered where
# the model has such copies (Program.in_place_copies), judged on the model like any flag set.
OUTER_DIM_CONCAT = ("--iree-opt-outer-dim-concat=true",)

# No constant inlined into a dispatch's code (IREE inlines small ones): on cuda a large weight
# inlined as constant data made a kernel the driver refused at load (over PTX's limit on a real
# export, issue 58). Tried only where the default does not build or run (tuner.stages.unbuildable).
NO_INLINED_CONSTANTS = ("--iree-flow-inline-constants-max-byte-length=0",)

FLAG_NAMES = {DATA_TILING_FLAG: "data-tiling", EARLY_MATERIALIZATION[0]: "global-data-tiling",
              EARLY_MATERIALIZATION[1]: "early-materialization", O3[0]: "O3", AGGRESSIVE_FUSION[0]: "aggressive-fusion",
              CHANNELS_LAST[0]: "channels-last", DIRECT_CONVOLUTION[0]: "direct-convolution",
              GENERALIZE_MATMUL[0]: "generalize-matmul", KEEP_TRANSPOSES[0]: "keep-transposes",
              PAD_INTO_PRODUCER[0]: "pad-into-producer", PAD_INTO_CONSUMER[0]: "pad-into-consumer",
              NO_INLINED_CONSTANTS[0]: "no-inlined-constants", OUTER_DIM_CONCAT[0]: "outer-dim-concat"}


def codegen_flags(flags: Iterable[str], backend: str, convolution: bool = True) -> tuple[str, ...]:
    """The flags among `flags` that change how a dispatch already formed is compiled: the codegen
    stage's own (`--iree-codegen-...`: direct convolutions), and on llvm-cpu the optimization
    level (3.13's CPU codegen options follow it; its GPU ones do not). Two flag sets that form a
    dispatch alike and agree on these compile it alike, so its tuning under one serves the other;
    a config tuned for the implicit GEMM does not serve the direct convolution (the UNet ResNet
    block's conv was judged under direct-convolution with its igemm winner: 1.43x, not 1.69x).
    Direct convolutions change only convolutions (`convolution`: whether the dispatch is one): a
    matmul im2col forms was tuned again under each choice adding them, 8 evaluations each time,
    on the H100 (the held-out 1280-channel UNet block's flag stage)."""
    return tuple(f for f in flags if (f.startswith("--iree-codegen-") and (convolution or f not in DIRECT_CONVOLUTION))
                 or (backend == "llvm-cpu" and f.startswith("--iree-opt-level")))


def short_flags(text: str) -> str:
    """A model-wide choice's label (rewrites and flags, by spaces) with each flag by its short name."""
    return " ".join(FLAG_NAMES.get(word, word) for word in text.split())


def flag_legend(texts: Iterable[str]) -> str:
    """What the short names in `texts` stand for ("channels-last = --iree-...; O3 = ..."), or ""."""
    used = {FLAG_NAMES[word]: word for text in texts for word in text.split() if word in FLAG_NAMES}
    return "; ".join(f"{name} = {flag}" for name, flag in used.items())
