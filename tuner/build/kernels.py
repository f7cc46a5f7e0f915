"""How the kernels of a compiled dispatch are named: its executable (`MODEL_dispatch_N`), and the
kernels whose time is a candidate's time. The build step records them with each built candidate
(tuner.core.built.Built.kernels); the run step finds them among the GPU's kernel records
(tuner.evaluation.kernel_times)."""

from __future__ import annotations

import re
from typing import Optional

_EXECUTABLE = re.compile(r"^(.*_dispatch_\d+)(?:_|$)")


def executable_of(dispatch: str) -> Optional[str]:
    """`MODEL_dispatch_N` of a dispatch's (or kernel's) name; None if it is not an IREE dispatch's."""
    found = _EXECUTABLE.match(dispatch)
    return found.group(1) if found else None


def kernel_names(dispatch_name: str, split_ways: int = 1) -> tuple[str, ...]:
    """The kernels whose time is a candidate's time: its dispatch's executable, and for a split-K
    config the next one (the dispatch that adds the parts, as tuner.build.dispatch_benchmark
    finds it)."""
    executable = executable_of(dispatch_name) or dispatch_name
    if split_ways <= 1 or executable == dispatch_name:
        return (executable,)
    stem, _, number = executable.rpartition("_")
    return (executable, f"{stem}_{int(number) + 1}")
