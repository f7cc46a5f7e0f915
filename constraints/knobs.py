"""Knobs: named search dimensions that own their domain and their Z3 variable."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence, Union

import z3


@dataclass(frozen=True)
class IntKnob:
    """An integer knob whose value is one of `domain` (listed in the order of preference)."""

    name: str
    domain: tuple[int, ...]
    var: z3.ArithRef = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.domain:
            raise ValueError(f"knob {self.name!r} has an empty domain")
        object.__setattr__(self, "var", z3.Int(self.name))

    @classmethod
    def of(cls, name: str, domain: Sequence[int]) -> "IntKnob":
        # Keep the caller's order (it is the preference order) but drop repeats.
        return cls(name, tuple(dict.fromkeys(int(v) for v in domain)))

    def domain_constraint(self) -> z3.BoolRef:
        return z3.Or([self.var == v for v in self.domain])

    def value(self, model: z3.ModelRef) -> int:
        return model.eval(self.var, model_completion=True).as_long()


@dataclass(frozen=True)
class BoolKnob:
    """A yes/no knob, such as a compiler flag that is on or off."""

    name: str
    var: z3.BoolRef = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "var", z3.Bool(self.name))

    def domain_constraint(self) -> z3.BoolRef:
        return z3.BoolVal(True)

    def value(self, model: z3.ModelRef) -> bool:
        return z3.is_true(model.eval(self.var, model_completion=True))


Knob = Union[IntKnob, BoolKnob]
