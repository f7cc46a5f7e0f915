"""The launch ABI of IREE's CUDA runtime for a `hal.dispatch.extern` kernel, and a kernel made
elsewhere brought to it.

The runtime passes one parameter per binding, a device pointer each, in the layout's order (then
one 32-bit value per push constant; these kernels take none), launches a block of
`workgroup_size` threads on a grid from the dispatch's count region, and gives the kernel
`workgroup_local_memory` bytes of dynamic shared memory (over 48 KiB is opted in at load)."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Workgroups in one wave on an H100 or H200 (one per SM): tile rules prefer grids that fill one.
WAVE = 132
# The most dynamic shared memory a block may opt in to on an H100 or H200 (227 KiB): a kernel
# that asks for more fails at launch, not at build.
SHARED_LIMIT = 232448


@dataclass(frozen=True)
class ExternKernel:
    """A compiled kernel as IREE launches it: PTX whose one entry is `name` and takes exactly
    `bindings` pointer parameters, `threads` per block, `shared_bytes` of dynamic shared memory
    and a grid of `grid` blocks (x, y, z)."""

    name: str
    ptx: str
    bindings: int
    threads: int
    shared_bytes: int
    grid: tuple[int, int, int]
    label: str  # how it was made ("128x128x64 w8 s3"), for what a rewrite says it did
    # Global memory the kernel writes for itself (Triton's global scratch: the TMA descriptors a
    # program makes), given as its last binding, after the result: a second result of the
    # dispatch that nothing reads. 0: none.
    scratch_bytes: int = 0


class KernelAbiError(ValueError):
    """The kernel's PTX cannot be brought to IREE's launch ABI."""


# PTX ISA, "Identifiers": what an entry's name may be (a '.' in it fails the driver's JIT at load,
# 'Parsing error near ...', not the compile).
PTX_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_$]*|[_$%][A-Za-z0-9_$]+")


def for_iree(ptx: str, entry: str, name: str, bindings: int) -> str:
    """`ptx` with its entry `entry` renamed `name` and cut to its first `bindings` parameters.

    Triton appends scratch-buffer pointers to every kernel's parameters (global and profile
    scratch), which IREE would not pass; they are dropped where the kernel's body never loads
    them (no scratch was allocated), and KernelAbiError says so where it does."""
    if not PTX_IDENTIFIER.fullmatch(name):
        raise KernelAbiError(f"{name!r} is no PTX identifier (letters, digits, _ and $): ptxas would refuse it at load")
    entries = re.findall(r"\.entry\s+([\w$]+)\s*\(", ptx)
    if entries != [entry]:
        raise KernelAbiError(f"expected one entry {entry!r} in the PTX, found {entries}")
    header = re.search(r"\.entry\s+" + re.escape(entry) + r"\s*\((.*?)\)", ptx, re.S)
    params = [p.strip() for p in header.group(1).split(",") if p.strip()]
    names = [p.split()[-1] for p in params]
    if len(params) < bindings:
        raise KernelAbiError(f"{entry} takes {len(params)} parameters, fewer than its {bindings} bindings")
    used = [n for n in names[bindings:] if re.search(r"\[\s*" + re.escape(n) + r"\s*\]", ptx)]
    if used:
        raise KernelAbiError(f"{entry} reads parameters beyond its bindings: {', '.join(used)}")
    body = ptx[:header.start()] + f".entry {name}(\n\t" + ",\n\t".join(params[:bindings]) + "\n)" + ptx[header.end():]
    return re.sub(r"\b" + re.escape(entry) + r"_param_", f"{name}_param_", body)
