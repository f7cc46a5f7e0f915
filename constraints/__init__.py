"""Reusable Z3 building blocks for tiling problems; imports z3 and the standard library only."""

from constraints.knobs import IntKnob, BoolKnob, Knob
from constraints.problem import Problem, Preference
from constraints.enumerate import enumerate_solutions, Solution
from constraints import tiling

__all__ = [
    "IntKnob",
    "BoolKnob",
    "Knob",
    "Problem",
    "Preference",
    "Solution",
    "enumerate_solutions",
    "tiling",
]
