"""Searches over a dispatch's valid space: a search proposes batches, sees their scores and
proposes more within a budget (tuner.search.loop). The searches themselves (base, loop, simple,
model, space, replay) are plain Python, numpy and scikit-learn, with no compiler, so they also
run in replay against recorded spaces (tuner.search.replay); live.py joins them to a
dispatch's candidates, and task.py (the TuneTask) runs the loop over those, measured by an
evaluator or answered from the store: both import the compiler's bindings."""

from __future__ import annotations

from typing import Sequence

from tuner.errors import InputError
from tuner.core.settings import DEFAULT_SEARCH
from tuner.search.base import Proposal, Search, Seed
from tuner.search.loop import Budget, Outcome, Step, evaluations_to_reach, run_search
from tuner.search.model import ModelSearch
from tuner.search.simple import Exhaustive, PreferenceSearch, RandomSearch
from tuner.search.space import SearchSpace, knob_features, point_key

SEARCHES: dict[str, type[Search]] = {s.name: s for s in (Exhaustive, RandomSearch, PreferenceSearch, ModelSearch)}


def make_search(name: str, space: SearchSpace, seed: int = 0, seeds: Sequence[Seed] = ()) -> Search:
    if name not in SEARCHES:
        raise InputError(f"unknown search {name!r}; choose one of {', '.join(SEARCHES)}")
    return SEARCHES[name](space, seed=seed, seeds=seeds)


__all__ = ["Budget", "DEFAULT_SEARCH", "Outcome", "Proposal", "SEARCHES", "Search", "SearchSpace", "Seed", "Step",
           "evaluations_to_reach", "knob_features", "make_search", "point_key", "run_search"]
