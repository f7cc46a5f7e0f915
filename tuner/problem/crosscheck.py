"""Cross-check a pipeline's own constraints (native) with the ones the compiler emits for the same
dispatch: the size of each space, the configs one side accepts and the other rejects, grouped into
classes (by the compiler assertion a native config breaks; by the knob value or combination a
compiler config has that the native space never does), and a few of each class compiled to settle
who is right (a config that compiles and carries its config shows the rejecting side too strict).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from iree.compiler import ir

from constraints.fast_enumerate import enumerate_space
from pipelines import Dispatch, MmaIntrinsic, Pipeline
from pipelines.base import NotInCompilerKnobs
from tuner.specs.candidates import Candidate, as_matched, candidate_for, spec_text
from tuner.build.builder import LocalBuilder, build_all
from tuner.problem.compiler import EmittedProblem, materialized_config

NATIVE_ONLY = "native only"  # the native constraints accept it, the compiler's reject it
COMPILER_ONLY = "compiler only"  # the compiler's accept it, the native space does not hold it


@dataclass
class DifferenceClass:
    side: str
    reason: str
    count: int = 0
    examples: list[dict] = field(default_factory=list)  # knobs: native names (native only), compiler's (compiler only)
    compiled: list[str] = field(default_factory=list)  # the sampled examples' build statuses


@dataclass
class CrossCheck:
    dispatch: str
    target: str
    pipeline: str
    compiler_pipeline: str
    native: int  # the native space's size
    compiler: int  # compiler configs enumerated
    compiler_complete: bool  # False: `compiler` is a lower bound (the limit or the time ran out)
    both: Optional[int]  # native configs the compiler's constraints accept (None: not mapped)
    classes: list[DifferenceClass]
    native_seconds: float
    compiler_seconds_to: dict[int, float]  # seconds to the first N compiler configs (100, 1000)

    def to_json(self) -> dict:
        return {**{k: v for k, v in self.__dict__.items() if k != "classes"},
                "classes": [c.__dict__ for c in self.classes]}


def compiler_assignment(pipeline: Pipeline, dispatch: Dispatch, knobs: Mapping, problem: EmittedProblem,
                        indices: Mapping[tuple, int]) -> dict[str, int]:
    """A native config in the compiler's variables: the pipeline's mapping, its intrinsic as the
    compiler's `mma_idx`, and only the knobs (and derived variables) the compiler has."""
    mapped = dict(pipeline.compiler_knobs(dispatch, knobs))
    mma: MmaIntrinsic | None = mapped.pop("mma", None)
    if mma is not None:
        key = (mma.m, mma.n, mma.k, mma.a_type, mma.b_type, mma.c_type)
        if key not in indices:
            raise KeyError(f"{mma.name} is not among the compiler's intrinsics for this op")
        mapped["mma_idx"] = indices[key]
    return {k: int(v) for k, v in mapped.items() if k in problem.variables}


def _reason(message: str) -> str:
    """A violation's message without its values: the class it names."""
    return re.sub(r" \[[^\]]*\]", "", message)


def _settle(examples: list[Candidate], builder: LocalBuilder) -> list[str]:
    """Compile each example for real and read its config back: its status ("ok": it compiled
    and carried its config)."""
    return [b.result.status.value for b in build_all(builder, examples)]


def materialized_candidate(id: int, dispatch: Dispatch, pipeline: Pipeline, problem: EmittedProblem,
                           assignment: Mapping[str, int], ctx: ir.Context, spec_entry: str) -> Candidate:
    """The candidate for a compiler config (built by the compiler's materializer)."""
    config = as_matched(dispatch, pipeline, materialized_config(problem, assignment, ctx))
    return Candidate(id, dispatch, pipeline.name, config, spec_text(dispatch, config, ctx, spec_entry))


@dataclass(frozen=True)
class CrossCheckLimits:
    """How far a cross-check goes: the compiler's space enumerated up to `limit` configs or
    `seconds`; `compile_per_class` examples of each difference class compiled (0: none), `keep`
    shown."""

    limit: int = 5000
    seconds: float = 120.0
    compile_per_class: int = 2
    keep: int = 3


def crosscheck(dispatch: Dispatch, pipeline: Pipeline, problem: EmittedProblem, builder: LocalBuilder,
               limits: CrossCheckLimits = CrossCheckLimits(),
               progress: Optional[Callable[[str, int, int], None]] = None) -> CrossCheck:
    """Both spaces, their differences by class, and examples of each class compiled (`limits`) by
    `builder` (its input, target, context and directory)."""
    target, ctx = builder.target, builder.ctx
    limit, seconds, compile_per_class, keep = limits.limit, limits.seconds, limits.compile_per_class, limits.keep
    indices = problem.intrinsic_indices()
    t0 = time.perf_counter()
    native = list(enumerate_space(pipeline.build_problem(dispatch)))
    native_seconds = time.perf_counter() - t0
    classes: dict[tuple[str, str], DifferenceClass] = {}
    pending: dict[tuple[str, str], list[Candidate]] = {}
    images, both = set(), 0
    values: dict[str, set[int]] = {}

    def note(side: str, reason: str, example: dict, candidate: Callable[[], Candidate]) -> None:
        cls = classes.setdefault((side, reason), DifferenceClass(side, reason))
        cls.count += 1
        if len(cls.examples) < keep:
            cls.examples.append(example)
        if len(pending.setdefault((side, reason), [])) < compile_per_class:
            pending[(side, reason)].append(candidate())

    next_id = iter(range(1, 10 ** 9))
    mapped_ok = pipeline.maps_to_compiler(dispatch)
    for i, knobs in enumerate(native if mapped_ok else []):
        try:
            mapped = compiler_assignment(pipeline, dispatch, knobs, problem, indices)
        except NotInCompilerKnobs as e:  # split-K: not in the compiler's space at all
            note(NATIVE_ONLY, str(e), dict(knobs),
                 lambda k=knobs: candidate_for(next(next_id), dispatch, pipeline, k, ctx, target.spec_entry))
            continue
        broken = problem.violations(mapped)
        if broken:
            note(NATIVE_ONLY, _reason(broken[0]), dict(knobs),
                 lambda k=knobs: candidate_for(next(next_id), dispatch, pipeline, k, ctx, target.spec_entry))
        else:
            both += 1
        knobs_only = {k: v for k, v in mapped.items() if k in problem.knobs}  # what a compiler solution gives
        images.add(tuple(sorted(knobs_only.items())))
        for k, v in knobs_only.items():
            values.setdefault(k, set()).add(v)
        if progress:
            progress("native", i + 1, len(native))
    mapped_knobs = set(values)
    found, to = 0, {}
    t0 = time.perf_counter()
    for assignment in problem.solutions(limit=limit, seconds=seconds):
        found += 1
        if found in (100, 1000):
            to[found] = time.perf_counter() - t0
        image = tuple(sorted((k, v) for k, v in assignment.items() if k in mapped_knobs))
        if mapped_ok and image not in images:
            outside = sorted(k for k, v in image if v not in values[k])
            reason = (f"{outside[0]} takes a value the native space never does" if outside
                      else "a combination of values the native constraints reject")
            note(COMPILER_ONLY, reason, dict(assignment),
                 lambda a=assignment: materialized_candidate(next(next_id), dispatch, pipeline, problem, a, ctx,
                                                             target.spec_entry))
        if progress:
            progress("compiler", found, limit)
    complete = found < limit and time.perf_counter() - t0 <= seconds
    for key, examples in pending.items():
        classes[key].compiled = _settle(examples, builder) if examples else []
    return CrossCheck(dispatch.name, target.name, pipeline.name, problem.pipeline_id, len(native), found, complete,
                      both if mapped_ok else None,
                      sorted(classes.values(), key=lambda c: (c.side, -c.count)), native_seconds, to)
