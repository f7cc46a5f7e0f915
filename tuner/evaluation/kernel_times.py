"""Kernel records to dispatch times: IREE names each GPU kernel after its dispatch
(`MODEL_dispatch_N_KIND_SHAPE`, the export's symbol), so the records of some calls of a module
say what each dispatch costs per call inside the model. Pure functions of the records."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Sequence

from tuner.evaluation.cupti import KernelRecord

_NOT_IN_SYMBOLS = re.compile(r"[^A-Za-z0-9_]")


def kernel_symbol(name: str) -> str:
    """A dispatch's name as its GPU kernel is named: the backends spell the characters a symbol
    cannot hold (`forward$async_dispatch_0_...`) as `_` (`forward_async_dispatch_0_...`)."""
    return _NOT_IN_SYMBOLS.sub("_", name)


def belongs(kernel: str, wanted: str) -> bool:
    """Whether a kernel named `kernel` runs `wanted`: a dispatch's full name, or an executable's
    `MODEL_dispatch_N` (every kernel of that dispatch; `..._dispatch_1` is not `..._dispatch_16`)."""
    kernel, wanted = kernel_symbol(kernel), kernel_symbol(wanted)
    return kernel == wanted or kernel.startswith(wanted + "_")


@dataclass(frozen=True)
class KernelTime:
    """What one dispatch's kernels cost per call of the function that runs them."""

    ms: float  # device time per call, summed over its kernels
    runs: float  # kernels per call


def per_call(records: Iterable[KernelRecord], wanted: Sequence[str], calls: int) -> dict[str, KernelTime]:
    """Each wanted dispatch's kernel time per call over `calls` calls; a kernel counts for the
    first wanted name it belongs to, and kernels of no wanted dispatch (other modules, other
    functions) are left out. A wanted dispatch that never ran is absent."""
    total: dict[str, float] = {}
    count: dict[str, int] = {}
    for r in records:
        owner = next((w for w in wanted if belongs(r.name, w)), None)
        if owner is None:
            continue
        total[owner] = total.get(owner, 0.0) + r.ms
        count[owner] = count.get(owner, 0) + 1
    return {w: KernelTime(total[w] / calls, count[w] / calls) for w in total}


def repetition_times(per_repetition: Sequence[dict[str, KernelTime]], wanted: Sequence[str]) -> list[float]:
    """The summed time of `wanted` in each repetition (ms per call): a candidate's figure where
    it is several kernels (a split op and the dispatch adding its parts)."""
    return [sum(rep[w].ms for w in wanted if w in rep) for rep in per_repetition]
