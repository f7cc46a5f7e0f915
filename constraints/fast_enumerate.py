"""The whole valid space of a problem, fast: every assignment of the knobs' finite domains that
satisfies the hard constraints, by backtracking over the knobs with each constraint compiled once
from its Z3 term into a Python function and checked as soon as every knob it reads is assigned.

No solver call per solution (the incremental enumerator makes one, with blocking clauses and
preference tiers, at 18-40 solutions a second); order is left to whoever searches the space.
A constraint whose terms this compiler does not know raises `Unsupported`: the caller falls back
to `enumerate_solutions`. Integer division and remainder follow Z3 (Euclidean), so each
solution is valid by the Z3 problem itself (tests check a sample with `Problem.admits`)."""

from __future__ import annotations

from typing import Callable, Iterator, Optional, Union

import z3

from constraints.knobs import BoolKnob
from constraints.problem import Problem

Value = Union[int, bool]


class Unsupported(Exception):
    """A term the compiler cannot turn into Python."""


def _ediv(a: int, b: int) -> int:
    """Z3's integer division: a = b*q + r with 0 <= r < |b| (Euclidean). x/0 is unspecified in
    Z3, so a constraint dividing by zero counts as failing."""
    if b == 0:
        raise ZeroDivisionError
    return (a - a % abs(b)) // b


def _emod(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError
    return a % abs(b)


_NARY = {z3.Z3_OP_ADD: " + ", z3.Z3_OP_MUL: " * ", z3.Z3_OP_AND: " and ", z3.Z3_OP_OR: " or "}
_BINARY = {z3.Z3_OP_SUB: " - ", z3.Z3_OP_LE: " <= ", z3.Z3_OP_LT: " < ", z3.Z3_OP_GE: " >= ",
           z3.Z3_OP_GT: " > ", z3.Z3_OP_EQ: " == "}


def _source(e: z3.ExprRef, names: dict[str, str]) -> str:
    """Python source computing `e` from the knob variables (named by `names`)."""
    if z3.is_int_value(e):
        return str(e.as_long())
    if z3.is_true(e):
        return "True"
    if z3.is_false(e):
        return "False"
    if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
        name = e.decl().name()
        if name not in names:
            raise Unsupported(f"{name} is not a knob")
        return names[name]
    kind = e.decl().kind()
    args = [_source(a, names) for a in e.children()]
    if kind in _NARY:
        return "(" + _NARY[kind].join(args) + ")"
    if kind in _BINARY and len(args) == 2:
        return f"({args[0]}{_BINARY[kind]}{args[1]})"
    if kind == z3.Z3_OP_UMINUS:
        return f"(-{args[0]})"
    if kind == z3.Z3_OP_NOT:
        return f"(not {args[0]})"
    if kind == z3.Z3_OP_IMPLIES:
        return f"((not {args[0]}) or {args[1]})"
    if kind == z3.Z3_OP_ITE:
        return f"({args[1]} if {args[0]} else {args[2]})"
    if kind == z3.Z3_OP_IDIV:
        return f"_ediv({args[0]}, {args[1]})"
    if kind == z3.Z3_OP_MOD:
        return f"_emod({args[0]}, {args[1]})"
    if kind == z3.Z3_OP_DISTINCT:
        return f"(len({{{', '.join(args)}}}) == {len(args)})"
    raise Unsupported(f"Z3 operator {e.decl().name()} in {e}")


def _knobs_in(e: z3.ExprRef) -> set[str]:
    found: set[str] = set()
    todo = [e]
    while todo:
        t = todo.pop()
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            found.add(t.decl().name())
        todo.extend(t.children())
    return found


def compile_check(e: z3.ExprRef, names: dict[str, str]) -> Callable[[list], bool]:
    """`e` as a Python function of the list of knob values (knob i is `v[i]`)."""
    source = _source(e, names)
    fn = eval(f"lambda v: {source}", {"_ediv": _ediv, "_emod": _emod})  # noqa: S307 (our own terms)

    def check(values: list) -> bool:
        try:
            return bool(fn(values))
        except ZeroDivisionError:
            return False

    return check


def enumerate_space(problem: Problem, limit: Optional[int] = None) -> Iterator[dict[str, Value]]:
    """Every valid assignment (up to `limit`), in the knobs' domain order. Raises Unsupported
    (before yielding anything) when a constraint cannot be compiled."""
    knobs = list(problem.knobs)
    index = {k.name: i for i, k in enumerate(knobs)}
    names = {k.name: f"v[{i}]" for i, k in enumerate(knobs)}
    domains = [(False, True) if isinstance(k, BoolKnob) else k.domain for k in knobs]
    # Each constraint is checked at the deepest knob it reads (domain constraints hold by
    # construction: values come from the domains).
    checks: list[list[Callable[[list], bool]]] = [[] for _ in knobs]
    always: list[Callable[[list], bool]] = []
    for c in problem.constraints:
        used = _knobs_in(c)
        unknown = used - set(index)
        if unknown:
            raise Unsupported(f"constraint reads {sorted(unknown)}, which are not knobs")
        fn = compile_check(c, names)
        if used:
            checks[max(index[n] for n in used)].append(fn)
        else:
            always.append(fn)
    if not all(f([]) for f in always):
        return
    values: list = [None] * len(knobs)
    produced = 0

    def assign(depth: int) -> Iterator[dict[str, Value]]:
        nonlocal produced
        for v in domains[depth]:
            values[depth] = v
            if all(f(values) for f in checks[depth]):
                if depth + 1 == len(knobs):
                    yield {k.name: values[i] for i, k in enumerate(knobs)}
                    produced += 1
                    if limit is not None and produced >= limit:
                        return
                else:
                    yield from assign(depth + 1)
                    if limit is not None and produced >= limit:
                        return

    if knobs:
        yield from assign(0)
