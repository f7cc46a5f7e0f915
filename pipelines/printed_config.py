"""Reading a lowering config as the compiler prints it (its canonical form), without IREE: a
pipeline's problem is built from the compiler's default config, and another compiler's dispatch,
with no default config, simply has none."""

from __future__ import annotations

import re


def tiling_level(lowering_config: str, level: str) -> list[int]:
    """One flat level (`distribution = [16, 32, 0]`, `thread = [0, 0, 4]`); [] where absent."""
    found = re.search(rf"\b{level} = \[([^\[\]]*)\]", lowering_config)
    return [int(x) for x in found.group(1).split(",")] if found and found.group(1).strip() else []


def basis(lowering_config: str, name: str) -> tuple[list[int], list[int]]:
    """A GPU basis (`lane_basis = [[1, 1, 32], [0, 1, 2]]`): its counts and its mapping; two
    empty lists where absent."""
    found = re.search(rf"\b{name} = \[\[([^\]]*)\], \[([^\]]*)\]\]", lowering_config)
    if not found:
        return [], []
    return ([int(x) for x in found.group(1).split(",")],
            [int(x) for x in found.group(2).split(",")] if found.group(2).strip() else [])
