"""A convolution window's geometry, shared by the convolution kernels' problems
(tuner.external.conv_kernel, tuner.external.depthwise_kernel): the output size ONNX's Conv
gives, and how a kernel's name spells the strides, pads and dilations that are not the plain ones."""

from __future__ import annotations


def window_out(h: int, w: int, kh: int, kw: int, strides: tuple[int, int], pads: tuple[int, int, int, int],
               dilations: tuple[int, int]) -> tuple[int, int]:
    """The output's rows and columns (pads: top, left, bottom, right)."""
    (sh, sw), (pt, pl, pb, pr), (dh, dw) = strides, pads, dilations
    return (h + pt + pb - dh * (kh - 1) - 1) // sh + 1, (w + pl + pr - dw * (kw - 1) - 1) // sw + 1


def window_label(strides: tuple[int, int], pads: tuple[int, int, int, int], dilations: tuple[int, int]) -> str:
    """"_s2x2_p1x1x1x1_d2x2", each part only where it is not the plain one."""
    return "".join(f"_{label}{'x'.join(map(str, v))}" for label, v, plain in (
        ("s", strides, (1, 1)), ("p", pads, (0, 0, 0, 0)), ("d", dilations, (1, 1))) if v != plain)
