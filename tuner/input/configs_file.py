"""A user's list of configs to evaluate without search: JSON, either a list of knob assignments
(`[{"distribution_m": 64, ...}, {"knobs": {...}}]`, as `iree-tuner candidates --output` writes
too) or a results.json from an earlier tuning (every non-baseline candidate's knobs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tuner.errors import InputError
from tuner.input.json_file import read_json


# Tile sizes and counts go into MLIR attributes as 64-bit integers; nothing real comes near this.
MAX_KNOB = 2 ** 31 - 1


def read_configs(path: Path) -> list[dict[str, Any]]:
    """The knob assignments in `path`, in file order; one clear error line for anything else."""
    data = read_json(path, "configs")
    if isinstance(data, dict) and isinstance(data.get("candidates"), list):
        entries = [c for c in data["candidates"] if isinstance(c, dict) and not c.get("is_baseline")]
    elif isinstance(data, list):  # knob assignments, or `iree-tuner candidates --output`'s list
        entries = [e for e in data if not (isinstance(e, dict) and e.get("is_baseline"))]
    else:
        raise InputError(f"{path}: expected a list of knob assignments or a results.json")
    configs = []
    for i, entry in enumerate(entries):
        knobs = entry.get("knobs", entry) if isinstance(entry, dict) else None
        if not isinstance(knobs, dict) or not knobs:
            raise InputError(f"{path}: entry {i} is not a knob assignment (an object of knob names to values)")
        bad = [k for k, v in knobs.items() if not isinstance(v, (int, bool))]
        if bad:
            raise InputError(f"{path}: entry {i}: knob values must be integers or booleans ({', '.join(bad)})")
        huge = [f"{k}={v}" for k, v in knobs.items() if not isinstance(v, bool) and not -MAX_KNOB <= v <= MAX_KNOB]
        if huge:
            raise InputError(f"{path}: entry {i}: knob values out of range (|value| <= {MAX_KNOB}): {', '.join(huge)}")
        configs.append(dict(knobs))
    if not configs:
        raise InputError(f"{path}: no configs in it")
    return configs
