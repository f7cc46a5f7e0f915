"""Element types numpy has no dtype for (bf16 and the 8-bit floats): fed to IREE's tools and read
back as raw bits, converted to and from f32 here to be generated and compared."""

from __future__ import annotations

import functools

import numpy as np

# Types fed and read back as raw bits (`SHAPExTYPE=@file.bin` in, `--output=@file.bin` out): numpy
# has no such dtype and IREE's .npy writer refuses them ("unsupported data encoding").
RAW_TYPES = {"bf16": np.uint16, "f8E4M3FN": np.uint8, "f8E5M2": np.uint8, "f8E4M3FNUZ": np.uint8,
             "f8E5M2FNUZ": np.uint8}


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    """bf16 values (their raw 16 bits) as f32: the high half of an f32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """f32 values as bf16 raw bits (truncated)."""
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


# The 8-bit floats: exponent bits, mantissa bits, bias, and how NaN and infinity are spelled
# ("fn": the all-ones pattern of exponent and mantissa is NaN, no infinity; "fnuz": 0x80 is the
# only NaN, no negative zero or infinity; "ieee": as IEEE 754).
_F8 = {"f8E4M3FN": (4, 3, 7, "fn"), "f8E5M2": (5, 2, 15, "ieee"),
       "f8E4M3FNUZ": (4, 3, 8, "fnuz"), "f8E5M2FNUZ": (5, 2, 16, "fnuz")}


@functools.lru_cache(maxsize=None)
def _f8_values(element_type: str) -> np.ndarray:
    """The f32 value of each of the 256 bit patterns of an 8-bit float type."""
    exp_bits, man_bits, bias, kind = _F8[element_type]
    values = np.empty(256, dtype=np.float32)
    top = (1 << exp_bits) - 1
    for bits in range(256):
        sign = -1.0 if bits >> 7 else 1.0
        e, m = (bits >> man_bits) & top, bits & ((1 << man_bits) - 1)
        if kind == "fnuz" and bits == 0x80 or kind == "fn" and e == top and m == (1 << man_bits) - 1:
            values[bits] = np.nan
        elif kind == "ieee" and e == top:
            values[bits] = sign * np.inf if m == 0 else np.nan
        elif e == 0:
            values[bits] = sign * m / (1 << man_bits) * 2.0 ** (1 - bias)
        else:
            values[bits] = sign * (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    return values


def raw_to_f32(bits: np.ndarray, element_type: str) -> np.ndarray:
    """Raw bits of a RAW_TYPES type as f32 values (widened exactly)."""
    if element_type == "bf16":
        return bf16_to_f32(bits.astype(np.uint16))
    return _f8_values(element_type)[bits.astype(np.uint8)]


def f32_to_raw(values: np.ndarray, element_type: str) -> np.ndarray:
    """f32 values as raw bits of a RAW_TYPES type: bf16 truncated, the f8 types to the nearest
    finite value."""
    if element_type == "bf16":
        return f32_to_bf16(values)
    table = _f8_values(element_type)
    finite = np.flatnonzero(np.isfinite(table))
    order = finite[np.argsort(table[finite], kind="stable")]
    ordered = table[order]
    at = np.clip(np.searchsorted(ordered, values), 1, len(ordered) - 1)
    nearer_below = np.abs(values - ordered[at - 1]) <= np.abs(ordered[at] - values)
    return order[np.where(nearer_below, at - 1, at)].astype(np.uint8)
