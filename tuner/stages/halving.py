"""Successive halving of a round of the flag stage's choices (tuner.stages.flags): every choice
timed against the reference in one round, then only those near the round's fastest in the rounds
left."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from tuner.stages.base import StageEnv
from tuner.stages.builtin import compare_on_model
from tuner.stages.model_timing import Comparison
from tuner.stages.variants import BuiltVariant

# Successive halving of a round of choices (compare_halving): one whose first round is this far
# behind the round's fastest (the reference included) is timed no further. A round's ratio moves
# by about a tenth on a quiet machine (comparison.DRIFT_FLOOR): a choice a quarter behind after
# one round does not become the fastest in the next three.
HALVING_BEHIND = 0.25


def compare_halving(env: StageEnv, reference: BuiltVariant, trials: list[BuiltVariant], directory: str,
                    timed: Optional[Comparison] = None) -> tuple[Comparison, dict[str, str]]:
    """compare_on_model in the run's rounds by successive halving: every trial in one round, then
    only those within HALVING_BEHIND of the round's fastest in the rounds left (issue 62: every
    choice was timed in every round). Returns the comparison (a trial left behind keeps its one
    round) and, for each trial left behind, why. Where the reference's result is off the host's,
    it does not count among the fastest: the fastest right choice is then the result however it
    compares (tuner.stages.flags), and none is left behind for the reference. `timed`: a
    comparison against the same reference in the run's rounds that timed some of these builds
    already (the flag stage's of its choices with the compiler's configs): those are not timed
    again (issue 62: nothing timed twice), their figures taken from it and counted among the
    fastest."""
    known = {t.variant.name for t in trials
             if timed is not None and t.variant.name in timed.paired and timed.paired[t.variant.name].ratios}
    fresh = [t for t in trials if t.variant.name not in known]
    if not fresh:
        return _with_known(None, timed, known), {}
    rounds = env.rounds
    if rounds <= 1 or len(trials) < 2:
        return _with_known(compare_on_model(env, reference, fresh, directory), timed, known), {}
    first = compare_on_model(env, reference, fresh, directory, rounds=1)
    ran = {n: p for n, p in first.paired.items() if p.ratios}
    fastest = max([*(p.speedup for p in ran.values()), *(timed.paired[n].speedup for n in known),
                   *(() if first.reference_check else (1.0,))], default=1.0)
    ahead = {n for n, p in ran.items() if p.speedup >= (1 - HALVING_BEHIND) * fastest}
    behind = {n: (f"{p.speedup:.2f}x in its first round, more than {HALVING_BEHIND:.0%} behind the fastest "
                  f"({fastest:.2f}x): not timed further") for n, p in ran.items() if n not in ahead}
    rest_of = [t for t in fresh if t.variant.name in ahead]
    if not rest_of:
        return _with_known(first, timed, known), behind
    rest = compare_on_model(env, reference, rest_of, f"{directory}-rounds", rounds=rounds - 1)
    paired = {n: (p.then(rest.paired[n]) if n in rest.paired else p) for n, p in first.paired.items()}
    variant_ms = {n: first.variant_ms.get(n, ()) + rest.variant_ms.get(n, ()) for n in first.variant_ms}
    both = replace(first, reference_ms=first.reference_ms + rest.reference_ms, paired=paired,
                   variant_ms=variant_ms, failed={**first.failed, **rest.failed})
    return _with_known(both, timed, known), behind


def _with_known(cmp: Optional[Comparison], timed: Optional[Comparison], known: set[str]) -> Comparison:
    """`cmp` (None: nothing was timed now) with the figures of `known` taken from `timed`."""
    if not known:
        return cmp
    taken = Comparison(timed.reference_ms, {n: timed.paired[n] for n in known},
                       {n: timed.variant_ms.get(n, ()) for n in known},
                       {n: e for n, e in timed.errors.items() if n in known}, {}, timed.numerics, timed.reference_check)
    if cmp is None:
        return taken
    return replace(cmp, paired={**taken.paired, **cmp.paired}, variant_ms={**taken.variant_ms, **cmp.variant_ms},
                   errors={**taken.errors, **cmp.errors})
