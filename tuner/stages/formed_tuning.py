"""The dispatches a model-wide choice forms, tuned before the choice is judged (tuner.stages.flags):
the compiler's config for what a rewrite creates can be far from its best, so a choice judged
with it could be thrown away though it wins once tuned."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from pipelines import Dispatch, DispatchKind, pipeline_for
from pipelines.model_flags import codegen_flags, short_flags
from tuner.core.settings import SearchSettings
from tuner.discovery.program import discover_program
from tuner.discovery.workload import Workload
from tuner.stages.base import StageEnv
from tuner.stages.builtin import DispatchStage, with_flags
from tuner.stages.selection import select_dispatches, signature
from tuner.stages.time_budget import flag_share_spent
from tuner.stages.variants import SpecPart

# DIR/flag-dispatches/CHOICE/NAME: a created dispatch's tuning (CHOICE: the choice's variant directory)
FLAG_DISPATCHES = "flag-dispatches"
# A dispatch a choice forms with under this fraction of the FLOPs of the largest it forms is not
# tuned before the choice is judged: the held-out 1280-channel UNet block's time-embedding
# projection (1 x 1280 x 1280, 0.01% of its 3x3 convolution's FLOPs) was tuned under each of
# eight choices on the H100, 8 evaluations each, never with a winner.
FORMED_FLOPS_FRACTION = 0.1


@dataclass(frozen=True)
class FormedTuning:
    """How the dispatches a choice forms are tuned: `tune_budget` evaluations each (0: none),
    `rewrite_tunes` of them at most a choice, each searched by `search`."""

    tune_budget: int
    rewrite_tunes: int
    search: SearchSettings

    def parts(self, env: StageEnv, name: str, kinds: tuple[DispatchKind, ...], source: Path,
              flags: tuple[str, ...] = (), said: str = "", pins: tuple[SpecPart, ...] = ()) -> tuple[SpecPart, ...]:
        """The winning configs of the dispatches of `kinds` that a choice forms in `source` (the
        model's, or a rewrite's) under `flags`: each that another choice formed alike, by its
        tuning there, and `rewrite_tunes` more, one per shape, each tuned with `tune_budget`
        evaluations; once per run and choice (`name`, its directory; `said`: how the messages
        name it, by default its flags; `pins`: configs its builds need, tuner.stages.repair)."""
        key = (name, flags, self.tune_budget)
        if key in env.cache.choice_parts:
            return env.cache.choice_parts[key]
        said = said or (short_flags(" ".join(flags)) if flags else name)
        parts: list[SpecPart] = []
        if self.tune_budget > 0 and kinds:
            found = (discover_program(source, env.target, env.ctx, flags)
                     .for_running(env.workload.parameters, env.dynamic_size))
            workload = next((w for w in (found.entries.get(d.name) for d in found.dispatches)
                             if isinstance(w, Workload) and w.entry == env.workload.entry), None)
            chosen, _ = (select_dispatches(found, None, workload, 0.0, None, (), self.search.pipeline) if workload
                         else ([], []))

            def alike(d: Dispatch) -> tuple:
                """What a tuning serves: dispatches formed alike, compiled under the same codegen flags."""
                return (signature(d, self.search.pipeline),
                        codegen_flags(flags, d.target.backend, d.kind == DispatchKind.CONVOLUTION), self.tune_budget)

            # Every one another choice formed alike serves at no cost; the `rewrite_tunes` tunings
            # go to those not tuned yet: first those the model's pipeline takes (what a flag set
            # that has it take more dispatches is for: KEEP_TRANSPOSES), then the largest; none far
            # smaller than the largest (FORMED_FLOPS_FRACTION). Llama's and BERT's head-split
            # projections, 2-D matmuls under O3 with the transposes kept, went untuned behind the
            # MLP matmuls that O3 had tuned already, and the choice lost by 1-2% (H200).
            formed = [c for c in chosen if c[0].kind in kinds]
            largest = max((c[0].flops for c in formed), default=0)
            formed = [c for c in formed if c[0].flops >= FORMED_FLOPS_FRACTION * largest]
            served = [c for c in formed if alike(c[0]) in env.cache.formed_tunings]
            fresh: dict[tuple, tuple] = {}
            for c in sorted(formed, key=lambda c: (_takes(c[0], self.search), c[0].flops), reverse=True):
                if alike(c[0]) not in env.cache.formed_tunings:
                    fresh.setdefault(alike(c[0]), c)
            created = served + list(fresh.values())[:self.rewrite_tunes]

            stage = DispatchStage(self.tune_budget, search=self.search, directory=f"{FLAG_DISPATCHES}/{name}")
            for dispatch, outcome in created:
                # A dispatch that another choice formed alike (what the spec's matcher sees, the
                # ops after the root included) is not tuned again: its winner serves this one's
                # judgement too (the GQA block's two matmuls were tuned under four flag sets).
                if alike(dispatch) in env.cache.formed_tunings:
                    tuned, where = env.cache.formed_tunings[alike(dispatch)]
                    env.say(f"  {said}: {dispatch.name} ({dispatch.shape_name}), which it forms, as {where} "
                            f"does: its tuning there serves")
                elif flag_share_spent(env.budget):
                    env.budget.skip(f"tuning {dispatch.name} before judging {said}")
                    env.say(f"  {said}: {dispatch.name} is judged with its default config: the flag stage's "
                            f"share of the time budget is spent")
                    continue
                else:
                    env.say(f"  {said}: tuning {dispatch.name} ({dispatch.shape_name}), which it forms, "
                            f"before judging it ({self.tune_budget} evaluations)")
                    tuned = stage.tune_or_say(dispatch, outcome, found, with_flags(env.target, flags, pins), env,
                                              source)
                    if tuned.part is not None:  # no winner may be the model's doing (a wrong result elsewhere)
                        env.cache.formed_tunings[alike(dispatch)] = (tuned, said)
                if tuned.part is not None:
                    part = replace(tuned.part, dispatch=dispatch)  # this source's dispatch, by its name
                    parts.append(part)
                    env.say(f"    {tuned.speedup:.2f}x its default config ({part.label})")
                else:
                    env.say(f"    {tuned.status}")
        env.cache.choice_parts[key] = tuple(parts)
        return env.cache.choice_parts[key]



def _takes(dispatch: Dispatch, search: SearchSettings) -> bool:
    """Whether the pipeline the model is tuned with takes the dispatch."""
    return search.pipeline is not None and pipeline_for(dispatch, search.pipeline) is not None
