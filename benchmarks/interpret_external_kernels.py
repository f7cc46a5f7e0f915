"""The external kernels' arithmetic run by Triton's interpreter on the CPU (`TRITON_INTERPRET=1`,
numpy underneath) against torch in f32: the implicit-GEMM convolution (tuner.external.triton_conv)
on every path, the depthwise kernel's and the GEMM's epilogues (their activations), the attention
kernel's layouts (heads split before the exporter's Transpose, grouped-query heads), the layer
norm's two layouts, the RMS norm, the reduction over an image's pixels. Index
arithmetic, masks and epilogues checked where no GPU is (the GPU's own compilation is checked by
benchmarks/gpu_external_conv.py and, in the model, by benchmarks/export_vs_torch.py). Small
shapes, so that the interpreter takes seconds.

    python benchmarks/interpret_external_kernels.py      # needs torch and triton (CPU builds are enough)

Prints each case's relative error (max |y - ref| / max |ref|) and exits non-zero where one is
over 2e-3 (f16 rounding of the output is 5e-4 of the largest value)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.external.attention_kernel import AttentionProblem, AttentionTiles, attention_tiles_for  # noqa: E402
from tuner.external.conv_kernel import ConvProblem, conv_tiles_for  # noqa: E402
from tuner.external.depthwise_kernel import DepthwiseProblem, depthwise_tiles_for  # noqa: E402
from tuner.external.layernorm_kernel import LayerNormProblem, RmsNormProblem, layernorm_tiles_for  # noqa: E402
from tuner.external.reduction_kernel import SpatialReduceProblem, spatial_reduce_tiles_for  # noqa: E402

P1 = (1, 1, 1, 1)
CASES = {
    "one tap's channels a step, stride 2, bias + relu": ConvProblem(2, 64, 9, 9, 64, 3, 3, (2, 2), P1,
                                                                    epilogue=("row_bias", "relu")),
    "groups of 32 channels, one tap a step": ConvProblem(1, 96, 7, 7, 192, 3, 3, pads=P1, group=3),
    "48 channels: 16 a step, filters masked (40)": ConvProblem(2, 48, 5, 6, 40, 3, 3, pads=P1, epilogue=("row_bias",)),
    "8 channels: k in the filter's order, masked": ConvProblem(2, 8, 9, 7, 32, 3, 3, pads=P1,
                                                               epilogue=("row_bias", "relu")),
    "a stem: 3 channels, 7x7 stride 2, uneven pads": ConvProblem(2, 3, 11, 11, 16, 7, 7, (2, 2), (3, 2, 3, 1)),
    "dilation 2, groups of 4 channels": ConvProblem(1, 16, 8, 8, 64, 3, 3, pads=P1, dilations=(2, 2), group=4,
                                                    epilogue=("row_bias",)),
    "strided 1x1, bias + gelu": ConvProblem(2, 64, 6, 6, 96, 1, 1, (2, 2), epilogue=("row_bias", "gelu")),
    "bias + gelu, tanh form": ConvProblem(1, 32, 6, 6, 32, 3, 3, pads=P1, epilogue=("row_bias", "gelu_tanh")),
    "silu": ConvProblem(1, 32, 6, 6, 32, 3, 3, pads=P1, epilogue=("silu",)),
    "channels-last, stride 2, bias + relu": ConvProblem(2, 64, 9, 9, 64, 3, 3, (2, 2), P1,
                                                        epilogue=("row_bias", "relu"), channels_last=True),
    "channels-last, groups of 32 channels": ConvProblem(1, 96, 7, 7, 192, 3, 3, pads=P1, group=3, channels_last=True),
    "channels-last, 48 channels: 16 a step": ConvProblem(2, 48, 5, 6, 40, 3, 3, pads=P1, channels_last=True),
}


def error_of(problem: ConvProblem) -> float:
    import torch

    from tuner.external.triton_conv import constants, conv_jit, grid

    tiles = conv_tiles_for(problem)
    values = constants(problem, tiles)
    torch.manual_seed(0)
    x = torch.randn(problem.n, problem.c, problem.h, problem.w, dtype=torch.float16)
    w = torch.randn(problem.f, problem.c // problem.group, problem.kh, problem.kw, dtype=torch.float16)
    b = torch.randn(problem.f, dtype=torch.float16)
    y = torch.empty(problem.n, problem.f, *problem.out, dtype=torch.float16)
    given = w.permute(0, 2, 3, 1).contiguous() if values["BY_TAP"] else w  # tap-major, as the rewrite gives it
    image = x.permute(0, 2, 3, 1).contiguous() if problem.channels_last else x  # NHWC, as the rewrite gives it
    conv_jit()[grid(problem, tiles)](image, given, b if values["HAS_BIAS"] else y, y, **values)
    pt, pl, pb, pr = problem.pads
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(x.float(), (pl, pr, pt, pb)), w.float(),
                                     b.float() if values["HAS_BIAS"] else None, problem.strides, 0, problem.dilations,
                                     problem.group)
    ref = _activated(ref, next((s for s in problem.epilogue if s != "row_bias"), ""))
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def _activated(ref, activation: str):
    import torch

    return {"": ref, "relu": ref.relu(), "gelu": torch.nn.functional.gelu(ref),
            "gelu_tanh": torch.nn.functional.gelu(ref, approximate="tanh"),
            "silu": torch.nn.functional.silu(ref)}[activation]


def depthwise_error(problem: DepthwiseProblem) -> float:
    import torch

    from tuner.external.gemm_kernel import ACTIVATIONS
    from tuner.external.triton_depthwise import depthwise_jit

    tiles = depthwise_tiles_for(problem)
    oh, ow = problem.out
    torch.manual_seed(0)
    x = torch.randn(problem.n, problem.c, problem.h, problem.w, dtype=torch.float16)
    w = torch.randn(problem.c, 1, problem.kh, problem.kw, dtype=torch.float16)
    b = torch.randn(problem.c, dtype=torch.float16)
    y = torch.empty(problem.n, problem.c, oh, ow, dtype=torch.float16)
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = problem.strides, problem.pads, problem.dilations
    depthwise_jit()[(problem.n * problem.c, -(-oh * ow // tiles.pixels), 1)](
        x, w, b if problem.bias else y, y, problem.c, problem.h, problem.w, oh, ow, problem.kh, problem.kw, sh, sw,
        pt, pl, dh, dw, problem.bias, ACTIVATIONS.get(problem.activation, 0), tiles.pixels)
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(x.float(), (pl, pr, pt, pb)), w.float(),
                                     b.float() if problem.bias else None, problem.strides, 0, problem.dilations,
                                     problem.c)
    ref = _activated(ref, problem.activation)
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def gemm_error(m: int, n: int, k: int, activation: str, group: int = 1) -> float:
    import torch

    from tuner.external.gemm_kernel import ACTIVATIONS, GemmProblem, GemmTiles
    from tuner.external.triton_gemm import gemm_jit, grid

    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.float16)
    b = (torch.randn(k, n) / k ** 0.5).half()
    bias = torch.randn(n, dtype=torch.float16)
    y = torch.empty(m, n, dtype=torch.float16)
    launch = grid(GemmProblem(m, n, k), GemmTiles(64, 64, 32, 4, 3, group))
    gemm_jit()[launch](a, b, bias, y, m, n, k, 64, 64, 32, True, ACTIVATIONS[activation], n % 64 == 0, False, False,
                       k % 32 == 0, group)
    ref = _activated(a.float() @ b.float() + bias.float(), activation)
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def gemm_tma_error(m: int, n: int, k: int, activation: str) -> float:
    """The persistent TMA kernel with 64x64x32 tiles, 8 row tiles at a time, on the grid the
    rewrite launches (a workgroup a multiprocessor: more tiles than 132 are taken in turns)."""
    import torch
    import triton

    from tuner.external.abi import WAVE
    from tuner.external.gemm_kernel import ACTIVATIONS, GemmProblem, GemmTiles
    from tuner.external.triton_gemm import gemm_tma_jit, grid

    torch.manual_seed(0)
    a = torch.randn(m, k, dtype=torch.float16)
    b = (torch.randn(k, n) / k ** 0.5).half()
    y = torch.empty(m, n, dtype=torch.float16)
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))  # the descriptors' scratch
    gemm_tma_jit()[grid(GemmProblem(m, n, k), GemmTiles(64, 64, 32, 4, 3, 8, tma=True))](
        a, b, y, m, n, k, 64, 64, 32, ACTIVATIONS.get(activation, 0), 8, WAVE)
    ref = _activated(a.float() @ b.float(), activation)
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def attention_error(problem: AttentionProblem, tiles: AttentionTiles | None = None) -> float:
    """The kernel (with `tiles`, default the rule's) against torch's SDPA, each operand laid out
    as `problem.seq_major` says."""
    import torch

    from tuner.external.triton_attention import attention_jit, constants, grid

    tiles = tiles or attention_tiles_for(problem)
    z, h, m, n = problem.z, problem.h, problem.m, problem.n
    torch.manual_seed(0)
    q, k, v = (torch.randn(z, heads, s, problem.d, dtype=torch.float16)
               for heads, s in ((h, m), (problem.kv, n), (problem.kv, n)))

    def laid(x, major):  # [z, h, s, d] as it lies in memory
        return x.transpose(1, 2).contiguous() if major else x.contiguous()

    qt, kt, vt, ot = problem.seq_major
    operands = [laid(q, qt), laid(k, kt), laid(v, vt)]
    if any(problem.rows):  # Q, K, V side by side in one tensor's rows, each at its offset (m == n)
        width = problem.rows[0]
        fused = torch.zeros(z, m, width, dtype=torch.float16)
        for x, at in zip(operands, problem.offsets):
            fused[:, :, at:at + h * x.shape[-1]] = x.reshape(z, m, -1)
        operands = [fused] * 3
    y = torch.empty((z, m, h, problem.dv) if ot else (z, h, m, problem.dv), dtype=torch.float16)
    full = None
    if problem.mask:  # [mz, mh, mm, n], its z repeating every mz (Swin's windows), the rest broadcast
        mask = torch.randn(*problem.mask, n, dtype=torch.float16)
        full = mask.repeat(z // problem.mask[0], 1, 1, 1).expand(z, h, m, n).float()
    if tiles.tma:  # the descriptors' scratch, as Triton's launcher would allocate it
        import triton

        from tuner.external.triton_attention import attention_tma_jit, tma_values

        triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8))
        values = tma_values(problem, tiles)
        values.pop("y_ptr", None)
        attention_tma_jit()[grid(problem, tiles)](*operands, mask if problem.mask else y,
                                                  y if problem.mask else None, **values)
    else:
        attention_jit()[grid(problem, tiles)](*operands, mask if problem.mask else y, y, **constants(problem, tiles))
    group = h // problem.kv  # grouped-query: each K/V head repeated for its group, as transformers' repeat_kv
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    ref = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=full,
                                                           is_causal=problem.causal, scale=problem.scale)
    out = y.float().transpose(1, 2) if ot else y.float()
    return ((out - ref).abs().max() / ref.abs().max()).item()


ATTENTION = {
    "attention, heads split as the exporter writes them": AttentionProblem(
        2, 3, 40, 50, 16, 16, scale=0.125, seq_major=(True, True, True, True)),
    "attention, K and the result only, causal": AttentionProblem(
        1, 2, 70, 70, 32, 32, causal=True, scale=0.2, seq_major=(False, True, False, True)),
    "attention, a window mask repeating every 4 of 8 z, per head": AttentionProblem(
        8, 3, 49, 49, 32, 32, mask=(4, 3, 49), scale=0.2),
    "attention, Q K V read from one fused projection": AttentionProblem(
        2, 3, 40, 40, 16, 16, causal=True, scale=0.25, seq_major=(True, True, True, True), rows=(160, 160, 160),
        offsets=(96, 0, 48)),
    "grouped-query: 2 K/V heads for 8, causal": AttentionProblem(
        1, 8, 40, 40, 16, 16, causal=True, scale=0.25, kv_heads=2),
    "grouped-query: 3 K/V heads for 6, K V seq-major": AttentionProblem(
        2, 6, 33, 45, 32, 32, scale=0.2, seq_major=(False, True, True, True), kv_heads=3),
    "multi-query: 1 K/V head for 4 (Falcon's), causal": AttentionProblem(
        1, 4, 40, 40, 64, 64, causal=True, scale=0.125, seq_major=(False, False, False, True), kv_heads=1),
    "heads of 80 (Phi-2's), padded to 128, causal, seq-major": AttentionProblem(
        1, 4, 40, 40, 80, 80, causal=True, scale=0.11, seq_major=(True, True, True, True)),
    "heads of 96 (Phi-3's), 2 K/V heads for 4, masked": AttentionProblem(
        2, 4, 33, 45, 96, 96, mask=(1, 1, 33), scale=0.1, kv_heads=2),
    "heads of 256 (Gemma's), 1 K/V head for 2, causal": AttentionProblem(
        1, 2, 70, 70, 256, 256, causal=True, scale=0.0625, seq_major=(False, False, False, True), kv_heads=1),
}
# Tiles other than the rule's, where the keys before the causal diagonal or the last partial block
# take the unchecked run: (problem, tiles).
ATTENTION_TILED = {
    "causal, 200 tokens, 128 rows by 32 keys a step": (
        AttentionProblem(1, 2, 200, 200, 64, 64, causal=True, scale=0.125), AttentionTiles(128, 32, 4, 2)),
    "150 keys, 64 a step: two blocks unchecked, the last checked": (
        AttentionProblem(1, 2, 100, 150, 64, 64, scale=0.125), AttentionTiles(64, 64, 4, 2)),
    "heads of 80, 128 keys, all unchecked but the padded width": (
        AttentionProblem(1, 2, 64, 128, 80, 80, scale=0.1), AttentionTiles(64, 64, 4, 2)),
    "causal, 64 rows by 128 keys a step (the diagonal block wider than the tile)": (
        AttentionProblem(1, 2, 300, 300, 64, 64, causal=True, scale=0.125), AttentionTiles(64, 128, 4, 2)),
    "TMA: causal, 2 K/V heads for 4, 200 tokens": (
        AttentionProblem(2, 4, 200, 200, 64, 64, causal=True, scale=0.125, kv_heads=2), AttentionTiles(64, 64, 4, 2, True)),
    "TMA: heads split as the exporter writes them, 150 keys": (
        AttentionProblem(2, 3, 100, 150, 32, 32, scale=0.2, seq_major=(True, True, True, True)),
        AttentionTiles(64, 64, 4, 2, True)),
    "TMA: Q K V from one fused projection, causal": (
        AttentionProblem(2, 3, 70, 70, 16, 16, causal=True, scale=0.25, seq_major=(True, True, True, True),
                         rows=(160, 160, 160), offsets=(96, 0, 48)), AttentionTiles(64, 32, 4, 2, True)),
    "TMA: a window mask repeating every 4 of 8 z": (
        AttentionProblem(8, 2, 49, 49, 32, 32, mask=(4, 2, 49), scale=0.2), AttentionTiles(64, 32, 4, 2, True)),
}


def layernorm_error(problem: LayerNormProblem) -> float:
    """The kernel against torch's layer_norm; channels first, X made NCHW and the reference taken
    on its NHWC view."""
    import torch

    from tuner.external.triton_layernorm import constants, layernorm_jit

    tiles = layernorm_tiles_for(problem)
    torch.manual_seed(0)
    x = torch.randn(problem.rows, problem.c, dtype=torch.float16) * 3 + 1
    w, b = torch.randn(problem.c, dtype=torch.float16), torch.randn(problem.c, dtype=torch.float16)
    y = torch.empty(problem.rows, problem.c, dtype=torch.float16)
    source = x
    if problem.channels_first:  # the same rows as [n, p, c], laid out [n, c, p]
        source = x.reshape(-1, problem.pixels, problem.c).transpose(1, 2).contiguous()
    layernorm_jit()[(-(-problem.rows // tiles.rows), 1, 1)](source, w, b if problem.bias else y, y,
                                                            **constants(problem, tiles))
    ref = torch.nn.functional.layer_norm(x.float(), (problem.c,), w.float(), b.float() if problem.bias else None,
                                         problem.eps)
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def rmsnorm_error(problem: RmsNormProblem) -> float:
    """The kernel against transformers' RMSNorm as torch computes it in f16: the statistics in
    f32, the normalized value rounded to f16, then the scale in f16 (Gemma's: the scale in f32,
    then the rounding)."""
    import torch

    from tuner.external.triton_layernorm import rmsnorm_constants, rmsnorm_jit

    tiles = layernorm_tiles_for(problem)
    torch.manual_seed(0)
    x = torch.randn(problem.rows, problem.c, dtype=torch.float16) * 3 + 1
    w = torch.randn(problem.c, dtype=torch.float32 if problem.weight_f32 else torch.float16)
    y = torch.empty(problem.rows, problem.c, dtype=torch.float16)
    rmsnorm_jit()[(-(-problem.rows // tiles.rows), 1, 1)](x, w, y, **rmsnorm_constants(problem, tiles))
    xf = x.float()
    normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + problem.eps)
    if problem.weight_f32:  # Gemma's: (normed * (1 + w)) in f32, rounded once (w here is 1 + w)
        ref = (normed * w).half().float()
    else:
        ref = (w * normed.half()).float()
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def spatial_reduce_error(problem: SpatialReduceProblem) -> float:
    """The kernel against torch's reduction of the same f16 values in f32 (ConvNeXt-V2's GRN:
    torch.linalg.vector_norm over an NHWC image's pixels), rounded to f16 as the kernel rounds."""
    import torch

    from tuner.external.triton_reduction import constants, spatial_reduce_jit

    tiles = spatial_reduce_tiles_for(problem)
    torch.manual_seed(0)
    x = torch.randn(problem.batch, problem.pixels, problem.c, dtype=torch.float16) + 0.5
    y = torch.empty(problem.batch, problem.c, dtype=torch.float16)
    spatial_reduce_jit()[tiles.grid(problem)](x, y, **constants(problem, tiles))
    xf = x.float()
    ref = {"l2": lambda: xf.pow(2).sum(1).sqrt(), "sumsq": lambda: xf.pow(2).sum(1), "mean": lambda: xf.mean(1),
           "sum": lambda: xf.sum(1)}[problem.kind]().half().float()
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


SPATIAL = {
    "L2 norm over 7x7 pixels, 40 channels (a block masked)": SpatialReduceProblem(2, 49, 40, "l2"),
    "mean over 100 pixels (two steps, the last masked)": SpatialReduceProblem(3, 100, 64, "mean"),
    "sum of squares, 1 pixel step of 16 over 9": SpatialReduceProblem(1, 9, 96, "sumsq"),
    "sum, 70 channels": SpatialReduceProblem(2, 20, 70, "sum"),
}
RMSNORM = {
    "RMS norm (Llama's), 20 rows of 96": RmsNormProblem(20, 96, 1e-6),
    "RMS norm, a row wider than a power of two (200)": RmsNormProblem(7, 200, 1e-5),
    "RMS norm over each head (Qwen3's q_norm), 64 rows of 16": RmsNormProblem(64, 16, 1e-6),
    "RMS norm, an f32 weight before the rounding (Gemma's)": RmsNormProblem(20, 96, 1e-6, weight_f32=True),
}
LAYERNORM = {
    "layer norm, rows as they lie": LayerNormProblem(20, 96, 1e-5),
    "layer norm, rows of 8 (under the 16 a row is padded to), no bias": LayerNormProblem(30, 8, 1e-5, bias=False),
    "layer norm, NCHW read, NHWC written (ConvNeXt)": LayerNormProblem(2 * 25, 40, 1e-6, bias=False, pixels=25),
}
DEPTHWISE = {
    "depthwise 3x3, bias + silu": DepthwiseProblem(2, 8, 9, 9, 3, 3, pads=P1, bias=True, activation="silu"),
    "depthwise 5x5 stride 2, relu": DepthwiseProblem(1, 4, 11, 11, 5, 5, (2, 2), (2, 2, 2, 2), activation="relu"),
}
GEMMS = {**{f"gemm 96x80x64, bias + {a}": (96, 80, 64, a) for a in ("relu", "gelu", "gelu_tanh", "silu")},
         "gemm 96x80x49 (K masked, Mixer's tokens), bias + gelu": (96, 80, 49, "gelu"),
         "gemm 320x200x64, 5 x 4 tiles taken 2 rows at a time": (320, 200, 64, "relu", 2),
         "gemm 320x200x64, 5 x 4 tiles taken 8 rows at a time": (320, 200, 64, "relu", 8),
         "gemm 100x200x64, rows masked, 2 row tiles taken 8 at a time": (100, 200, 64, "relu", 8)}
GEMMS_TMA = {"TMA gemm 200x192x96: rows past M left to the descriptors": (200, 192, 96, "relu"),
             "TMA gemm 768x768x64: 144 tiles on 132 workgroups": (768, 768, 64, "gelu")}


def main() -> None:
    errors = []
    for what, problem in CASES.items():
        errors.append(error_of(problem))
        print(f"{what:50s} {problem.name:50s} {conv_tiles_for(problem).label:16s} error {errors[-1]:.1e}", flush=True)
    for what, problem in DEPTHWISE.items():
        errors.append(depthwise_error(problem))
        print(f"{what:50s} {problem.name:50s} {'':16s} error {errors[-1]:.1e}", flush=True)
    for what, problem in ATTENTION.items():
        errors.append(attention_error(problem))
        print(f"{what:50s} {problem.name:50s} {attention_tiles_for(problem).label:16s} error {errors[-1]:.1e}",
              flush=True)
    for what, (problem, tiles) in ATTENTION_TILED.items():
        errors.append(attention_error(problem, tiles))
        print(f"{what:50s} {problem.name:50s} {tiles.label:16s} error {errors[-1]:.1e}", flush=True)
    for what, problem in LAYERNORM.items():
        errors.append(layernorm_error(problem))
        print(f"{what:50s} {problem.name:50s} {layernorm_tiles_for(problem).label:16s} error {errors[-1]:.1e}",
              flush=True)
    for what, problem in RMSNORM.items():
        errors.append(rmsnorm_error(problem))
        print(f"{what:50s} {problem.name:50s} {layernorm_tiles_for(problem).label:16s} error {errors[-1]:.1e}",
              flush=True)
    for what, problem in SPATIAL.items():
        errors.append(spatial_reduce_error(problem))
        print(f"{what:50s} {problem.name:50s} {spatial_reduce_tiles_for(problem).label:16s} error {errors[-1]:.1e}",
              flush=True)
    for what, shape in GEMMS.items():
        errors.append(gemm_error(*shape))
        print(f"{what:50s} {'':50s} {'64x64x32':16s} error {errors[-1]:.1e}", flush=True)
    for what, shape in GEMMS_TMA.items():
        errors.append(gemm_tma_error(*shape))
        print(f"{what:50s} {'':50s} {'64x64x32 g8 tma':16s} error {errors[-1]:.1e}", flush=True)
    sys.exit(0 if max(errors) <= 2e-3 else 1)


if __name__ == "__main__":
    main()
