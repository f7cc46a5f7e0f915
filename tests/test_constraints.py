"""The IREE-free constraint library: knobs, tiling helpers, ordered incremental enumeration."""

import subprocess
import sys

import pytest
import z3

from constraints import BoolKnob, IntKnob, Problem, enumerate_solutions, tiling


def test_constraints_never_import_iree():
    # Another compiler must be able to reuse constraints/ with only z3 installed.
    code = "import sys, constraints; print(any(m.startswith('iree') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_divisors_and_tile_candidates():
    assert tiling.divisors(12) == [1, 2, 3, 4, 6, 12]
    assert tiling.powers_of_two(3, 40) == [4, 8, 16, 32]
    # Unaligned extent: powers of two join the divisors, multiples filter.
    assert tiling.tile_candidates(1000, 8, 64, multiple_of=8) == [8, 16, 32, 40, 64]
    assert tiling.tile_candidates(7, 8, 64) == [7]


def _tile_problem() -> Problem:
    p = Problem()
    t = p.add_knob(IntKnob.of("tile", [1, 2, 4, 8, 16, 32]))
    v = p.add_knob(IntKnob.of("vec", [1, 2, 4, 8]))
    p.require(tiling.divides(v.var, t.var), tiling.within(t.var * v.var, 64))
    return p


def test_problem_is_sat_then_unsat_after_a_violating_constraint():
    p = _tile_problem()
    s = z3.Solver()
    s.add(*p.constraints)
    assert s.check() == z3.sat
    s.add(p.knob("tile").var * p.knob("vec").var > 64)  # violates the budget
    assert s.check() == z3.unsat


def test_enumeration_is_distinct_valid_and_complete():
    p = _tile_problem()
    sols = list(enumerate_solutions(p, limit=1000))
    pairs = {(s["tile"], s["vec"]) for s in sols}
    assert len(pairs) == len(sols)
    expected = {(t, v) for t in [1, 2, 4, 8, 16, 32] for v in [1, 2, 4, 8] if t % v == 0 and t * v <= 64}
    assert pairs == expected


def test_limit_stops_enumeration():
    assert len(list(enumerate_solutions(_tile_problem(), limit=3))) == 3
    assert list(enumerate_solutions(_tile_problem(), limit=0)) == []


def test_preferences_order_solutions_lexicographically():
    p = _tile_problem()
    p.prefer("big_tile", p.knob("tile").var >= 16)
    p.prefer("vec_4", p.knob("vec").var == 4)
    sols = list(enumerate_solutions(p, limit=1000))
    score = [(s["tile"] >= 16, s["vec"] == 4) for s in sols]
    # Non-increasing in lexicographic order: all (T,T) first, then (T,F), (F,T), (F,F).
    assert score == sorted(score, reverse=True)
    assert score[0] == (True, True)


def test_diversity_shows_new_combinations_first():
    p = _tile_problem()
    p.diversify("vec")
    first = [s["vec"] for s in enumerate_solutions(p, limit=4)]
    assert sorted(first) == [1, 2, 4, 8]


def test_bool_knob_and_duplicate_names():
    p = Problem()
    flag = p.add_knob(BoolKnob("flag"))
    p.require(flag.var)
    assert [s["flag"] for s in enumerate_solutions(p, 10)] == [True]
    with pytest.raises(ValueError):
        p.add_knob(BoolKnob("flag"))
    with pytest.raises(ValueError):
        IntKnob.of("empty", [])


def test_problem_admits_only_assignments_that_meet_the_constraints():
    p = Problem()
    a = p.add_knob(IntKnob.of("a", [1, 2, 4, 8]))
    flag = p.add_knob(BoolKnob("flag"))
    p.require(z3.Implies(flag.var, a.var >= 4))
    assert p.admits({"a": 8, "flag": True})
    assert p.admits({"a": 2, "flag": False})
    assert not p.admits({"a": 2, "flag": True})
    assert not p.admits({"a": 3, "flag": False})  # outside the domain


def test_enumeration_gives_the_same_solutions_every_time_in_one_process():
    # Z3's search depends on the order terms were created in its context; enumerating in a shared
    # context once gave another list each call, so a rerun could not find its stored results.
    from constraints import enumerate_solutions
    from pipelines import pipeline_for
    from tests.conftest import synthetic_cpu_dispatch

    dispatch = synthetic_cpu_dispatch(128, 256, 64)
    pipeline = pipeline_for(dispatch)
    lists = [list(enumerate_solutions(pipeline.build_problem(dispatch), 6)) for _ in range(3)]
    assert len(lists[0]) == 6 and lists[0] == lists[1] == lists[2]


def _every_operator_problem() -> Problem:
    """Knobs and constraints using every term the fast enumerator compiles: + - * / % ==, <,
    <=, >, >=, And, Or, Not, Implies, If, Distinct, a bool knob, a negative value."""
    p = Problem()
    a = p.add_knob(IntKnob.of("a", [-3, 1, 2, 3, 4, 6, 8])).var
    b = p.add_knob(IntKnob.of("b", [1, 2, 3, 4, 5])).var
    c = p.add_knob(IntKnob.of("c", [0, 1, 2, 7])).var
    flag = p.add_knob(BoolKnob("flag")).var
    p.require(
        z3.Or(a % b == 0, (a - c) / b > 1),
        z3.Implies(flag, z3.And(a * b <= 12, z3.Not(c == 7))),
        z3.If(c >= 2, -a < 0, a + c != 4),
        z3.Or(z3.Distinct(a, b, c) == z3.Not(flag), b < 3),
    )
    return p


def test_the_fast_space_is_exactly_the_solvers_space():
    from constraints.fast_enumerate import enumerate_space

    p = _every_operator_problem()
    fast = [tuple(sorted(s.items())) for s in enumerate_space(p)]
    solver = {tuple(sorted(s.items())) for s in enumerate_solutions(p, 10_000)}
    assert len(fast) == len(set(fast)) and set(fast) == solver and solver
    # One more constraint that rules every assignment out empties it.
    p.require(p.knob("a").var > 100)
    assert list(enumerate_space(p)) == []


def test_the_fast_space_refuses_terms_it_cannot_compile():
    from constraints.fast_enumerate import Unsupported, enumerate_space

    p = _tile_problem()
    p.require(z3.Int("not_a_knob") == 1)
    with pytest.raises(Unsupported):
        list(enumerate_space(p))
