"""The flag stage's finished decision (DIR/flag-decision.json): recorded when the stage ends,
reused by a rerun on the same model, target and first-round choices (a rerun after an
interruption would otherwise decide again, on other timings, and tune other dispatches), and
how a decision and its trials are said."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

from pipelines import taking_flags
from pipelines.model_flags import flag_legend, short_flags
from tuner.rewrite import combined
from tuner.run_dir import write_file
from tuner.stages.base import ModelState, StageEnv
from tuner.stages.flag_options import ModelOption, applying_rewrites, rewritten_program

FLAG_DECISION = "flag-decision.json"  # DIR/: the flag stage's finished decision, reused by a rerun


def decision_key(env: StageEnv, options: list[ModelOption]) -> dict:
    """What a decision is reused for: the program, the target and the first round's choices."""
    return {"model": hashlib.sha256(env.model.read_bytes()).hexdigest(), "target": env.target.name,
            "options": [o.label for o in options]}


def record_decision(env: StageEnv, options: list[ModelOption], state: ModelState) -> None:
    data = {**decision_key(env, options), "flags": list(state.flags), "rewrites": list(state.rewrites),
            "program": str(state.program) if state.program else None, "trials": state.flag_trials}
    write_file(env.output_dir / FLAG_DECISION, json.dumps(data, indent=1))


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
    return ModelState(flags=flags, flag_trials=data.get("trials", {}), rewrites=rewrites, program=program)


def decision_text(state: ModelState) -> str:
    chosen = " ".join([*state.rewrites, *state.flags])
    return f"chose {short_flags(chosen)}" if chosen else "kept the default"


def trials_text(trials: dict) -> str:
    """Each choice tried and its figure, flags by their short names, then what the names stand for."""
    text = "; ".join(f"{short_flags(k)} {v:.2f}x" if isinstance(v, float) else f"{short_flags(k)}: {v}"
                     for k, v in trials.items())
    legend = flag_legend(trials)
    return text + (f" (where {legend})" if legend else "")
