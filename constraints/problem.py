"""A constraint problem: knobs, hard constraints, and ordered soft preferences."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Union

import z3

from constraints.knobs import Knob


@dataclass(frozen=True)
class Preference:
    """A soft constraint: solutions that satisfy it are enumerated before those that do not."""

    name: str
    condition: z3.BoolRef


@dataclass
class Problem:
    """Knobs with domains, the constraints that make an assignment valid, and preferences.

    Preferences are listed most important first; enumeration satisfies all of them first,
    then relaxes them from the least important one.
    """

    knobs: list[Knob] = field(default_factory=list)
    constraints: list[z3.BoolRef] = field(default_factory=list)
    preferences: list[Preference] = field(default_factory=list)
    # Knobs whose values should vary early, most important first: within a preference tier,
    # enumeration steers each next solution to the least-used values of these knobs.
    diversity: tuple[str, ...] = ()

    def add_knob(self, knob: Knob) -> Knob:
        if any(k.name == knob.name for k in self.knobs):
            raise ValueError(f"duplicate knob {knob.name!r}")
        self.knobs.append(knob)
        self.constraints.append(knob.domain_constraint())
        return knob

    def require(self, *conditions: z3.BoolRef) -> None:
        self.constraints.extend(conditions)

    def prefer(self, name: str, condition: z3.BoolRef) -> None:
        self.preferences.append(Preference(name, condition))

    def diversify(self, *knob_names: str) -> None:
        for name in knob_names:
            self.knob(name)  # raises on a typo
        self.diversity = tuple(knob_names)

    def admits(self, assignment: Mapping[str, Union[int, bool]], timeout_ms: int = 5000) -> bool:
        """Whether this assignment of every knob satisfies the hard constraints."""
        solver = z3.Solver()
        solver.set("timeout", timeout_ms)
        solver.add(*self.constraints, *(k.var == assignment[k.name] for k in self.knobs))
        return solver.check() == z3.sat

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)
