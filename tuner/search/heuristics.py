"""Seed heuristics (as Helion's autotuner has them): each says whether it applies to a dispatch
(`is_eligible`) and which configs to try first (`seed_configs`). Seeds go first in a search's
first batch, and results.json says which heuristic proposed each candidate.

Two kinds:
- Python heuristics registered in HEURISTICS (`preference_head`: the first points of the
  pipeline's hand-written preference order, which was the only order before searches existed).
- JSON entries (`seeds.json` beside this module, and a user's `--seeds FILE`): configs found by
  benchmarking, each with the pipeline, backend (and optionally arch, kind, shape) it applies to
  and the shape it was found on (`found_on`). A seed that is not valid for the dispatch at hand
  is dropped by the search."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Protocol, Sequence

from tuner.errors import InputError
from tuner.input.json_file import read_json
from tuner.search.base import Seed
from tuner.search.simple import PreferenceSearch
from tuner.search.space import SearchSpace, Value

SEEDS_FILE = Path(__file__).with_name("seeds.json")


@dataclass(frozen=True)
class SeedContext:
    """What a heuristic may look at: the dispatch as plain facts, and its space."""

    pipeline: str
    backend: str  # "llvm-cpu", "cuda", "rocm"
    arch: str
    kind: str  # "contraction", "convolution", "attention"
    shape: str  # Dispatch.shape_name
    space: SearchSpace


class Heuristic(Protocol):
    name: str

    def is_eligible(self, ctx: SeedContext) -> bool: ...

    def seed_configs(self, ctx: SeedContext) -> list[Mapping[str, Value]]: ...


class PreferenceHead:
    """The first `count` points of the pipeline's preference order (tuner.search.simple)."""

    name = "preference_head"

    def __init__(self, count: int = 3) -> None:
        self.count = count

    def is_eligible(self, ctx: SeedContext) -> bool:
        return bool(ctx.space.preference_names)

    def seed_configs(self, ctx: SeedContext) -> list[Mapping[str, Value]]:
        order = PreferenceSearch(ctx.space).propose(self.count)
        return [ctx.space.points[p.index] for p in order]


@dataclass(frozen=True)
class JsonSeed:
    """A config found by benchmarking, for dispatches it matches."""

    name: str
    pipeline: str
    backend: str
    knobs: Mapping[str, Value]
    found_on: str = ""  # the shape it was measured best on
    arch: str = ""
    kind: str = ""
    shape: str = ""  # only this shape ("": any)

    def is_eligible(self, ctx: SeedContext) -> bool:
        return (self.pipeline == ctx.pipeline and self.backend == ctx.backend
                and (not self.arch or self.arch == ctx.arch) and (not self.kind or self.kind == ctx.kind)
                and (not self.shape or self.shape == ctx.shape))

    def seed_configs(self, ctx: SeedContext) -> list[Mapping[str, Value]]:
        return [self.knobs]


HEURISTICS: list[Heuristic] = [PreferenceHead()]


def read_seed_file(path: Path) -> list[JsonSeed]:
    """JSON seed entries: a list of objects with name, pipeline, backend, knobs (and optionally
    arch, kind, shape, found_on)."""
    data = read_json(path, "seeds")
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a list of seed entries")
    out = []
    for i, e in enumerate(data):
        if not isinstance(e, dict) or not isinstance(e.get("knobs"), dict) or not all(
                isinstance(e.get(k), str) for k in ("name", "pipeline", "backend")):
            raise InputError(f"{path}: entry {i} needs name, pipeline, backend (strings) and knobs (an object)")
        if not all(isinstance(v, (int, bool)) for v in e["knobs"].values()):
            raise InputError(f"{path}: entry {i}: knob values must be integers or booleans")
        out.append(JsonSeed(e["name"], e["pipeline"], e["backend"], dict(e["knobs"]), e.get("found_on", ""),
                            e.get("arch", ""), e.get("kind", ""), e.get("shape", "")))
    return out


def collect_seeds(ctx: SeedContext, extra: Sequence[Heuristic] = (), exclude_found_on: Optional[str] = None,
                  builtin_file: bool = True) -> list[Seed]:
    """Every eligible heuristic's seeds, the user's (`extra`) first, then the JSON entries shipped
    here, then the Python heuristics; duplicates kept once (the first proposer named).
    `exclude_found_on`: leave out entries found on this shape (a replay of the shape they were
    found on would be told its answer)."""
    heuristics: list[Heuristic] = [*extra, *(read_seed_file(SEEDS_FILE) if builtin_file and SEEDS_FILE.exists() else []),
                                   *HEURISTICS]
    seen, out = set(), []
    for h in heuristics:
        if exclude_found_on and getattr(h, "found_on", "") == exclude_found_on:
            continue
        if not h.is_eligible(ctx):
            continue
        for knobs in h.seed_configs(ctx):
            key = json.dumps(dict(sorted(knobs.items())))
            if key not in seen:
                seen.add(key)
                out.append(Seed(dict(knobs), h.name))
    return out
