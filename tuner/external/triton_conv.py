"""Convolutions as implicit GEMMs compiled by Triton, for `hal.dispatch.extern` (tuner.external).

A block computes a bm x bn tile of one group's C = A B (tuner.external.conv_kernel): bm of the
group's filters by bn output pixels (the images side by side). Each K step loads bk of the
filters' values and gathers the patch values they meet from the image (zeros where a tap falls
in the padding), then `tl.dot` (wgmma on sm_90a) adds their product to the f32 sums; the patches
are never written. Where bk divides a group's channels (`tap_major`), a step is one tap's bk
channels (its pixel offsets one vector, its rows consecutive planes) and W is given tap-major,
[F, KH, KW, CG], so that they lie side by side, and X may be given channels-last (`NHWC`), so
that a step's patch is BN runs of bk consecutive channels (vector loads) rather than bk x BN single
values (in NCHW a tap's channels lie H x W apart); otherwise (a stem's 3 channels) k runs
in the filter's own order, every value's tap and channel computed, the last step masked. The bias per filter and the activation (Relu, Gelu in either form, SiLU) are
applied to the sums, which are rounded once and stored in NCHW. The grid is (pixel tiles, filter
tiles, groups). The bindings are X, W, then the bias where there is one, then Y."""

from __future__ import annotations

from functools import cache

from tuner.external.abi import ExternKernel
from tuner.external.conv_kernel import EPILOGUE_STEPS, ConvProblem, tap_major
from tuner.external.gemm_kernel import ACTIVATIONS, GemmTiles
from tuner.external.triton_build import compile_for_iree, language



@cache
def conv_jit():
    """The triton.jit kernel (jitted once a process; benchmarks/gpu_external_conv.py launches it directly)."""
    triton, tl = language()

    @triton.jit
    def _conv(x_ptr, w_ptr, u_ptr, v_ptr, C: tl.constexpr, H: tl.constexpr, W: tl.constexpr, F: tl.constexpr,
              OH: tl.constexpr, OW: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr,
              SW: tl.constexpr, PT: tl.constexpr, PL: tl.constexpr, DH: tl.constexpr, DW: tl.constexpr,
              M: tl.constexpr, NP: tl.constexpr, K: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr,
              BK: tl.constexpr, BY_TAP: tl.constexpr, NHWC: tl.constexpr, HAS_BIAS: tl.constexpr,
              ACT: tl.constexpr):
        # M filters, K = channels x taps a group; NP = images x output pixels. u_ptr is the bias
        # and v_ptr Y where HAS_BIAS, else u_ptr is Y.
        pid_n = tl.program_id(0)
        pid_m = tl.program_id(1)
        group = tl.program_id(2)
        rows = pid_m * BM + tl.arange(0, BM)
        filters = group * M + rows
        cols = pid_n * BN + tl.arange(0, BN)
        image = cols // (OH * OW)
        pixel = cols % (OH * OW)
        # The column as pixel - row x OW, not pixel % OW: Triton 3.6 miscompiles the pair
        # (pixel // OW) * SH, (pixel % OW) * SW on the H200 where a stride is 2 and the problem
        # large (ResNet-50's stem and strided 3x3s; right in the interpreter and at small sizes)
        row = pixel // OW
        top = row * SH - PT
        left = (pixel - row * OW) * SW - PL
        plane = image.to(tl.int64) * (C * H * W) + group * (K // (KH * KW)) * (H * W)
        row_ok = rows < M
        col_ok = cols < NP
        a = w_ptr + filters.to(tl.int64)[:, None] * K
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        if BY_TAP:
            # K in (tap, channel) order, BK channels a step (BK divides the group's channels): a
            # step's tap is one scalar, its rows and columns one vector of BN, and the patch's
            # rows consecutive planes. W is given tap-major, [F, KH, KW, CG] (the rewrite
            # transposes the filter, a constant IREE folds), so a step's filter values lie
            # side by side
            CG: tl.constexpr = K // (KH * KW)
            cs = tl.arange(0, BK)
            for step in range(0, K // BK):
                tap = step // (CG // BK)
                c0 = (step % (CG // BK)) * BK
                ih = top + (tap // KW) * DH
                iw = left + (tap % KW) * DW
                inside = col_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                if NHWC:  # a column's bk channels side by side
                    at = image.to(tl.int64) * (H * W * C) + group * CG + (ih * W + iw) * C + c0
                    patch = tl.load(x_ptr + at[None, :] + cs[:, None], mask=inside[None, :], other=0.0)
                else:
                    patch = tl.load(x_ptr + (plane + ih * W + iw)[None, :] + ((c0 + cs) * (H * W))[:, None],
                                    mask=inside[None, :], other=0.0)
                filt = tl.load(a + (tap * CG + c0 + cs)[None, :], mask=row_ok[:, None], other=0.0)
                acc = tl.dot(filt, patch, acc)
        else:
            # K in the filter's own (channel, tap) order, the last step masked: few channels (a stem)
            for k0 in range(0, K, BK):
                ks = k0 + tl.arange(0, BK)
                k_ok = ks < K
                channel = ks // (KH * KW)
                tap = ks % (KH * KW)
                ih = top[None, :] + ((tap // KW) * DH)[:, None]
                iw = left[None, :] + ((tap % KW) * DW)[:, None]
                inside = k_ok[:, None] & col_ok[None, :] & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                patch = tl.load(x_ptr + plane[None, :] + (channel * (H * W))[:, None] + ih * W + iw, mask=inside,
                                other=0.0)
                filt = tl.load(a + ks[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                acc = tl.dot(filt, patch, acc)
        if HAS_BIAS:
            acc += tl.load(u_ptr + filters, mask=row_ok, other=0.0)[:, None].to(tl.float32)
            out = v_ptr
        else:
            out = u_ptr
        if ACT == 1:
            acc = tl.maximum(acc, 0.0)
        if ACT == 2:
            acc = 0.5 * acc * (1.0 + tl.erf(acc * 0.7071067811865476))
        if ACT == 3:  # tanh(u) = 2 sigmoid(2u) - 1
            u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 / (1.0 + tl.exp(-2.0 * u)))
        if ACT == 4:
            acc = acc / (1.0 + tl.exp(-acc))
        at = image.to(tl.int64)[None, :] * (F * OH * OW) + filters.to(tl.int64)[:, None] * (OH * OW) + pixel[None, :]
        tl.store(out + at, acc.to(out.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])

    return _conv


def constants(problem: ConvProblem, tiles: GemmTiles) -> dict[str, object]:
    """The kernel's constexpr arguments for `problem` with `tiles` (by name, in its order)."""
    steps = list(problem.epilogue)
    has_bias = steps[:1] == ["row_bias"]
    activation = steps[1:] if has_bias else steps
    if any(s not in EPILOGUE_STEPS for s in steps) or len(activation) > 1 or "row_bias" in activation:
        raise ValueError(f"no external kernel for the epilogue {'+'.join(steps)}")
    if problem.channels_last and not tap_major(problem, tiles):
        raise ValueError(f"{problem.name}: channels-last only where a step is one tap's channels")
    m, n, k = problem.gemm
    oh, ow = problem.out
    (sh, sw), (pt, pl, _, _), (dh, dw) = problem.strides, problem.pads, problem.dilations
    return {"C": problem.c, "H": problem.h, "W": problem.w, "F": problem.f, "OH": oh, "OW": ow, "KH": problem.kh,
            "KW": problem.kw, "SH": sh, "SW": sw, "PT": pt, "PL": pl, "DH": dh, "DW": dw, "M": m, "NP": n, "K": k,
            "BM": tiles.bm, "BN": tiles.bn, "BK": tiles.bk, "BY_TAP": tap_major(problem, tiles),
            "NHWC": problem.channels_last,
            "HAS_BIAS": has_bias, "ACT": ACTIVATIONS.get(activation[0], 0) if activation else 0}


def grid(problem: ConvProblem, tiles: GemmTiles) -> tuple[int, int, int]:
    """(pixel tiles, filter tiles, groups)."""
    m, n, _ = problem.gemm
    return -(-n // tiles.bn), -(-m // tiles.bm), problem.group


@cache  # each problem's kernel compiled once a process: the rewrites alone and joined share it
def triton_conv(problem: ConvProblem, tiles: GemmTiles) -> ExternKernel:
    """The implicit-GEMM kernel of `problem` with `tiles`, brought to IREE's launch ABI."""
    if problem.element not in ("f16", "bf16"):
        raise ValueError(f"no external kernel for {problem.element} convolutions")
    values = constants(problem, tiles)
    pointer = "*fp16" if problem.element == "f16" else "*bf16"
    return compile_for_iree(conv_jit(), {"x_ptr": pointer, "w_ptr": pointer, "u_ptr": pointer, "v_ptr": pointer},
                            values, tiles, problem.name, grid(problem, tiles), bindings=4 if values["HAS_BIAS"] else 3)
