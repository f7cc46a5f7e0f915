"""`KernelTileStage`: the tiles of the external kernels chosen inside the model.

Each external GEMM, convolution and attention kernel (tuner.rewrite.EXTERNAL) is compiled with
the tiles a rule picks (tiles_for, conv_tiles_for, attention_tiles_for), set on a few shapes: on
the H200, DeiT-S's 1576x384x1536 linear layer ran 2.88x IREE's default at 64x128 tiles where the
rule's first choice then, 128x128, ran 2.09x; the conv kernel's tiles, the narrow GEMM ones and
the attention's choice between 64 and 128 query rows were chosen on no measurement. The dispatch
stage does not tune what IREE does not compile ("an external kernel").

A kernel's time inside the model's call depends on its own tiles, not on another kernel's. So the
model is built K times, the j-th build with every problem at its j-th candidate tiles
(tile_candidates, conv_tile_candidates, attention_tile_candidates: the rule's first, for the
GEMM then the same tiles in its persistent TMA form where that takes the problem, then, for the
GEMM and the attention, the first of their Z3 spaces' tiles in the order of an estimate,
tuner.external.gemm_kernel.space and attention_kernel.attention_space), each build
first run once in a process of its own and its result checked, then its kernels timed by CUPTI
inside the model's own calls (two rounds, the builds in turn, the second round reversed), and
each problem keeps its fastest (by more than MARGIN): K builds and K timings for every problem
at once, not K per problem. The program with the winners is then timed against the choice
before the stage, side by side with numerics, and kept only where the model is faster beyond
the noise."""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Callable, Optional

from tuner.evaluation.in_model import KERNEL_MIN_TIME_S, RUN_ERRORS, KernelCalls, on_device, why_not_in_model
from tuner.external.attention_kernel import attention_tile_candidates
from tuner.external.conv_kernel import conv_tile_candidates
from tuner.external.gemm_kernel import tile_candidates
from tuner.rewrite import EXTERNAL_ATTENTION, EXTERNAL_CONV, EXTERNAL_GEMM, Rewrite, combined, named_rewrites
from tuner.rewrite.external_attention import external_attentions
from tuner.rewrite.external_conv import external_convs
from tuner.rewrite.external_gemm import external_gemms
from tuner.run_dir import real_directory, write_file
from tuner.stages.base import ModelState, StageEnv, parsed_model
from tuner.stages.builtin import build_once, compare_on_model, prebuild
from tuner.stages.ledger import REWRITES, TIMINGS
from tuner.stages.variants import BuiltVariant, Variant

# The external rewrites whose tiles are tried: name -> (the rewrite taking `tiles`, the candidates).
TILEABLE: dict[str, tuple[Callable, Callable]] = {
    EXTERNAL_GEMM.name: (external_gemms, tile_candidates),
    EXTERNAL_CONV.name: (external_convs, conv_tile_candidates),
    EXTERNAL_ATTENTION.name: (external_attentions, attention_tile_candidates),
}
DIRECTORY = "kernel-tiles"
Picks = dict[str, object]  # kernel (problem) name -> the tiles it was given
# A problem leaves the rule's tiles only for others faster by more than this in the model (kernel
# times drift by a few percent between two timings of the same build).
MARGIN = 0.03


@dataclass
class KernelTileStage:
    """Each external GEMM, convolution and attention problem's tiles chosen among `candidates` by
    its kernel time in the model (the module's docstring)."""

    name: str = "kernel-tiles"
    candidates: int = 4

    def run(self, state: ModelState, env: StageEnv) -> ModelState:
        tileable = [n for n in state.rewrites if n in TILEABLE]
        if not tileable or state.source is None:
            return state
        earlier = _earlier_choice(env, state)
        if earlier is not None:  # a resumed run: the stage's builds and timings are not made again
            labels, verdict = earlier
            program = _program(env, state, lambda options: options[0], "tiles-chosen", labels)[0] if labels else None
            if program is not None or not labels:  # (else the rewrites no longer apply as they did: chosen again)
                said = f"external kernel tiles: {verdict} (as an earlier run of this directory chose)"
                env.say(said)
                return (replace(state, source=program) if labels else state).note(said)
        why = why_not_in_model() if env.target.device.startswith("cuda") else f"{env.target.device} runs no external kernel"
        if why is None and env.budget is not None and env.budget.before_merge_left() <= 0:
            why = "the time budget is spent"
            env.budget.skip("choosing the external kernels' tiles")
        if why is not None:
            return state.note(f"external kernel tiles: the rule's ({why})")
        variants, picks = [], []
        for j in range(self.candidates):
            program, given = _program(env, state, lambda options, j=j: options[j] if j < len(options) else options[0],
                                      f"tiles-{j}")
            if program is None:
                break
            variants.append(Variant(f"{DIRECTORY}-{j}", state.flags, source=program, pinned=state.pinned))
            picks.append(given)
        if len(variants) < 2 or all(p == picks[0] for p in picks[1:]):
            return _said(env, state, "external kernel tiles: one candidate a problem, the rule's")
        prebuild(env, variants)
        # the choice as the flag stage built it (cached by what defines it, whatever its name)
        before = build_once(env, Variant(f"{DIRECTORY}-rule", state.flags, source=state.source, pinned=state.pinned))
        built = [build_once(env, v) for v in variants]
        # each run once in a process of its own, its result checked, before any is loaded here (a
        # build that faults the device would take this process's CUDA context with it)
        checked = compare_on_model(env, before, built, f"{DIRECTORY}-numerics", rounds=0)
        runs = [b if b.ok and b.variant.name not in checked.failed else replace(b, error="did not run right")
                for b in built]
        times = kernel_times(env, runs, sorted({name for p in picks for name in p}, key=len, reverse=True))
        best = fastest(picks, times)
        changed = {name: tiles for name, tiles in best.items() if tiles != picks[0][name]}
        if not changed:
            _record(env, state, {}, "the rule's were the fastest in the model for every problem")
            return _said(env, state, "external kernel tiles: the rule's were the fastest in the model for every problem")
        for name, tiles in changed.items():
            env.say(f"  {name}: {tiles.label} in the model, {_ms(times, picks, name, tiles)} "
                    f"(the rule's {picks[0][name].label}: {_ms(times, picks, name, picks[0][name])})")
        labels = {name: tiles.label for name, tiles in best.items()}
        program, _ = _program(env, state, lambda options: options[0], "tiles-chosen", labels)
        chosen = build_once(env, Variant(DIRECTORY, state.flags, source=program, pinned=state.pinned))
        cmp = compare_on_model(env, before, [chosen], DIRECTORY)
        paired = cmp.paired.get(chosen.variant.name)
        verdict = (f"{len(changed)} of {len(best)} problems on other tiles than the rule's, the model "
                   + (f"{paired.speedup:.2f}x" if paired else cmp.failed.get(chosen.variant.name, "not timed")))
        if paired is None or not paired.beats_baseline:
            _record(env, state, {}, f"the rule's kept ({verdict})")
            return _said(env, state, f"external kernel tiles: the rule's kept ({verdict})")
        _record(env, state, labels, f"{verdict}: kept")
        env.say(f"external kernel tiles: {verdict}: kept")
        which = "; ".join(f"{name} {tiles.label}" for name, tiles in changed.items())
        return replace(state, source=program).note(f"external kernel tiles: {verdict} ({which})")


def _said(env: StageEnv, state: ModelState, verdict: str) -> ModelState:
    """The stage's verdict said on the terminal, as the other stages say theirs, and noted."""
    env.say(verdict)
    return state.note(verdict)


def _program(env: StageEnv, state: ModelState, pick: Callable, name: str,
             chosen: Optional[dict[str, str]] = None) -> tuple[Optional[Path], Picks]:
    """The model's program rewritten by the state's rewrites, each tileable one with its problems'
    tiles from `pick(candidates)` (or, where `chosen` names a problem, its candidate of that
    label): the program (None where nothing changed) and the tiles each problem was given."""
    known = named_rewrites(env.target)
    given: Picks = {}

    def tiles_of(candidates: Callable, problem) -> object:
        options = candidates(problem)
        named = [t for t in options if chosen and t.label == chosen.get(problem.name)]
        tiles = named[0] if named else pick(options)
        given[problem.name] = tiles
        return tiles

    rewrites = [Rewrite(n, partial(TILEABLE[n][0], tiles=partial(tiles_of, TILEABLE[n][1])), known[n].description)
                if n in TILEABLE else known[n] for n in state.rewrites]
    out = env.output_dir / DIRECTORY / f"{env.model.stem}.{name}.mlir"
    with env.ledger.timed(REWRITES):
        changed = parsed_model(env).write(combined(rewrites), out, prebuild=True)  # the candidates' kernels side by side
    return (out if changed else None), given


RECORD = "choice.json"  # DIR/kernel-tiles/RECORD: the stage's choice, for a run that resumes this one


def _key(state: ModelState) -> dict:
    """What the stage's choice depends on: the choice before it (flags, rewrites and the
    rewritten program's bytes)."""
    digest = hashlib.sha256(state.source.read_bytes()).hexdigest() if state.source and state.source.is_file() else None
    return {"flags": list(state.flags), "rewrites": list(state.rewrites), "program": digest}


def _record(env: StageEnv, state: ModelState, labels: dict[str, str], verdict: str) -> None:
    """Keep the stage's choice (each problem moved off the rule's tiles, by label; none where
    the rule's were kept) for a run of the same directory resumed after it."""
    write_file(real_directory(env.output_dir / DIRECTORY) / RECORD,
               json.dumps({**_key(state), "chosen": labels, "verdict": verdict}, indent=1))


def _earlier_choice(env: StageEnv, state: ModelState) -> Optional[tuple[dict[str, str], str]]:
    """The choice an earlier run of this directory made from the same choice before it (the
    problems' tiles by label, and what it found), or None."""
    try:
        data = json.loads((env.output_dir / DIRECTORY / RECORD).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or {k: data.get(k) for k in ("flags", "rewrites", "program")} != _key(state):
        return None
    chosen = data.get("chosen")
    if not isinstance(chosen, dict) or not all(isinstance(v, str) for v in chosen.values()):
        return None
    return chosen, str(data.get("verdict", ""))


def kernel_times(env: StageEnv, built: list[BuiltVariant], names: list[str]) -> list[dict[str, float]]:
    """Each build's time per call of each named kernel inside the model (ms; the median of its
    repetitions, the least of two rounds; absent where it did not run or the build failed)."""
    settings = env.settings.module_run(env.device, env.workload, env.inputs(), env.devices)
    times: list[dict[str, float]] = [{} for _ in built]
    order = list(range(len(built)))
    with env.ledger.timed(TIMINGS, 2 * len(built)):
        for done, i in enumerate([*order, *order[::-1]], 1):
            if env.progress:
                env.progress("kernel tiles", done, 2 * len(built))
            if not built[i].ok:
                continue
            try:
                timing = on_device(settings.device, KernelCalls(built[i].vmfb, settings, tuple(names),
                                                                settings.repetitions, KERNEL_MIN_TIME_S))
            except RUN_ERRORS as e:  # a build that does not run is left untimed: its tiles are not taken
                env.say(f"  {built[i].variant.name}: did not run ({type(e).__name__}: {str(e)[:200]})")
                continue
            for name in names:
                ms = [rep[name].ms for rep in timing.per_repetition if name in rep]
                if ms:
                    times[i][name] = min(times[i].get(name, float("inf")), statistics.median(ms))
    return times


def fastest(picks: list[Picks], times: list[dict[str, float]], margin: float = MARGIN) -> Picks:
    """Each problem's tiles in the build where its kernel ran fastest, where that is faster than
    the first build's (the rule's tiles) by more than `margin`; else the first build's."""
    best: Picks = {}
    for name, rule in picks[0].items():
        timed = [(t[name], j) for j, t in enumerate(times) if name in t and name in picks[j]]
        ms, j = min(timed) if timed else (0.0, 0)
        best[name] = picks[j][name] if name not in times[0] or ms < (1 - margin) * times[0][name] else rule
    return best


def _ms(times: list[dict[str, float]], picks: list[Picks], name: str, tiles) -> str:
    j = next((j for j, p in enumerate(picks) if p.get(name) == tiles and name in times[j]), None)
    return f"{times[j][name] * 1e3:.1f} us" if j is not None else "not timed"
