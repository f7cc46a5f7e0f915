"""Candidates: the baseline plus each solution of a pipeline's problem, as typed configs and specs."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Optional

from iree.compiler import ir

from constraints import BoolKnob, enumerate_solutions
from pipelines import Config, Dispatch, Pipeline
from pipelines.base import KnobValue
from pipelines.parts import FusedOps, StoredThrough
from tuner.errors import InputError
from tuner.core.results import Result, Status
from tuner.specs.transform import KERNEL_CONFIG, Pinned, build_spec, with_pinned

BASELINE_LABEL = "baseline"


@dataclass(frozen=True)
class Candidate:
    """One config to compile and time. The baseline is explicit: `is_baseline`, not index 0."""

    id: int
    dispatch: Dispatch
    pipeline: str
    config: Config
    spec: str  # the tuning spec's text (an empty spec for the baseline and flag-only configs)
    is_baseline: bool = False
    # Configs of other dispatches that its spec carries too (Target.pinned): what the compiler's
    # own configs cannot build there (tuner.stages.repair).
    pinned: Pinned = ()

    @property
    def label(self) -> str:
        if self.is_baseline:
            return BASELINE_LABEL
        return self.config.summary or " ".join(f"{k}={v}" for k, v in self.config.knobs.items())

    @property
    def key(self) -> str:
        """Stable identity of what gets compiled, for resuming a run."""
        payload = json.dumps(
            [self.dispatch.name, self.dispatch.source_digest, self.dispatch.target.attribute,
             self.config.compilation_info, list(self.config.flags), self.is_baseline]
            + [text for _, text in self.config.root_attributes]
            # Model-wide flags it was discovered and is compiled under (tune-model).
            + ([list(self.dispatch.flags)] if self.dispatch.flags else [])
            + ([[d.name, c.compilation_info] for d, c in self.pinned] if self.pinned else []),
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def identity(self) -> tuple:
        """What the compiler is asked to build: two candidates alike here build the same."""
        c = self.config
        return (c.expect_lowering_config or "", c.expect_translation_info or "", c.flags, c.root_attributes,
                _bare_ops_configs(self.dispatch, c))

    def result(self, flags: list[str], status: Status, **fields) -> Result:
        """A result for this candidate, with the identity the result store keys it by."""
        target = self.dispatch.target
        return Result(candidate_id=self.id, key=self.key, label=self.label, is_baseline=self.is_baseline,
                      knobs=dict(self.config.knobs), flags=flags, status=status,
                      dispatch=self.dispatch.name, target=f"{target.backend}:{target.arch}",
                      compilation_info=self.config.compilation_info or "",
                      config_flags=list(self.config.flags), **fields)


def baseline(dispatch: Dispatch, pipeline: str, ctx: ir.Context, spec_entry: str = KERNEL_CONFIG,
             pinned: Pinned = ()) -> Candidate:
    """The compiler's own config, expected to be read back unchanged (its spec holds only the
    `pinned` configs of other dispatches). Of a pinned dispatch, its pinned config: the compiler's
    own does not build it (tuner.stages.repair)."""
    own = next((c for d, c in pinned if d.name == dispatch.name), None)
    config = own if own is not None else Config(
        knobs={},
        compilation_info=None,
        expect_root_op=dispatch.op_name,
        expect_lowering_config=dispatch.default.lowering_config or None,
    )
    return Candidate(0, dispatch, pipeline, config, str(build_spec(with_pinned(pinned, ()), ctx, spec_entry)),
                     is_baseline=True, pinned=pinned)


def generate_candidates(dispatch: Dispatch, pipeline: Pipeline, limit: int, ctx: ir.Context,
                        spec_entry: str = KERNEL_CONFIG, check_timeout_ms: int = 5000,
                        progress: Optional[Callable[[str, int, int], None]] = None,
                        pinned: Pinned = ()) -> list[Candidate]:
    """The baseline, then up to `limit` distinct configs from the pipeline, most promising first,
    each with a spec whose entry point is `spec_entry` (the target's; see tuner.targets). Fewer
    when the space holds fewer: enumeration stops when it is exhausted. `progress("enumerate",
    done, total)` follows it."""
    out = [baseline(dispatch, pipeline.name, ctx, spec_entry, pinned)]
    # What the compiler would build: a config equal to the default is the baseline again.
    seen = {default_identity(dispatch)}
    own = pipeline.space_points(dispatch)  # --constraints compiler: the solver's order
    filtered = pipeline.filters_configs  # --constraints both: the compiler's say on each
    solutions = (iter(own[0]) if own is not None
                 else enumerate_solutions(pipeline.build_problem(dispatch), 10 ** 9 if filtered else limit,
                                         check_timeout_ms))
    for solution in solutions:
        if len(out) > limit:
            break
        if filtered and not pipeline.admits(dispatch, solution):
            continue
        candidate = candidate_for(len(out), dispatch, pipeline, solution, ctx, spec_entry, pinned)
        if candidate.identity in seen:
            continue
        seen.add(candidate.identity)
        out.append(candidate)
        if progress:
            progress("enumerate", len(out) - 1, limit)
    if progress:
        progress("enumerate", len(out) - 1, len(out) - 1)  # done: the space may hold fewer than asked
    return out


def default_identity(dispatch: Dispatch) -> tuple:
    d = dispatch.default
    return (d.lowering_config, d.translation_info, (),
            (("decomposition_config", dispatch.decomposition_config),) if dispatch.decomposition_config else (), ())


def _bare_ops_configs(dispatch: Dispatch, config: Config) -> tuple[str, ...]:
    """The configs a candidate gives the ops the compiler leaves bare (Dispatch.fused, ""): with
    them, a config equal to the compiler's elsewhere builds what the compiler's does not."""
    fused = config.part(FusedOps)
    if fused is None:
        return ()
    return tuple(text for op, text in zip(dispatch.fused, fused.lowering_configs) if not op.default_lowering_config)


def candidate_for(id: int, dispatch: Dispatch, pipeline: Pipeline, knobs: Mapping[str, KnobValue], ctx: ir.Context,
                  spec_entry: str = KERNEL_CONFIG, pinned: Pinned = ()) -> Candidate:
    """The candidate (config and spec) a knob assignment stands for."""
    config = as_matched(dispatch, pipeline, pipeline.to_config(dispatch, knobs, ctx))
    return Candidate(id, dispatch, pipeline.name, config, spec_text(dispatch, config, ctx, spec_entry, pinned),
                     pinned=pinned)


def as_matched(dispatch: Dispatch, pipeline: Pipeline, config: Config) -> Config:
    """The config with what its spec's matcher must see: where the pipeline's matchers require
    the ops after the root (`Pipeline.matches_ops_after`, which also keeps a model's same-shaped
    dispatches apart: tuner.stages.selection.signature), the part saying how many
    (pipelines.parts.StoredThrough)."""
    if not (pipeline.matches_ops_after and config.compilation_info) or config.part(StoredThrough):
        return config
    return replace(config, parts=(*config.parts, StoredThrough(len(dispatch.other_ops))))


def spec_text(dispatch: Dispatch, config: Config, ctx: ir.Context, spec_entry: str, pinned: Pinned = ()) -> str:
    """The tuning spec that applies `config` (none for flag-only configs) and the `pinned` ones."""
    return str(build_spec(with_pinned(pinned, [(dispatch, config)] if config.compilation_info else []), ctx, spec_entry))



def candidates_from_knobs(dispatch: Dispatch, pipeline: Pipeline, assignments: list[Mapping[str, KnobValue]],
                          ctx: ir.Context, spec_entry: str = KERNEL_CONFIG,
                          pinned: Pinned = ()) -> tuple[list[Candidate], list[str]]:
    """The baseline, then one candidate per given knob assignment (no search), and warnings for
    assignments outside the pipeline's constraints: those are still evaluated, since a failing
    candidate is data and the constraints may be stricter than the compiler."""
    problem = pipeline.build_problem(dispatch)
    names = {k.name: k for k in problem.knobs}
    out, warnings = [baseline(dispatch, pipeline.name, ctx, spec_entry, pinned)], []
    seen = {default_identity(dispatch)}
    for i, knobs in enumerate(assignments):
        knobs = {**{k: v for k, v in pipeline.optional_knobs.items() if k in names}, **knobs}
        unknown = sorted(set(knobs) - set(names))
        missing = sorted(set(names) - set(knobs))
        if unknown or missing:
            raise InputError(f"config {i}: {pipeline.name} knobs are {', '.join(names)}"
                             + (f"; unknown: {', '.join(unknown)}" if unknown else "")
                             + (f"; missing: {', '.join(missing)}" if missing else ""))
        for name, value in knobs.items():
            if isinstance(names[name], BoolKnob) != isinstance(value, bool):
                raise InputError(f"config {i}: knob {name} takes {'true/false' if isinstance(names[name], BoolKnob) else 'an integer'}")
        if not problem.admits(knobs):
            warnings.append(f"config {i} is outside the {pipeline.name} constraints for this dispatch; evaluating it anyway")
        candidate = candidate_for(len(out), dispatch, pipeline, knobs, ctx, spec_entry, pinned)
        if candidate.identity in seen:
            warnings.append(f"config {i} repeats an earlier one (or the compiler's default); evaluated once")
            continue
        seen.add(candidate.identity)
        out.append(candidate)
    return out, warnings
