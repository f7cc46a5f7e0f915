"""The compiler's own constraints: the `iree_codegen.smt.constraints` ops IREE emits for a root op
(`--iree-codegen-emit-pipeline-constraints`; GPU TileAndFuse and VectorDistribute, none for
llvm-cpu), read through the bindings, turned into Z3 with the compiler's own SMT-LIB export
(`iree_codegen.convert_constraints_op_to_smtlib`), solved, and turned into a compilation_info
with the compiler's materializer (`iree_codegen.materialize_compilation_info`).

Each `iree_codegen.smt.assert` carries a message ("wg_0 must be divisible by sg_0 ({} % {} == 0)");
the SMT-LIB export keeps the assertions in the op's order, so an assertion that fails for a
config is reported with its message and the values of the knobs it reads."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Mapping, Optional

import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from constraints.fast_enumerate import Unsupported, compile_check
from pipelines import Config
from tuner.discovery.program import enclosing_op, configure, pipeline_id
from tuner.discovery.entry import walk_ops
from tuner.errors import InputError
from tuner.targets import Target

EMIT_FLAG = "--iree-codegen-emit-pipeline-constraints"
CONSTRAINTS_OP = "iree_codegen.smt.constraints"


@dataclass
class EmittedProblem:
    """One emitted constraints op: the dispatch it belongs to, its pipeline, its knobs (in the
    op's order) and its assertions with their messages."""

    dispatch: str  # the dispatch function's symbol
    pipeline_id: str  # "iree_gpu.TileAndFuse"
    op: ir.Operation  # kept for the materializer (its module stays alive with it)
    knobs: tuple[str, ...]
    assertions: list[z3.BoolRef]
    messages: list[str]  # one per assertion, "" where they could not be paired
    variables: dict[str, z3.ArithRef] = field(default_factory=dict)
    # Variables the assertions that read no knob pin to one value (the problem's dims).
    fixed: dict[str, int] = field(default_factory=dict)
    _checks: Optional[list] = field(default=None, repr=False)
    _indices: Optional[dict] = field(default=None, repr=False)
    timed_out: bool = False  # the last `solutions` stopped at its time limit
    _read: Optional[list] = field(default=None, repr=False)

    def violations(self, assignment: Mapping[str, int]) -> list[str]:
        """The messages of the assertions a knob assignment breaks (empty: the compiler's
        constraints admit it; a knob left out may take any value), each with the values of the
        knobs it reads. An assertion breaks alone when, with the knobs' values put in, it is false
        (checked in Python where it reads knobs only) or no value of the derived variables (counts
        such as `sg_m_cnt`) satisfies it; where none breaks alone but all of them together do,
        the ones Z3 finds in conflict (a minimal unsat core) are reported as one, "together: A; B"."""
        knobs = {k: z3.IntVal(int(v)) for k, v in assignment.items() if k in self.variables}
        subst = [(self.variables[k], v) for k, v in knobs.items()]
        subst += [(self.variables[k], z3.IntVal(v)) for k, v in self.fixed.items() if k not in knobs]
        reads = self._reads()
        if self._admits(assignment, subst):
            return []
        values = [int(assignment[k]) if k in assignment else None for k in self.names()]
        failing = [i for i, (check, read) in enumerate(zip(self._compiled(), reads))
                   if check is not None and read <= assignment.keys() and not check(values)]

        def say(i: int) -> str:
            used = sorted(reads[i] & assignment.keys())
            shown = ", ".join(f"{k}={assignment[k]}" for k in used)
            return (self.messages[i] or self.assertions[i].sexpr()) + (f" [{shown}]" if shown else "")

        if failing:  # found in Python: no solver needed
            return [say(i) for i in failing]
        # What every config must meet whatever its knobs: assertions on the pinned dims alone.
        context = [a for a in self.assertions if {str(v) for v in z3.z3util.get_vars(a)} <= self.fixed.keys()]
        terms = [z3.simplify(z3.substitute(a, *subst)) for a in self.assertions]
        broken = [say(i) for i, term in enumerate(terms)
                  if reads[i] & assignment.keys() and not z3.is_true(term) and (z3.is_false(term) or _unsat(*context, term))]
        if broken:
            return broken
        solver = z3.Solver()
        solver.set("core.minimize", True)
        for i, term in enumerate(terms):
            solver.assert_and_track(term, f"a{i}")
        if solver.check() != z3.unsat:
            return []
        core = sorted(int(str(t)[1:]) for t in solver.unsat_core())
        return ["together: " + "; ".join(say(i) for i in core)]

    def admits(self, assignment: Mapping[str, int]) -> bool:
        """Whether the compiler's constraints admit the assignment (knobs left out: any value)."""
        subst = [(self.variables[k], z3.IntVal(int(v))) for k, v in assignment.items() if k in self.variables]
        subst += [(self.variables[k], z3.IntVal(v)) for k, v in self.fixed.items() if k not in assignment]
        return self._admits(assignment, subst)

    def completed(self, assignment: Mapping[str, int]) -> dict[str, int]:
        """The assignment with the knobs it leaves out given values the constraints admit (for
        the materializer, which needs every knob)."""
        missing = [k for k in self.knobs if k not in assignment]
        if not missing:
            return dict(assignment)
        solver = z3.Solver()
        solver.add(*self.assertions, *(self.variables[k] == int(v) for k, v in assignment.items() if k in self.variables))
        if solver.check() != z3.sat:
            raise ValueError(f"the compiler's constraints admit no completion of {dict(assignment)}")
        model = solver.model()
        return {**assignment, **{k: model.eval(self.variables[k], model_completion=True).as_long() for k in missing}}

    def _reads(self) -> list[set[str]]:
        """Per assertion, the variables it reads (knobs and derived ones; not the pinned dims)."""
        if self._read is None:
            self._read = [{str(v) for v in z3.z3util.get_vars(a)} - self.fixed.keys() for a in self.assertions]
        return self._read

    def _compiled(self) -> list[Optional[Callable[[list], bool]]]:
        """Per assertion, a Python check over the values of the problem's variables (`names()`
        order; the dims put in), or None where a term cannot be compiled."""
        if self._checks is None:
            names = {k: f"v[{i}]" for i, k in enumerate(self.names())}
            fixed = [(self.variables[k], z3.IntVal(v)) for k, v in self.fixed.items()]
            self._checks = []
            for a in self.assertions:
                try:
                    self._checks.append(compile_check(z3.substitute(a, *fixed) if fixed else a, names))
                except Unsupported:
                    self._checks.append(None)
        return self._checks

    def names(self) -> list[str]:
        """The variables an assignment may give: the knobs, then derived ones (the compiler's
        subgroup counts `sg_m_cnt`, ...) that a mapping may know; not the pinned dims."""
        return [*self.knobs, *sorted(k for k in self.variables if k not in self.knobs and k not in self.fixed)]

    def _admits(self, assignment: Mapping[str, int], subst: list) -> bool:
        """Whether every assertion holds: in Python those whose variables are all assigned, the
        rest in one solver call."""
        values = [int(assignment[k]) if k in assignment else None for k in self.names()]
        rest = []
        for check, a, read in zip(self._compiled(), self.assertions, self._reads()):
            if check is not None and read <= assignment.keys():
                if not check(values):
                    return False
            else:
                rest.append(z3.substitute(a, *subst) if subst else a)
        return not rest or not _unsat(*rest)

    def solutions(self, limit: Optional[int] = None, seconds: Optional[float] = None) -> Iterator[dict[str, int]]:
        """Knob assignments that satisfy every assertion, one solver call each with a clause
        blocking the previous ones; up to `limit` of them or `seconds` of solving."""
        solver = z3.Solver()
        solver.add(*self.assertions)
        variables = [self.variables[k] for k in self.knobs if k in self.variables]
        start, found = time.perf_counter(), 0
        self.timed_out = False
        while limit is None or found < limit:
            if seconds is not None and time.perf_counter() - start > seconds:
                self.timed_out = True
                return
            if solver.check() != z3.sat:
                return
            model = solver.model()
            values = {str(v): model.eval(v, model_completion=True).as_long() for v in variables}
            yield values
            found += 1
            solver.add(z3.Or([v != values[str(v)] for v in variables]))

    def intrinsics(self) -> list[tuple[int, int, int, str, str, str]]:
        """Per value of the `mma_idx` knob, the intrinsic's M, N, K and A, B, C element types,
        read typed from what the materializer builds with that index."""
        lookups = walk_ops(self.op, ("iree_codegen.smt.lookup",))
        if "mma_idx" not in self.knobs or not lookups:
            return []
        with self.op.context:
            count = len(list(ir.DenseI64ArrayAttr(lookups[0].attributes["keys"])))
            out = []
            for i in range(count):
                info = iree_codegen.CompilationInfoAttr(self.materialize({k: (i if k == "mma_idx" else 1) for k in self.knobs}))
                mma = iree_gpu.MMAAttr(iree_gpu.LoweringConfigAttr(info.lowering_config).attributes["mma_kind"])
                out.append((*mma.mnk_shape, *(str(t) for t in mma.abc_element_types)))
        return out

    def intrinsic_indices(self) -> dict[tuple, int]:
        """(M, N, K, A, B, C) of each intrinsic -> its `mma_idx`."""
        if self._indices is None:
            self._indices = {shape: i for i, shape in enumerate(self.intrinsics())}
        return self._indices

    def materialize(self, assignment: Mapping[str, int]) -> ir.Attribute:
        """The compilation_info the compiler builds from these knob values."""
        with self.op.context:
            return iree_codegen.materialize_compilation_info(
                self.op, {k: int(v) for k, v in assignment.items() if k in self.knobs})


def _unsat(*terms: z3.BoolRef) -> bool:
    solver = z3.Solver()
    solver.add(*terms)
    return solver.check() == z3.unsat


def read_problem(op: ir.Operation) -> EmittedProblem:
    """An emitted constraints op as a Z3 problem (the compiler's SMT-LIB export, parsed by Z3),
    its knobs (the `iree_codegen.smt.knob` ops, in order) and each assertion's message."""
    smtlib = iree_codegen.convert_constraints_op_to_smtlib(op)
    assertions = list(z3.parse_smt2_string(smtlib))
    asserts = walk_ops(op, ("iree_codegen.smt.assert",))
    messages = [ir.StringAttr(a.attributes["msg"]).value for a in asserts]
    if len(messages) != len(assertions):  # not paired one to one: keep the terms, lose the words
        messages = [""] * len(assertions)
    knobs = tuple(ir.StringAttr(k.attributes["name"]).value for k in walk_ops(op, ("iree_codegen.smt.knob",)))
    variables: dict[str, z3.ArithRef] = {}
    for a in assertions:
        for v in z3.z3util.get_vars(a):
            variables[str(v)] = v
    for k in knobs:  # a knob no assertion reads still has a value to give the materializer
        variables.setdefault(k, z3.Int(k))
    function = ir.StringAttr(enclosing_op(op, "func.func").attributes["sym_name"]).value
    return EmittedProblem(function, pipeline_id(op.attributes["pipeline"]), op, knobs, assertions,
                          messages, variables, _pinned(assertions, variables, set(knobs)))


def _pinned(assertions: list[z3.BoolRef], variables: dict[str, z3.ArithRef], knobs: set[str]) -> dict[str, int]:
    """The variables that the assertions reading no knob fix to a single value."""
    context = [a for a in assertions if not {str(v) for v in z3.z3util.get_vars(a)} & knobs]
    solver = z3.Solver()
    solver.add(*context)
    if solver.check() != z3.sat:
        return {}
    model = solver.model()
    pinned = {}
    for name, var in variables.items():
        if name in knobs or model.eval(var, model_completion=False).eq(var):
            continue
        value = model.eval(var, model_completion=True).as_long()
        if _unsat(*context, var != value):
            pinned[name] = value
    return pinned


_EMITTED: dict[tuple, list[EmittedProblem]] = {}


def emitted_problems(input_path: Path, target: Target, ctx: ir.Context,
                     flags: tuple[str, ...] = ()) -> list[EmittedProblem]:
    """Every constraints op the compiler emits for the input under `target` (compiled once per
    input, its contents, target, flags and context)."""
    key = (str(Path(input_path).resolve()), Path(input_path).stat().st_mtime_ns, target.name, tuple(flags), id(ctx))
    if key not in _EMITTED:
        _EMITTED[key] = _emit(input_path, target, ctx, flags)
    return _EMITTED[key]


def _emit(input_path: Path, target: Target, ctx: ir.Context, flags: tuple[str, ...]) -> list[EmittedProblem]:
    try:
        configured = configure(input_path, target, (*flags, EMIT_FLAG))
    except InputError as e:
        # The same input configures without the flag (discovery did): the emission failed.
        raise InputError(f"IREE failed emitting its constraints for {input_path} on {target.name} "
                         f"(a compiler bug; docs/pipelines.md: 'The compiler's constraints'): {e}") from e
    with ctx:
        module = ir.Module.parse(configured)
    # The ops refer to the module: keep it alive as long as they are.
    problems = [read_problem(op) for op in walk_ops(module.operation, (CONSTRAINTS_OP,))]
    for p in problems:
        p.module = module  # type: ignore[attr-defined]
    return problems


def problem_for(problems: list[EmittedProblem], dispatch: str, pipeline_id: str, target: Target) -> EmittedProblem:
    """The emitted problem of this dispatch and pipeline; a one-line error where the compiler
    emits none (llvm-cpu emits none at all in IREE 3.13)."""
    for p in problems:
        if p.dispatch == dispatch and p.pipeline_id == pipeline_id:
            return p
    emitted = sorted({p.pipeline_id for p in problems if p.dispatch == dispatch})
    raise InputError(f"{dispatch}: IREE emits no constraints for {pipeline_id} on {target.name}"
                     + (f" (it does for {', '.join(emitted)})" if emitted else ""))


def materialized_config(problem: EmittedProblem, assignment: Mapping[str, int], ctx: ir.Context) -> Config:
    """The config of a compiler knob assignment: the materializer's compilation_info, with both
    of its halves expected back from the compiled dispatch."""
    info = problem.materialize(assignment)
    with ctx:
        typed = iree_codegen.CompilationInfoAttr(info)
        lowering, translation = str(typed.lowering_config), str(typed.translation_info)
    summary = " ".join(f"{k}={v}" for k, v in assignment.items() if k not in ("sg_size", "wg_size_y", "wg_size_z"))
    return Config(knobs=dict(assignment), compilation_info=str(info), summary=f"compiler: {summary}",
                  expect_lowering_config=lowering, expect_translation_info=translation)
