"""Incremental enumeration of distinct solutions, most-preferred first, with bounded checks."""

from __future__ import annotations

import itertools
from typing import Iterator, Mapping, Union

import z3

from constraints.problem import Problem

Solution = Mapping[str, Union[int, bool]]


def _block(problem: Problem, model: z3.ModelRef) -> z3.BoolRef:
    """A clause that rules out exactly this assignment of the knobs."""
    return z3.Or([k.var != model.eval(k.var, model_completion=True) for k in problem.knobs])


def preference_tiers(n: int) -> Iterator[tuple[bool, ...]]:
    """Which preferences hold, in lexicographic order: all of them first; a more important
    preference (earlier in the list) outweighs every less important one together."""
    return itertools.product((True, False), repeat=n)


def enumerate_solutions(
    problem: Problem, limit: int, check_timeout_ms: int = 5000
) -> Iterator[dict[str, Union[int, bool]]]:
    """Yield up to `limit` distinct valid assignments of the problem's knobs.

    Solutions come tier by tier (see `preference_tiers`). Each solver call is bounded by
    `check_timeout_ms`; a call that times out ends its tier, so the result may miss some
    solutions but never holds an invalid one. The work is incremental: the caller's limit, or
    stopping the iteration, stops the solver.
    """
    if limit <= 0:
        return
    solver = z3.Solver()
    solver.set("timeout", check_timeout_ms)
    solver.add(*problem.constraints)
    prefs = [p.condition for p in problem.preferences]
    produced = 0
    diverse = [problem.knob(name).var for name in problem.diversity]
    for tier in preference_tiers(len(prefs)):
        tier_conditions = [c if keep else z3.Not(c) for c, keep in zip(prefs, tier)]
        seen: list[z3.BoolRef] = []  # combinations of the diversity knobs given in this tier
        while True:
            model = None
            # First a solution with a new combination of the diversity knobs, then any.
            for extra in ([z3.Not(z3.Or(seen))] if seen else [], []):
                solver.push()
                solver.add(*tier_conditions, *extra)
                if solver.check() == z3.sat:
                    model = solver.model()
                solver.pop()
                if model is not None or not seen:
                    break
            if model is None:
                break
            if diverse:
                seen.append(z3.And([v == model.eval(v, model_completion=True) for v in diverse]))
            yield {k.name: k.value(model) for k in problem.knobs}
            produced += 1
            if produced >= limit:
                return
            # The blocking clause lives outside the tier's scope, so no later tier repeats it.
            solver.add(_block(problem, model))
