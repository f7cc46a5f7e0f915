"""A model build that fails on one dispatch, repaired by a config for it (issue 58, item 3).

IREE 3.13 cannot compile some dispatches with its own config: Swin-T's first LayerNorm under O3
or aggressive fusion ("failed to distribute" in `reduction_25088x96_f32`, H200), which dropped
both choices from its flag stage whole. Where the compiler's diagnostics name the dispatch, it is
found in the program as the choice forms it, and the configs of the pipeline that tunes it are
built into the model in the pipeline's order of preference, REPAIR_TRIES at most; the first that
builds is pinned (Variant.pinned, Target.pinned): every later build of the choice carries it, the
tuned model's spec too, and a tuning of that dispatch replaces it. Nothing is timed here: the
repaired choice is judged like any other."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from tuner.errors import InputError, ToolError
from tuner.specs.candidates import generate_candidates
from tuner.stages.base import StageEnv
from tuner.stages.builtin import build_once
from tuner.stages.selection import tuning_pipeline
from tuner.stages.flag_options import formed_dispatches
from tuner.stages.time_budget import flag_share_spent
from tuner.stages.variants import BuiltVariant, SpecPart, Variant

# Configs tried on a failing dispatch, each a whole-model compile, and the most dispatches
# repaired in one build.
REPAIR_TRIES = 3
REPAIR_DISPATCHES = 6


def repaired(env: StageEnv, variant: Variant, name: str, pipeline: Optional[str] = None) -> BuiltVariant:
    """`variant` built with a config pinned for the dispatch `name` its build failed in, and for
    each dispatch the build then fails in next (REPAIR_DISPATCHES at most: Swin-T under O3 failed
    in its first LayerNorm, and with that one repaired in the next stage's, `reduction_6272x192`),
    by the pipeline each dispatch is tuned with (`pipeline` where it takes the dispatch, else the
    one for the compiler's choice: Swin-T's LayerNorm under the mma.sync kernel's name went
    unrepaired); NotRepaired where a dispatch is not found, no pipeline takes it, or none of
    REPAIR_TRIES of its configs builds the model past it."""
    done: list[str] = []
    for _ in range(REPAIR_DISPATCHES):
        if done and flag_share_spent(env.budget):
            # Each further dispatch is up to REPAIR_TRIES whole-model builds more.
            raise NotRepaired(f"after {'; '.join(done)}, the build fails in {name} and the flag stage's share of "
                              "the time budget is spent")
        built = _repaired_once(env, variant, name, pipeline)
        done.append(built.said)
        if built.result.ok:
            env.say(f"  does not compile with the compiler's configs under {' '.join(variant.flags) or 'the default flags'}; "
                    f"it does with {'; '.join(done)}: pinned")
            return built.result
        variant, name = built.result.variant, built.result.failing
    raise NotRepaired(f"after {'; '.join(done)}, the build still fails in {name}")


@dataclass(frozen=True)
class _Step:
    """One dispatch repaired: the build with its config pinned (which may fail in another
    dispatch) and what to say of it."""

    result: BuiltVariant
    said: str


def _repaired_once(env: StageEnv, variant: Variant, name: str, pipeline: Optional[str]) -> _Step:
    """`variant` with a config pinned for the dispatch `name`: the first of REPAIR_TRIES that
    builds the model, or that moves its failure to another dispatch (that one is repaired next)."""
    # The diagnostics name the dispatch's function, or only its executable (`@main_dispatch_3`).
    dispatch = next((d for d in formed_dispatches(env, variant.source or env.model, variant.flags)
                     if d.name == name or d.name.startswith(name + "_")), None)
    if dispatch is None:
        raise NotRepaired(f"{name} is not found among the dispatches the choice forms")
    chosen = tuning_pipeline(dispatch, pipeline)
    if chosen is None:
        raise NotRepaired(f"no pipeline of the tuner takes {name}")
    # Only a config a spec carries can be pinned (not one that is a flag: data tiling on the CPU).
    configs = [c for c in generate_candidates(dispatch, chosen, 3 * REPAIR_TRIES, env.ctx, env.target.spec_entry,
                                              pinned=env.target.pinned)[1:]
               if c.config.compilation_info and not c.config.flags]
    if not configs:
        raise NotRepaired(f"{chosen.name} has no config for {name} but the compiler's")
    error = ""
    for c in configs[:REPAIR_TRIES]:
        part = SpecPart(dispatch, c.config, c.label)
        b = build_once(env, replace(variant, name=f"{variant.name}-repaired-{c.id}", pinned=(*variant.pinned, part)))
        if b.ok or (b.failing and b.failing != name and not dispatch.name.startswith(b.failing + "_")):
            return _Step(b, f"{dispatch.name} on the {chosen.name} config {c.label}")
        error = b.error
    raise NotRepaired(f"none of {min(len(configs), REPAIR_TRIES)} {chosen.name} configs builds {dispatch.name} "
                      f"(the last: {error})")


class NotRepaired(Exception):
    """Why a dispatch that fails to compile was not repaired."""


def pins_for(env: StageEnv, variant: Variant, pipeline: Optional[str] = None) -> tuple[SpecPart, ...]:
    """What `variant` needs pinned to build: () where it builds as it is (or cannot be repaired:
    its build then fails where it is judged, as before)."""
    built = build_once(env, variant)
    if not built.failing:  # built, or the compiler named no dispatch
        return variant.pinned
    try:
        return repaired(env, variant, built.failing, pipeline).variant.pinned
    except (NotRepaired, ToolError, InputError) as e:  # (the last two: the dispatch not read, or its configs not made)
        env.say(f"  {built.failing}: not repaired ({e})")
        return variant.pinned
