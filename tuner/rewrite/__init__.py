"""Rewrites of a model's program before it is compiled, decided on the whole model like the
model-wide flags: each one takes the program's text and gives a new program, or says it has
nothing to rewrite. The new program is written into the run's directory; plain iree-compile of it
with the run's flags rebuilds the tuned model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from importlib.util import find_spec
from pathlib import Path
from typing import Callable, Optional, Sequence

from iree.compiler import ir

from pipelines import DispatchKind
from tuner.rewrite.attention import raise_attention
from tuner.rewrite.batch_to_width import batch_to_width
from tuner.rewrite.chained_concats import chain_concats
from tuner.rewrite.conv_im2col import convs_as_im2col_matmuls
from tuner.rewrite.conv_window import fit_conv_windows
from tuner.rewrite.external_conv import external_convs
from tuner.rewrite.external_attention import external_attentions
from tuner.rewrite.f32_reductions import f32_reductions
from tuner.rewrite.external_depthwise import external_depthwise_convs
from tuner.rewrite.external_gemm import external_gemms
from tuner.rewrite.external_layernorm import external_layernorms, external_rms_norms
from tuner.rewrite.external_reduction import external_spatial_reductions
from tuner.rewrite.partial_rotary import fuse_partial_rotaries
from tuner.rewrite.nd_linear import nd_linears_as_matmuls
from tuner.rewrite.pad_reductions import pad_reductions
from tuner.rewrite.padded_columns import pad_convolution_columns
from tuner.rewrite.pointwise_conv import pointwise_convs_as_matmuls
from tuner.rewrite.sibling_linears import fuse_sibling_linears
from tuner.rewrite.strided_conv import subsample_strided_pointwise_convs
from tuner.rewrite.parsed import ParsedProgram, RewriteFailed


@dataclass(frozen=True)
class Rewrite:
    """A named program rewrite: `apply` changes the module in place and says what it changed
    (nothing: the rewrite does not apply to this program). `tunes`: the kinds of dispatch the
    rewrite creates, which the flag stage tunes before it judges the rewrite on the model (the
    compiler's default config for a new dispatch can be far from its best)."""

    name: str
    apply: Callable[[ir.Module], list[str]]
    description: str
    tunes: tuple[DispatchKind, ...] = ()
    devices: tuple[str, ...] = ()  # the runtime devices it is offered on (none named: every one of its kind)
    parts: tuple[Rewrite, ...] = ()  # those it is `combined` from (none: it is one)

    @property
    def names(self) -> tuple[str, ...]:
        """The rewrites this one is made of (one, or several `combined`)."""
        return tuple(self.name.split("+"))

    def without(self, name: str) -> Optional[Rewrite]:
        """The rewrite with its part `name` left out (None where nothing is left)."""
        rest = [r for r in (self.parts or (self,)) if r.name != name]
        return (rest[0] if len(rest) == 1 else combined(rest)) if rest else None


def combined(rewrites: Sequence[Rewrite]) -> Rewrite:
    """The rewrites applied one after another, as one (named "a+b"); a part that raises is named
    (RewriteFailed), so that the others can be applied without it (ParsedProgram)."""
    parts = tuple(p for r in rewrites for p in (r.parts or (r,)))

    def apply(module: ir.Module) -> list[str]:
        changes = []
        for r in parts:
            try:
                changes += r.apply(module)
            except Exception as error:
                raise RewriteFailed(r.name, error) from error
        return changes

    return Rewrite("+".join(r.name for r in parts), apply, "; ".join(r.description for r in parts),
                   tuple(dict.fromkeys(k for r in parts for k in r.tunes)), parts=parts)


# Applied at import, not offered (tuner.input.models.repaired_import): convolutions that leave input
# unread at a one-pixel output, which IREE 3.13 does not compile, cut to what they read (exact).
FIT_CONV_WINDOWS = Rewrite("fit-conv-windows", fit_conv_windows,
                           "convolutions that leave input unread at a one-pixel output cut to what they read")
# Exact where IREE 3.13 is not: f16 and bf16 reductions that accumulate (ReduceL2, ReduceSum, ...)
# computed in f32, as torch computes them (tuner.rewrite.f32_reductions; wav2vec2's weight-normalized
# positional convolution made the whole f16 model 0.19-0.28 off). The host's reference result is
# built with it (tuner.stages.host_reference), so a default that is off it is seen, and the rewrite
# is kept where it makes the model right.
F32_REDUCTIONS = Rewrite("f32-reductions", f32_reductions,
                         "half-precision reductions that accumulate computed in f32, as torch computes them")
# Concatenations of growing lists (a DenseNet's dense blocks) as a chain, each onto the one before
# it (tuner.rewrite.chained_concats): the same bytes copied in a dispatch or two a concatenation
# instead of one an operand (DenseNet-121 at batch 8 for cuda: 594 `slow_memcpy` dispatches, 1.72
# ms of 3.88 on the H200, become 117; compile only, not yet timed). Exact.
CHAIN_CONCATS = Rewrite("chain-concats", chain_concats,
                        "concatenations of growing lists each made from the one before it")
# Offered on GPUs: means and sums over a length that is no multiple of 64 (CNN pools over 28 x 28,
# 14 x 14, 7 x 7; wav2vec2's GroupNorm over 3199 frames) padded with zeros, so that IREE 3.13
# configures them VectorDistribute (a workgroup a row) instead of TileAndFuse (a thread a row,
# 128 rows a workgroup: wav2vec2-base's two took 4.1 ms of 4.6 on the H200) (tuner.rewrite.pad_reductions).
PAD_REDUCTIONS = Rewrite("pad-reductions", pad_reductions,
                         "means and sums over lengths IREE's GPU reduction pipeline cannot split, padded with zeros")
# Linear layers on NHWC activations (ConvNeXt's and Swin's MLPs, as torch exports nn.Linear on a
# rank-4 tensor): IREE 3.13 broadcasts the weight once per batch row before a batch matmul
# (tuner.rewrite.nd_linear); as a 2-D MatMul the weight is read once. Judged with the matmuls it
# forms tuned.
ND_LINEAR_AS_MATMUL = Rewrite("nd-linear-as-matmul", nd_linears_as_matmuls,
                              "linear layers on activations of rank 4 or more as 2-D matrix products",
                              tunes=(DispatchKind.CONTRACTION,))
# Offered on GPUs: linear layers that read one activation (query, key and value projections; a
# gated MLP's gate and up) as one MatMul by their weights side by side (tuner.rewrite.sibling_linears):
# IREE 3.13 fuses them into one dispatch of several contractions, which the mma.sync kernel does
# not take; joined, it takes the one matmul. Judged with the matmuls it forms tuned.
JOIN_SIBLING_LINEARS = Rewrite("join-sibling-linears", fuse_sibling_linears,
                               "linear layers reading one activation as one matrix product, each result a slice",
                               tunes=(DispatchKind.CONTRACTION,))
RAISE_ATTENTION = Rewrite("raise-attention", raise_attention,
                          "MatMul -> Softmax -> MatMul attention raised into one attention op",
                          tunes=(DispatchKind.ATTENTION,))
# On GPUs, head dims padded to the next power of two (tuner.rewrite.attention): IREE 3.13 has no
# MMA config for an attention of head dim 40, 48, 80 or 96, and its scalar one is far slower.
RAISE_ATTENTION_GPU = Rewrite("raise-attention", partial(raise_attention, pad_heads=True),
                              "MatMul -> Softmax -> MatMul attention raised into one attention op, its head dims "
                              "padded to a power of two", tunes=(DispatchKind.ATTENTION,))
# Judged with the default configs: the contractions it forms are configured by the compiler as
# any 1x1 convolution's, and what it replaces is far slower than either.
SUBSAMPLE_STRIDED_1X1 = Rewrite("subsample-strided-1x1", subsample_strided_pointwise_convs,
                                "strided 1x1 convolutions as a strided subsample and a unit-stride 1x1 convolution")
# Offered on GPUs, where IREE 3.13 computes NCHW f16 1x1 convolutions wrong on CUDA and their
# matrix-product form right (tuner.rewrite.pointwise_conv): the flag stage checks every build
# against the host's result where the default's is off it, so the rewrite is kept where it makes
# the model right, and judged on speed where the default was right already.
POINTWISE_CONV_AS_MATMUL = Rewrite("pointwise-conv-as-matmul", pointwise_convs_as_matmuls,
                                   "1x1 convolutions as matrix products, the filter first")
# Offered on GPUs, where IREE 3.13 gathers a convolution's operand one element at a time when its
# config pads the output rows (tuner.rewrite.padded_columns): the rows are padded in the program.
PAD_CONV_COLUMNS = Rewrite("pad-conv-columns", pad_convolution_columns,
                           "convolutions computed on output rows padded to a multiple of 16 columns, then sliced")
# Offered on GPUs: convolutions as an explicit im2col and a matmul of every image's patches
# (tuner.rewrite.conv_im2col), which a contraction pipeline that takes no convolution (the
# mma.sync kernel) then takes. Judged with the matmuls it forms tuned.
CONV_AS_IM2COL_MATMUL = Rewrite("conv-as-im2col-matmul", convs_as_im2col_matmuls,
                                "convolutions over a window as patches gathered in the program and a matmul",
                                tunes=(DispatchKind.CONTRACTION,))
# Offered on GPUs where Triton is installed: linear layers, with a bias and a GELU or ReLU after
# them, as Triton's Hopper (sm_90a, wgmma) kernels external to IREE's codegen
# (tuner.rewrite.external_gemm). On any other GPU the driver refuses the PTX at load and the flag
# stage, which runs every variant, drops it. The bias and activation in the kernel ran 1.0-3.5%
# faster on six real exports than the MatMul alone with them a dispatch of their own, and
# 1.2-1.35x on three single layers (H200, docs/benchmarks/external-kernels.md).
EXTERNAL_GEMM = Rewrite("external-hopper-gemm", external_gemms,
                        "linear layers (their bias and activation too) as external Hopper (wgmma) kernels "
                        "compiled by Triton", devices=("cuda",))
# Likewise attention (tuner.rewrite.external_attention): the model's attentions raised, then each
# one the kernel takes a call of Triton's flash attention for sm_90a.
EXTERNAL_ATTENTION = Rewrite("external-flash-attention", external_attentions,
                             "attention raised, then computed by an external Hopper flash-attention kernel compiled "
                             "by Triton", devices=("cuda",))
# Likewise depthwise convolutions (tuner.rewrite.external_depthwise): a stencil kernel of Triton's,
# every tap unrolled, the bias in it.
EXTERNAL_DEPTHWISE = Rewrite("external-depthwise-conv", external_depthwise_convs,
                             "depthwise convolutions as an external kernel compiled by Triton", devices=("cuda",))
# Likewise every other convolution (tuner.rewrite.external_conv): an implicit-GEMM kernel of
# Triton's that gathers the patches as it goes, the bias and a Relu or Gelu in it, the image given
# channels-last where a step is one tap's channels. Last: the GEMM takes the 1x1 convolutions it
# can first (a plain matrix product, no gather).
EXTERNAL_CONV = Rewrite("external-hopper-conv", external_convs,
                        "convolutions as external Hopper implicit-GEMM kernels compiled by Triton", devices=("cuda",))
# Layer norms as Triton's kernel (tuner.rewrite.external_layernorm), the channels-last Transpose
# torch exports before ConvNeXt's nn.LayerNorm taken in (the NCHW tensor read, NHWC written: one
# pass for IREE's transpose and reduction dispatches), and transformers' RMSNorm as the exporter
# spells it (nine ops) likewise. On the H200, the other kernels joined and untuned: ConvNeXt-T
# 1.431 -> 1.130 ms (all 23 of its norms after a transpose; made for it), and on models they were
# not made for (twenty-seventh session), BERT-base's five norms over 512 rows of 768 0.127 ->
# 0.124 ms, a Mistral-7B layer's three RMS norms 0.569 -> 0.533 ms
# (docs/benchmarks/external-kernels.md).
EXTERNAL_LAYERNORM = Rewrite("external-layer-norm", external_layernorms,
                             "layer norms as an external kernel compiled by Triton, a channels-last transpose before "
                             "them taken in", devices=("cuda",))
EXTERNAL_RMSNORM = Rewrite("external-rms-norm", external_rms_norms,
                           "transformers' RMS norms as an external kernel compiled by Triton", devices=("cuda",))
EXTERNAL = (EXTERNAL_GEMM, EXTERNAL_ATTENTION, EXTERNAL_DEPTHWISE, EXTERNAL_CONV, EXTERNAL_LAYERNORM, EXTERNAL_RMSNORM)
# Convolutions whose windows do not overlap (a patchify stem, a 2x2/2 downsample) as patches and a
# matmul: the patches are the image rearranged, no pixel read twice, and the external GEMM takes
# the matmul. A feeder only (FEEDERS): where windows overlap the channels-last conv kernel reads the
# image in place, where im2col's patches hold each pixel up to KH x KW times (H200, twenty-fourth
# session: ResNet-50 with the 3x3s as im2col GEMMs 1.236 ms tuned, as the conv kernel 1.119 ms
# untuned; DenseNet-121 untuned, fed with im2col 4.412 ms, with the conv kernel 3.882 ms).
PATCHIFY_AS_MATMUL = Rewrite("patchify-as-matmul", partial(convs_as_im2col_matmuls, apart_only=True),
                             "convolutions whose windows do not overlap as the image's patches and a matmul")
# The rewrites that put convolutions in a form the external GEMM takes, applied before the
# external kernels in the flag stage's joined option (tuner.stages.flag_options.external_together):
# a strided 1x1 convolution subsampled, every 1x1 one a matrix product (those the kernel does not
# take are then IREE matmuls, which it computes right on CUDA where it computes NCHW f16 1x1
# convolutions wrong), and a convolution over windows apart as patches and a matrix product.
FEEDERS = (SUBSAMPLE_STRIDED_1X1, POINTWISE_CONV_AS_MATMUL, PATCHIFY_AS_MATMUL)
# A rotary embedding on part of each head (Phi-2's, GPT-NeoX's) as one elementwise product over the
# whole head: the two concatenations IREE copied in dispatches of their own are gone (Phi-2 tuned on
# the H200: four `slow_memcpy`s, 0.049 of 0.293 ms). Exact (bit for bit on llvm-cpu, tiny Phi-2);
# offered alone (and so joined to a choice only where it wins). Phi-2 tuned on the H200 with it
# (thirtieth session): 0.245 ms, 1.20x torch eager (docs/benchmarks/real-exports.md); written for
# Phi-2, so not yet shown on a model it was not made for.
FUSE_PARTIAL_ROTARY = Rewrite("fuse-partial-rotary", fuse_partial_rotaries,
                              "a rotary embedding on part of each head as one gather and elementwise product over "
                              "the whole head")
# By target kind ("cpu" or "gpu"): which rewrites the flag stage tries on the model, each kept
# only if the model gets faster with it (alone and with each flag, then added to the choice one at
# a time: `combined`, in this order: a strided 1x1 convolution subsampled is a unit-stride one
# the matrix-product form takes). Not raise-attention on the CPU: no llvm-cpu pipeline tunes the
# attention it forms, so it could only be judged at the compiler's config, and the README's BERT
# walk-through spent its flag stage there, three choices at 0.34-0.77x the model (issue 62).
REWRITES = {"cpu": (ND_LINEAR_AS_MATMUL, F32_REDUCTIONS, CHAIN_CONCATS, SUBSAMPLE_STRIDED_1X1),
            "gpu": (ND_LINEAR_AS_MATMUL, F32_REDUCTIONS, CHAIN_CONCATS, PAD_REDUCTIONS, RAISE_ATTENTION_GPU, JOIN_SIBLING_LINEARS,
                    FUSE_PARTIAL_ROTARY, SUBSAMPLE_STRIDED_1X1,
                    POINTWISE_CONV_AS_MATMUL, PAD_CONV_COLUMNS, CONV_AS_IM2COL_MATMUL,
                    *(EXTERNAL if find_spec("triton") else ()))}
# Exact rewrites not offered yet: benchmarks/rewrite_check.py builds and times them by name; one
# moves to REWRITES once it has won on a model it was not made for.
BATCH_TO_WIDTH = Rewrite("batch-to-width", batch_to_width,
                         "a batch of narrow images convolved side by side as one wide image")
# The layer-norm kernel for the norms after a channels-last transpose only, as the flag stage
# offered it from the twenty-fifth session to the twenty-seventh: for comparisons on a model
# (benchmarks/export_vs_torch.py --only NAME) and the runs that chose it.
EXTERNAL_TRANSPOSED_LAYERNORM = Rewrite("external-transposed-layer-norm",
                                        partial(external_layernorms, transposed_only=True),
                                        "layer norms after a channels-last transpose as an external kernel "
                                        "compiled by Triton that reads the image as it was", devices=("cuda",))
# The convolution kernel with the image NCHW, as external-hopper-conv gave it until the H200 runs of
# the twenty-fourth session (one value a load; 0.19-1.07x cuDNN where the channels-last form ran
# 1.0-3.6x): for comparisons on a model (benchmarks/export_vs_torch.py --only NAME).
EXTERNAL_CONV_NCHW = Rewrite("external-hopper-conv-nchw", partial(external_convs, channels_last=False),
                             "convolutions as external Hopper implicit-GEMM kernels compiled by Triton, the image "
                             "read NCHW", devices=("cuda",))
# Reductions over an NHWC image's pixels (ConvNeXt-V2's GRN: `reduction_8x384x3136`, 0.169 ms of the
# tuned model's 1.52 on the H200, twenty-ninth session) as a kernel that reads whole rows of
# channels. On the H200 (thirtieth session) ConvNeXt-V2 with the other kernels untuned 1.630 ->
# 1.406 ms, the same error; made for it, so an experiment until it wins on another model.
EXTERNAL_SPATIAL_REDUCTION = Rewrite("external-spatial-reduction", external_spatial_reductions,
                                     "reductions over a channels-last image's pixels (GRN's L2 norm, a mean over "
                                     "them) as an external kernel compiled by Triton", devices=("cuda",))
EXPERIMENTS = (BATCH_TO_WIDTH, EXTERNAL_TRANSPOSED_LAYERNORM, EXTERNAL_CONV_NCHW, EXTERNAL_SPATIAL_REDUCTION)


# Every rewrite that compiles external kernels (Triton's): those offered and the experiments.
KERNEL_REWRITES = frozenset(r.name for r in (*EXTERNAL, EXTERNAL_TRANSPOSED_LAYERNORM, EXTERNAL_CONV_NCHW,
                                             EXTERNAL_SPATIAL_REDUCTION))


def makes_kernels(rewrite: Rewrite) -> bool:
    """Whether the rewrite (or one it is combined from) compiles external kernels."""
    return any(name in KERNEL_REWRITES for name in rewrite.names)


def named_rewrites(target=None) -> dict[str, Rewrite]:
    """Every rewrite that may be built by name: those offered on some target (`target`'s own, else
    a GPU's, where two share a name), the feeders, the external kernels (Triton installed or not)
    and EXPERIMENTS."""
    every = (*REWRITES["cpu"], *FEEDERS, *EXTERNAL, *EXPERIMENTS, *REWRITES["gpu"],
             *(rewrites_for(target) if target is not None else ()))
    return {r.name: r for r in every}


def unoffered_for(target) -> Optional[str]:
    """Why rewrites this target could take are not offered here (None: every one is): the
    external Hopper kernels on cuda where Triton is not installed."""
    if target.device.split(":")[0] == "cuda" and find_spec("triton") is None:
        return (f"{', '.join(r.name for r in EXTERNAL)} (Hopper kernels compiled by Triton) not offered: "
                "Triton is not installed (pip install triton)")
    return None


def rewrites_for(target) -> tuple[Rewrite, ...]:
    """The rewrites the flag stage offers on `target` (a tuner.targets.Target), in REWRITES order."""
    device = target.device.split(":")[0]
    offered = REWRITES["cpu" if device.startswith("local") else "gpu"]
    return tuple(r for r in offered if not r.devices or device in r.devices)


def rewrite_program(source: Path, rewrite: Rewrite, out: Path) -> list[str]:
    """Write the program in `source` rewritten by `rewrite` to `out` (in a context of its own) and
    return what changed; nothing is written when nothing changed. (A run that rewrites one program
    many ways keeps a tuner.rewrite.parsed.ParsedProgram instead: parsed once, written only when
    built.)"""
    return ParsedProgram(source).write(rewrite, out)
