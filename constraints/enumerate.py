"""Incremental enumeration of distinct solutions, most-preferred first, with bounded checks."""

from __future__ import annotations

import itertools
from typing import Iterator, Mapping, Union

import z3

from constraints.problem import Problem

Solution = Mapping[str, Union[int, bool]]


def _block(variables: dict[str, z3.ExprRef], model: z3.ModelRef) -> z3.BoolRef:
    """A clause that rules out exactly this assignment of the knobs."""
    return z3.Or([v != model.eval(v, model_completion=True) for v in variables.values()])


def _value(variable: z3.ExprRef, model: z3.ModelRef) -> Union[int, bool]:
    value = model.eval(variable, model_completion=True)
    return z3.is_true(value) if z3.is_bool(variable) else value.as_long()


def preference_tiers(n: int) -> Iterator[tuple[bool, ...]]:
    """Which preferences hold, in lexicographic order: all of them first; a more important
    preference (earlier in the list) outweighs every less important one together."""
    return itertools.product((True, False), repeat=n)


def _balanced(solver: z3.Solver, base: list[z3.BoolRef], problem: Problem, variables: dict[str, z3.ExprRef],
              counts: dict[str, dict]) -> list[z3.BoolRef]:
    """Extra conditions that steer the next solution toward the least-used values of each
    diversity knob, in the problem's order, as far as the tier allows."""
    chosen: list[z3.BoolRef] = []
    for name in problem.diversity:
        knob = problem.knob(name)
        used = counts[name]
        values = list(getattr(knob, "domain", (True, False)))
        for threshold in sorted({used.get(v, 0) for v in values})[:-1] or []:
            allowed = [v for v in values if used.get(v, 0) <= threshold]
            condition = z3.Or([variables[name] == v for v in allowed])
            solver.push()
            solver.add(*base, *chosen, condition)
            feasible = solver.check() == z3.sat
            solver.pop()
            if feasible:
                chosen.append(condition)
                break
    return chosen


def enumerate_solutions(
    problem: Problem, limit: int, check_timeout_ms: int = 5000
) -> Iterator[dict[str, Union[int, bool]]]:
    """Yield up to `limit` distinct valid assignments of the problem's knobs.

    Solutions come tier by tier (see `preference_tiers`). Within a tier, each diversity knob
    (`Problem.diversify`) cycles through its values: the next solution takes, where the tier
    allows, a value used least so far. Each solver call is bounded by `check_timeout_ms`; a call
    that times out ends its tier, so the result may miss some solutions but never holds an
    invalid one. The work is incremental: the caller's limit, or stopping the iteration, stops
    the solver.
    """
    if limit <= 0:
        return
    # A context of its own: Z3's search depends on the order terms were created in its context,
    # so enumerating in the shared one gave another list of candidates each time in one process.
    # Here, the same problem always gives the same solutions in the same order.
    context = z3.Context()
    solver = z3.Solver(ctx=context)
    solver.set("timeout", check_timeout_ms)
    solver.add(*(c.translate(context) for c in problem.constraints))
    prefs = [p.condition.translate(context) for p in problem.preferences]
    variables = {k.name: k.var.translate(context) for k in problem.knobs}
    produced = 0
    for tier in preference_tiers(len(prefs)):
        tier_conditions = [c if keep else z3.Not(c) for c, keep in zip(prefs, tier)]
        counts: dict[str, dict] = {name: {} for name in problem.diversity}
        while True:
            steer = _balanced(solver, tier_conditions, problem, variables, counts)
            solver.push()
            solver.add(*tier_conditions, *steer)
            model = solver.model() if solver.check() == z3.sat else None
            solver.pop()
            if model is None:
                break
            solution = {name: _value(v, model) for name, v in variables.items()}
            yield solution
            produced += 1
            if produced >= limit:
                return
            for name in problem.diversity:
                counts[name][solution[name]] = counts[name].get(solution[name], 0) + 1
            # The blocking clause lives outside the tier's scope, so no later tier repeats it.
            solver.add(_block(variables, model))
