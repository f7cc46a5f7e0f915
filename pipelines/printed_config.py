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


def mma_kind(lowering_config: str) -> str | None:
    """A GPU lowering config's intrinsic (`mma_kind = #iree_gpu.mma_layout<NAME>`): NAME, or None."""
    found = re.search(r"mma_kind = #iree_gpu\.mma_layout<(\w+)>", lowering_config)
    return found.group(1) if found else None


def threads_and_subgroup(translation_info: str) -> tuple[int, int] | None:
    """A GPU translation_info's 1-D workgroup size and subgroup size
    (`workgroup_size = [256, 1, 1] subgroup_size = 32`), or None."""
    found = re.search(r"workgroup_size = \[(\d+), 1, 1\] subgroup_size = (\d+)", translation_info)
    return (int(found.group(1)), int(found.group(2))) if found else None


def levels(lowering_config: str) -> list[str]:
    """The tiling levels a printed `#iree_cpu.lowering_config` has, in its order."""
    return re.findall(r"(\w+) = \[", lowering_config)


def retiled(lowering_config: str, new: dict[tuple[str, int], int]) -> str:
    """A printed `#iree_cpu.lowering_config` with the entries `new` gives ((level, loop) -> tile)
    changed where the config tiles that loop at that level (a zero stays: that op does not tile
    it there), as text for the compiler's parser (3.13's bindings have no constructor for it)."""
    parts = []
    for level in levels(lowering_config):
        sizes = tiling_level(lowering_config, level)
        sizes = [new.get((level, d), t) if t else t for d, t in enumerate(sizes)]
        parts.append(f"{level} = {sizes}")
    return f"#iree_cpu.lowering_config<{', '.join(parts)}>"
