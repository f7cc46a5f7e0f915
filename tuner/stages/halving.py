"""Successive halving of a round of the flag stage's choices (tuner.stages.flags): every choice
timed against the reference in one round, then only those near the round's fastest in the rounds
left."""

from __future__ import annotations

from dataclasses import replace

from tuner.stages.base import StageEnv
from tuner.stages.builtin import compare_on_model
from tuner.stages.model_timing import Comparison
from tuner.stages.variants import BuiltVariant

# Successive halving of a round of choices (compare_halving): one whose first round is this far
# behind the round's fastest (the reference included) is timed no further. A round's ratio moves
# by about a tenth on a quiet machine (comparison.DRIFT_FLOOR): a choice a quarter behind after
# one round does not become the fastest in the next three.
HALVING_BEHIND = 0.25


def compare_halving(env: StageEnv, reference: BuiltVariant, trials: list[BuiltVariant], directory: str
                     ) -> tuple[Comparison, dict[str, str]]:
    """compare_on_model in the run's rounds by successive halving: every trial in one round, then
    only those within HALVING_BEHIND of the round's fastest in the rounds left (issue 62: every
    choice was timed in every round). Returns the comparison (a trial left behind keeps its one
    round) and, for each trial left behind, why. Where the reference's result is off the host's,
    it does not count among the fastest: the fastest right choice is then the result however it
    compares (tuner.stages.flags), and none is left behind for the reference."""
    rounds = env.rounds
    if rounds <= 1 or len(trials) < 2:
        return compare_on_model(env, reference, trials, directory), {}
    first = compare_on_model(env, reference, trials, directory, rounds=1)
    timed = {n: p for n, p in first.paired.items() if p.ratios}
    fastest = max([*(p.speedup for p in timed.values()), *(() if first.reference_check else (1.0,))], default=1.0)
    ahead = {n for n, p in timed.items() if p.speedup >= (1 - HALVING_BEHIND) * fastest}
    behind = {n: (f"{p.speedup:.2f}x in its first round, more than {HALVING_BEHIND:.0%} behind the fastest "
                  f"({fastest:.2f}x): not timed further") for n, p in timed.items() if n not in ahead}
    rest_of = [t for t in trials if t.variant.name in ahead]
    if not rest_of:
        return first, behind
    rest = compare_on_model(env, reference, rest_of, f"{directory}-rounds", rounds=rounds - 1)
    paired = {n: (p.then(rest.paired[n]) if n in rest.paired else p) for n, p in first.paired.items()}
    variant_ms = {n: first.variant_ms.get(n, ()) + rest.variant_ms.get(n, ()) for n in first.variant_ms}
    return replace(first, reference_ms=first.reference_ms + rest.reference_ms, paired=paired,
                   variant_ms=variant_ms, failed={**first.failed, **rest.failed}), behind
