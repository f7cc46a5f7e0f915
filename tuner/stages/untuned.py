"""A model-wide choice judged with the compiler's configs for what it forms (tuner.stages.flags):
its numerics checked and its time taken against what it is judged against before the dispatches
it forms are searched, so that one computing another result is refused and one already ahead is
judged so, neither searched first (issue 62)."""

from __future__ import annotations

from typing import Optional

from tuner.stages.base import StageEnv
from tuner.stages.builtin import build_once, compare_on_model
from tuner.stages.model_timing import Comparison
from tuner.stages.variants import BuiltVariant, Variant


def time_untuned(env: StageEnv, default: BuiltVariant, reference: BuiltVariant,
                 untuned: list[tuple[str, BuiltVariant]]) -> Optional[Comparison]:
    """Each choice's build with the compiler's configs (by the choice's label) timed against
    `reference` side by side in one comparison, in the run's rounds: its numerics recorded for
    `wrong_result`, and its speedup where it beats the reference (RunCache.untuned_gains, None
    where it does not). Returns the comparison (None: nothing to time)."""
    if not untuned:
        return None
    cmp = compare_on_model(env, reference, [b for _, b in untuned], "flag-untuned")
    for label, b in untuned:
        name = b.variant.name
        env.cache.choice_numerics.setdefault((default.variant.name, name), cmp.failed.get(name, ""))
        paired = cmp.paired.get(name)
        env.cache.untuned_gains[untuned_key(label, reference.variant.name)] = (
            paired.speedup if paired is not None and paired.ratios and paired.beats_baseline else None)
    return cmp


def untuned_key(label: str, reference: str) -> str:
    """How RunCache.untuned_gains names a choice's figure with the compiler's configs."""
    return f"{label} over {reference}"


def untuned_of(env: StageEnv, labels: list[str], reference: BuiltVariant) -> dict[str, Optional[float]]:
    """The step's figures with the compiler's configs (RunCache.untuned_gains)."""
    keys = {untuned_key(label, reference.variant.name) for label in labels}
    return {k: v for k, v in env.cache.untuned_gains.items() if k in keys}


def wrong_result(env: StageEnv, default: BuiltVariant, variant: Variant) -> Optional[str]:
    """Why a model-wide choice with the compiler's default configs computes another result than
    the default's (or the host's, where the default is off it): it is then refused before the
    dispatches it forms are tuned, since each of their candidates is judged on the model's
    result (ResNet-50 on cuda: the channels-last flag alone leaves strided 1x1 convolutions that
    IREE 3.13 computes non-finite, and tuning its convolutions first cost 16 model builds).
    None where it computes the same, or did not build (said where it is judged)."""
    built = build_once(env, variant)
    if not built.ok:
        return None
    key = (default.variant.name, built.variant.name)
    if key not in env.cache.choice_numerics:  # (time_untuned checks a step's choices at once)
        env.cache.choice_numerics[key] = compare_on_model(env, default, [built], "flag-numerics",
                                                          rounds=0).failed.get(built.variant.name, "")
    return env.cache.choice_numerics[key] or None

