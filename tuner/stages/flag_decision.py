"""The flag stage's finished decision (DIR/flag-decision.json): recorded when the stage ends,
reused by a rerun on the same model, target and first-round choices (a rerun after an
interruption would otherwise decide again, on other timings, and tune other dispatches); the
judged steps of a stage not finished (DIR/flag-steps.json, StepLog), reused alike; and how a
decision and its trials are said."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pipelines import taking_flags
from pipelines.model_flags import flag_legend, short_flags
from tuner.rewrite import combined
from tuner.run_dir import remove_tree, write_file
from tuner.stages.base import ModelState, StageEnv
from tuner.stages.flag_options import ModelOption, applying_rewrites, rewritten_program

FLAG_DECISION = "flag-decision.json"  # DIR/: the flag stage's finished decision, reused by a rerun
FLAG_STEPS = "flag-steps.json"  # DIR/: the judged steps of a flag stage not finished, reused by a rerun


def decision_key(env: StageEnv, options: list[ModelOption]) -> dict:
    """What a decision is reused for: the program, the target and the first round's choices."""
    return {"model": hashlib.sha256(env.model.read_bytes()).hexdigest(), "target": env.target.name,
            "options": [o.label for o in options]}


def record_decision(env: StageEnv, options: list[ModelOption], state: ModelState) -> None:
    data = {**decision_key(env, options), "flags": list(state.flags), "rewrites": list(state.rewrites),
            "program": str(state.source) if state.source else None, "trials": state.flag_trials,
            "untuned": env.cache.untuned_gains}
    write_file(env.output_dir / FLAG_DECISION, json.dumps(data, indent=1))


def decision_untuned(env: StageEnv) -> dict[str, Optional[float]]:
    """The figures with the compiler's configs (RunCache.untuned_gains) the decision in DIR was
    made with, so that a rerun builds its choice as it was judged ({} where none)."""
    try:
        untuned = json.loads((env.output_dir / FLAG_DECISION).read_text()).get("untuned")
    except (OSError, ValueError, AttributeError):
        return {}
    return {k: v for k, v in untuned.items() if isinstance(k, str) and (v is None or isinstance(v, float))} \
        if isinstance(untuned, dict) else {}


def earlier_decision(env: StageEnv, options: list[ModelOption]) -> Optional[ModelState]:
    """A finished decision of an earlier run on this model, target and options, or None (none,
    another's, or one this stage could not have made: decided again)."""
    try:
        data = json.loads((env.output_dir / FLAG_DECISION).read_text())
    except (OSError, ValueError):
        return None
    if {k: data.get(k) for k in ("model", "target", "options")} != decision_key(env, options):
        return None
    # A choice may join several flag sets (extensions), and those its dispatches called for.
    offered = [f for o in options for f in o.flags] + [f for flags in taking_flags() for f in flags]
    flags = tuple(data.get("flags", ()))
    names = [n for o in options if o.rewrite for n in o.rewrite.names]
    rewrites = tuple(data.get("rewrites", ()))
    program = Path(data["program"]) if data.get("program") else None
    if (not set(flags) <= set(offered) or len(set(flags)) != len(flags) or not set(rewrites) <= set(names)
            or list(rewrites) != sorted(rewrites, key=names.index) or bool(rewrites) != (program is not None)
            or (program is not None and not program.resolve().is_relative_to(env.output_dir.resolve()))):
        return None
    if program is not None and not program.is_file():
        # The rewritten program was removed (the decision carried to another machine's run
        # directory): the rewrites are deterministic, so it is written again where it was.
        applying = {r.name: r for r in applying_rewrites(env)}
        if not set(rewrites) <= set(applying):
            return None
        again = rewritten_program(env, combined([applying[n] for n in rewrites]))
        if again is None or again.resolve() != program.resolve():
            return None
    return ModelState(flags=flags, flag_trials=data.get("trials", {}), rewrites=rewrites, source=program)


@dataclass
class StepLog:
    """The judged steps of a flag stage not finished yet (DIR/flag-steps.json), each by its
    directory: the choices it timed, against which reference, their figures, which it kept. A
    rerun of the stage on the same model, target and first-round choices takes a step it finds
    with the same choices against the same reference as judged, and times from the first step it
    does not find (issue 62: tune-model stopped by a device's per-call limit inside the flag stage
    timed every step again when resumed; builds and dispatch tunings were already reused). The
    log is removed when the stage records its decision. `path` None: nothing is read or kept."""

    path: Optional[Path] = None
    key: dict = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def of_run(cls, env: StageEnv, options: list[ModelOption]) -> "StepLog":
        """The run's log, with the steps of an earlier run on the same model, target and options."""
        path, key = env.output_dir / FLAG_STEPS, decision_key(env, options)
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        steps = data.get("steps") if isinstance(data, dict) and data.get("key") == key else None
        return cls(path, key, steps if isinstance(steps, dict) else {})

    def earlier(self, directory: str, labels: list[str], reference: str) -> Optional[dict[str, Any]]:
        """The step judged in `directory` by an earlier run, where it timed the same choices
        against the same reference; else None."""
        step = self.steps.get(directory)
        if (isinstance(step, dict) and step.get("labels") == labels and step.get("reference") == reference
                and (step.get("judged") is None or step.get("judged") in labels)):
            return step
        return None

    def record(self, directory: str, labels: list[str], reference: str, trials: dict, wrong: set[str],
               kept: Optional[tuple[Optional[str], float, bool]] = None,
               untuned: Optional[dict[str, Optional[float]]] = None) -> None:
        """The step's figures; `kept`: the choice it kept (None: none), its speedup and whether it
        was kept over a wrong default; `untuned`: its choices' figures with the compiler's configs
        (RunCache.untuned_gains, by tuner.stages.untuned.untuned_key), so that a rerun builds each
        as it was judged."""
        if self.path is None:
            return
        judged, speedup, over_wrong = kept or (None, 1.0, False)
        self.steps[directory] = {"labels": labels, "reference": reference, "judged": judged, "speedup": speedup,
                                 "over_wrong": over_wrong, "trials": {k: trials[k] for k in labels if k in trials},
                                 "wrong": sorted(w for w in wrong if w in labels),
                                 "untuned": dict(untuned or {})}
        write_file(self.path, json.dumps({"key": self.key, "steps": self.steps}, indent=1))

    def close(self) -> None:
        """The stage finished: its decision holds what the steps were for."""
        if self.path is not None:
            remove_tree(self.path)


def decision_text(state: ModelState) -> str:
    chosen = " ".join([*state.rewrites, *state.flags])
    return f"chose {short_flags(chosen)}" if chosen else "kept the default"


def trials_text(trials: dict) -> str:
    """Each choice tried and its figure, flags by their short names, then what the names stand for."""
    text = "; ".join(f"{short_flags(k)} {v:.2f}x" if isinstance(v, float) else f"{short_flags(k)}: {v}"
                     for k, v in trials.items())
    legend = flag_legend(trials)
    return text + (f" (where {legend})" if legend else "")
