"""A search over a live dispatch: its space from the pipeline's problem, its plan (the space,
seeds and search), and what a batch of proposals becomes (candidates, then the outcomes the
search is told: each one's paired first-pass figure against the baseline). tuner.search.task runs the
loop over them."""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Callable, Mapping, Optional, Sequence

from iree.compiler import ir

from constraints import enumerate_solutions
from constraints.fast_enumerate import Unsupported, compile_check, enumerate_space
from pipelines import Dispatch, Pipeline
from tuner.specs.candidates import Candidate, candidate_for, default_identity
from tuner.specs.transform import Pinned
from tuner.core.results import Result, Status
from tuner.search import Outcome, Proposal, SearchSpace, knob_features
from tuner.search.heuristics import SeedContext
from tuner.search.space import MAX_POINTS, Value
from tuner.core.settings import SearchSettings
from tuner.search.base import Search

# Where a problem uses a term the fast enumeration cannot compile, this many solver solutions
# (in preference order) stand for the space.
SOLVER_FALLBACK = 2000


def build_space(dispatch: Dispatch, pipeline: Pipeline, seed: int = 0, without_flags: bool = False) -> SearchSpace:
    """Every valid config of the pipeline's problem for the dispatch (a uniform seeded sample of
    MAX_POINTS where there are more), with features: each knob's, and the pipeline's own
    (`features(dispatch, knobs)`, where it has them). `without_flags`: leave out the configs
    that set a model-wide flag (the pipeline's `flag_knobs`), which tune-model decides."""
    problem, complete = None, True
    own = pipeline.space_points(dispatch)  # a source with a space of its own (--constraints compiler)
    if own is not None:
        points, complete = own
    else:
        problem = pipeline.build_problem(dispatch)
        try:
            points = list(enumerate_space(problem))
        except Unsupported:
            points = list(enumerate_solutions(problem, SOLVER_FALLBACK))
            complete = len(points) < SOLVER_FALLBACK
    if pipeline.filters_configs:  # --constraints both: the compiler's say on each
        points = [p for p in points if pipeline.admits(dispatch, p)]
    if without_flags:
        points = [p for p in points if not any(p.get(k) for k in pipeline.flag_knobs)]
    size = len(points)
    if len(points) > MAX_POINTS:
        points = random.Random(seed).sample(points, MAX_POINTS)
        complete = False
    order = [k.name for k in problem.knobs] if problem else []
    names = {n: f"v[{i}]" for i, n in enumerate(order)}

    def check_of(condition) -> Callable[[Mapping[str, Value]], bool]:
        check = compile_check(condition, names)
        return lambda knobs: check([knobs[n] for n in order])

    return SearchSpace.of(points, lambda k: {**knob_features(k), **pipeline.features(dispatch, k)},
                          [(p.name, check_of(p.condition)) for p in problem.preferences] if problem else [],
                          problem.diversity if problem else (), complete, size)


def seed_context(dispatch: Dispatch, pipeline: Pipeline, space: SearchSpace) -> SeedContext:
    return SeedContext(pipeline.name, dispatch.target.backend, dispatch.target.arch, dispatch.kind.value,
                       dispatch.shape_name, space)


def add_candidates(batch: Sequence[Proposal], space: SearchSpace, dispatch: Dispatch, pipeline: Pipeline,
                   ctx: ir.Context, spec_entry: str, candidates: list[Candidate],
                   pinned: Pinned = ()) -> list[tuple[Proposal, Optional[Candidate]]]:
    """Each proposal's candidate, appended to `candidates` (ids in order); None for a config
    that is the compiler's own (the baseline again: nothing to build). Each spec carries the
    `pinned` configs too (Target.pinned)."""
    default = default_identity(dispatch)
    made: list[tuple[Proposal, Optional[Candidate]]] = []
    for p in batch:
        c = candidate_for(len(candidates), dispatch, pipeline, space.points[p.index], ctx, spec_entry, pinned)
        if c.identity == default:
            made.append((p, None))
            continue
        candidates.append(c)
        made.append((p, c))
    return made


def note_proposers(made: list[tuple[Proposal, Optional[Candidate]]], proposed_by: dict[int, str]) -> None:
    """Who proposed each candidate made, by its id."""
    proposed_by.update({c.id: p.source for p, c in made if c is not None})


def outcomes(made: list[tuple[Proposal, Optional[Candidate]]], results: Mapping[int, Result]) -> list[Outcome]:
    """What the search is told of each proposal: the first-pass figure of its result (a duplicate
    scores as the candidate that built the same executable; the compiler's own config, 1.0)."""
    by_hash = {r.binary_hash: r for r in results.values() if r.ok and r.binary_hash}
    out = []
    for _, c in made:
        if c is None:
            out.append(Outcome(1.0, "default"))
            continue
        r = own = results[c.id]
        if r.status == Status.DUPLICATE and r.binary_hash in by_hash:
            r = by_hash[r.binary_hash]
        out.append(Outcome(r.first_pass_speedup if r.ok else None, own.status.value))
    return out


@dataclass
class SearchPlan:
    """A search set up for one dispatch: its space, seeds and search, under the settings."""

    settings: SearchSettings
    space: SearchSpace
    search: Search
    seeds: list
    proposed_by: dict[int, str] = field(default_factory=dict)  # candidate id -> who proposed it
    steps: list = field(default_factory=list)  # tuner.search.loop.Step, in order
    warm_started: Optional[dict] = None  # learning across runs: the prior it started from (points, dispatches)
    # The user's --seeds entries for another pipeline, target, kind or shape: not used (said).
    ignored_seeds: list = field(default_factory=list)

    def summary(self, candidates: Sequence[Candidate] = ()) -> dict:
        """What results.json and the CLI say of the search."""
        by: dict[str, int] = {}
        for s in self.seeds:
            by[s.source] = by.get(s.source, 0) + 1
        return {
            "search": self.settings.name, "budget": self.settings.budget, "time_budget_s": self.settings.seconds,
            "seed": self.settings.seed, "batch_size": self.settings.batch_size,
            "space": len(self.space), "space_complete": self.space.complete, "space_size": self.space.size,
            "seeds": by, "dropped_seeds": [s.source for s in self.search.dropped_seeds],
            "ignored_seeds": list(self.ignored_seeds),
            "evaluations": len(self.steps),  # measured and told to the search (rounds: before this one)
            "proposed_by": {str(c.id): self.proposed_by.get(c.id, "") for c in candidates if not c.is_baseline},
            "warm_started_from": self.warm_started,
        }


def plan_search(dispatch: Dispatch, pipeline: Pipeline, settings: SearchSettings,
                without_flags: bool = False) -> SearchPlan:
    """The space, the heuristics' seeds (a user's seed file first) and the search, for a dispatch
    (`without_flags`: see build_space)."""
    from tuner.search import make_search
    from tuner.search.heuristics import collect_seeds, read_seed_file

    space = build_space(dispatch, pipeline, settings.seed, without_flags)
    extra = [replace(e, name=f"user:{e.name}") for e in read_seed_file(settings.seeds_file)] \
        if settings.seeds_file else []
    context = seed_context(dispatch, pipeline, space)
    seeds = collect_seeds(context, extra=extra)
    ignored = [f"{e.name} (for {e.pipeline} on {e.backend}" + "".join(f", {v}" for v in (e.arch, e.kind, e.shape) if v)
               + ")" for e in extra if not e.is_eligible(context)]
    return SearchPlan(settings, space, make_search(settings.name, space, settings.seed, seeds), seeds,
                      ignored_seeds=ignored)
