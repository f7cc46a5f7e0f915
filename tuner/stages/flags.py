"""The flag stage of model tuning: model-wide choices (flags that change every dispatch, program
rewrites of tuner.rewrite, and the two together) built and timed on the whole model against the
default, the fastest that wins kept; a finished decision is reused by a rerun. A rewrite is
judged with the dispatches it creates tuned (a short search each): the compiler's default config
for them can be far from their best (a causal attention raised in a Llama-style block: 0.72 ms
with the default config, 0.28 ms tuned, BENCHMARKS.md), so judged untuned a rewrite that wins
once tuned would be thrown away."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from pipelines import DispatchKind
from pipelines.model_flags import short_flags
from tuner.errors import ToolError
from tuner.rewrite import combined, unoffered_for
from tuner.core.settings import SearchSettings
from tuner.stages.base import ModelState, StageEnv
from tuner.stages.flag_decision import (StepLog, decision_text, decision_untuned, earlier_decision, record_decision,
                                       trials_text)
from tuner.stages.flag_options import (ModelOption, alone_gain, applying_rewrites, extensions, formed_dispatches,
                                       model_options, offered_flag_sets, rewrites_nothing, rewritten_program,
                                       taking_flag_sets, together_options, without_each_kernel)
from tuner.stages.builtin import build_once, built_already, prebuild
from tuner.stages.formed_tuning import FormedTuning
from tuner.stages.halving import compare_halving
from tuner.stages.untuned import time_untuned, untuned_key, untuned_of, wrong_result
from tuner.stages.model_timing import Comparison
from tuner.stages.time_budget import NOT_TRIED, flag_share_spent, flag_step_room
from tuner.stages.repair import pins_for
from tuner.stages.variants import BuiltVariant, SpecPart, Variant, same_module



@dataclass(frozen=True)
class Judged:
    """The choice a round of the flag stage keeps: its build, its speedup over the round's
    reference, and whether it was kept for computing right where the default does not."""

    option: ModelOption
    best: BuiltVariant
    speedup: float
    over_wrong_default: bool = False


@dataclass
class FlagStage:
    """Model-wide choices (model_options): flags that change every dispatch (data tiling on the
    CPU turns every contraction into mmt4d; fusion, optimization levels and channels-last
    convolutions on GPUs) and program rewrites (tuner.rewrite), each built and timed on the whole
    model against the default; the fastest that beats it is chosen, then the other rewrites that
    apply and the other flag sets are added to it one at a time while the model with one beats
    it (`_extend`). Where external kernels apply (tuner.rewrite.EXTERNAL), their joined options
    are judged first, alone: where one beats the default, the other choices are tried only as
    additions to it, the most promising first within the stage's share. The joined option was the
    choice on every model tuned with the kernels on the H200 (eight real exports, 1.66-166x the
    default in their flag stages), while the other choices alone were most of the first round's
    builds (DenseNet-121: 19 choices), each with its numerics and timing: the flag stage took
    303-333 s of runs budgeted 260 s. Decided
    before the dispatches are tuned, with the default configs but for the dispatches a rewrite
    creates (`Rewrite.tunes`): the `rewrite_tunes` largest of them (one per shape) are searched
    first, `tune_budget` evaluations each (0: judged with the default configs too), and the
    rewrite is built and judged with their winners. Where a flag set forms them otherwise (the
    winners' configs do not take), that option is judged with the default configs."""

    name: str = "flags"
    tune_budget: int = 12
    rewrite_tunes: int = 2
    search: SearchSettings = SearchSettings()

    def run(self, state: ModelState, env: StageEnv) -> ModelState:
        if env.budget is not None:
            env.budget.begin_flag_stage()
        options = model_options(env, self.search.pipeline)
        if not options:
            return state.note("no model-wide flags or rewrites on this target")
        unoffered = unoffered_for(env.target)
        if unoffered:
            env.say(f"  {unoffered}")
        earlier = earlier_decision(env, options)
        if earlier is not None:
            env.say(f"model-wide choices: reusing the decision of an earlier run in {env.output_dir} "
                    f"({decision_text(earlier)})")
            env.cache.untuned_gains.update(decision_untuned(env))
            decided = self._extend_earlier(replace(state, flags=earlier.flags, flag_trials=earlier.flag_trials,
                                                   rewrites=earlier.rewrites, source=earlier.source), env)
            if decided is None:
                chosen = Variant("chosen", earlier.flags, source=earlier.source)
                return replace(state, flags=earlier.flags, flag_trials=earlier.flag_trials, rewrites=earlier.rewrites,
                               source=earlier.source, pinned=pins_for(env, chosen, self.search.pipeline)
                               if earlier.flags or earlier.source else ())
        else:
            steps = StepLog.of_run(env, options)
            decided = self._decide(state, env, options, steps)
            steps.close()
        record_decision(env, options, decided)
        return decided

    def _extend_earlier(self, state: ModelState, env: StageEnv) -> Optional[ModelState]:
        """A reused decision extended by what it did not try (a flag set its choice's own
        dispatches call for, offered since), as the stage extends its own choice; None where
        there is nothing untried (the decision stands as it was, with no build)."""
        applying = {r.name: r for r in applying_rewrites(env)}
        if not (state.flags or state.rewrites) or not set(state.rewrites) <= set(applying):
            return None
        # The choice as the stage judged it: with the kinds its flag sets tune.
        tunes = tuple(dict.fromkeys(k for f in offered_flag_sets(env, self.search.pipeline)
                                    if f.flags and set(f.flags) <= set(state.flags) for k in f.tunes))
        option = ModelOption(state.flags, combined([applying[n] for n in state.rewrites]) if state.rewrites else None,
                             tunes)
        trials = dict(state.flag_trials)
        untried = [o for o in extensions(option, list(applying.values()), self._flag_sets(env, option, state.source))
                   if o.label not in trials]
        if not untried:
            return None
        env.say(f"  not tried on it: {', '.join(short_flags(o.label) for o in untried)}")
        default = build_once(env, Variant("default"))
        best = self._build(env, default, option, trials, default, set())
        if not default.ok or best is None or not best.ok:
            return None
        figure = state.flag_trials.get(option.label)
        option, best, speedup = self._extend(env, default, option, best, figure if isinstance(figure, float) else 1.0,
                                             trials, StepLog())
        tried = {k: v for k, v in trials.items() if k not in state.flag_trials}
        env.say(f"model-wide choices: {short_flags(option.label)} ({speedup:.2f}x the default on the whole model; "
                f"tried on it: {trials_text(tried)})")
        return replace(state, flags=option.flags, flag_trials=trials, pinned=best.variant.pinned,
                       rewrites=option.rewrite.names if option.rewrite else (), source=best.variant.source)

    def _decide(self, state: ModelState, env: StageEnv, options: list[ModelOption], steps: StepLog) -> ModelState:
        default = build_once(env, Variant("default"))
        if not default.ok:
            raise ToolError(f"the model does not build with the default flags: {default.error}", list(default.flags))
        trials: dict = {}
        wrong: set[str] = set()
        judged = None
        kernels = [o for o in options if o.kernels]
        if kernels:  # the joined external kernels first; the other choices then extend the winner
            judged = self._judge(env, default, default, kernels, trials, "flag-runs-kernels", wrong, steps,
                                 first_round=True)
        fewer = without_each_kernel(env, kernels, wrong) if judged is None else []
        if fewer:  # the joined kernels computed another result: each tried without one of its kernels
            judged = self._judge(env, default, default, fewer, trials, "flag-runs-kernels-fewer", wrong, steps)
        if judged is None:
            judged = self._judge(env, default, default, [o for o in options if not o.kernels], trials, "flag-runs",
                                 wrong, steps, first_round=True)
        together = together_options(env, wrong, self.search.pipeline) if judged is None else []
        if together:
            env.say(f"  {' and '.join(together[0].rewrite.names)} each compute another result alone: "
                    "trying them together")
            judged = self._judge(env, default, default, together, trials, "flag-runs-together", wrong, steps)
        if judged is None:
            env.say(f"model-wide choices: none beats the default ({trials_text(trials)})")
            return replace(state, flag_trials=trials)
        option, best, speedup = self._extend(env, default, judged.option, judged.best, judged.speedup, trials, steps)
        why = ("; the default's result is off llvm-cpu's, so the fastest choice that computes it right is kept"
               if judged.over_wrong_default else "")
        env.say(f"model-wide choices: {short_flags(option.label)} ({speedup:.2f}x the default on the whole model{why}; "
                f"tried: {trials_text(trials)})")
        return replace(state, flags=option.flags, flag_trials=trials, pinned=best.variant.pinned,
                       rewrites=option.rewrite.names if option.rewrite else (), source=best.variant.source)

    def _judge(self, env: StageEnv, default: BuiltVariant, reference: BuiltVariant, options: list[ModelOption],
               trials: dict, directory: str, wrong: set[str], steps: StepLog, scale: float = 1.0,
               first_round: bool = False) -> Optional[Judged]:
        """Each option built (`_build`) and timed on the model against `reference`, its figure in
        `trials` (times `scale`: against the default where the reference is not it); the fastest
        that beats the reference with its speedup over it, or None. Where the reference is the
        default and its result is off llvm-cpu's, the fastest that computes it right, however it
        compares: a right model is the result before a fast wrong one (an SDXL attention block on
        cuda: pointwise-conv-as-matmul, right, 0.98x the wrong default, then raise-attention on top
        of it). The labels of those refused for computing another result are added to `wrong`.
        `first_round`: each build counted in the "choices" phase, and past the flag stage's share
        the choices built already still timed. A step an earlier run judged
        (`steps`) is taken as it was judged, untimed: its choices are built again as they were
        (from the builds and finished tunings the run left, each tuning serving the choices after
        it as it did), and the one it kept is kept."""
        labels = [o.label for o in options]
        earlier = steps.earlier(directory, labels, reference.variant.name)
        if earlier is not None:
            env.say(f"  {directory}: as an earlier run judged it, not timed again")
            untuned = earlier.get("untuned")
            env.cache.untuned_gains.update(untuned if isinstance(untuned, dict) else {})
            built = {o.label: self._build(env, default, o, trials, reference, wrong) for o in options}
            trials.update(earlier["trials"])
            wrong.update(earlier["wrong"])
            best = built.get(earlier["judged"])
            if best is None or not best.ok:
                return None
            return Judged(options[labels.index(earlier["judged"])], best, earlier["speedup"], earlier["over_wrong"])
        began = env.budget.spent() if env.budget is not None else 0.0
        untimed = None
        if not flag_share_spent(env.budget):
            prebuild(env, [v for v in (self._first_variant(env, o) for o in options) if v is not None])
            untimed = self._check_untuned(env, default, reference, options)
        built = []
        for i, option in enumerate(options, 1):  # each a model build (and searches for what it forms)
            # Past the share a choice not built yet is not tried; in the first round one built
            # already (prebuild) is timed as built, what it forms untuned (Swin-T's
            # nd-linear-as-matmul, built in the first batch, went untimed on the H200 and the run
            # kept the default). A later step's are not: ResNet-50's extensions, six built ones
            # timed past the share, held its flag stage past the whole run's budget.
            if (flag_share_spent(env.budget) and not rewrites_nothing(env, option)
                    and not (first_round and self._built(env, option))):
                trials[option.label] = NOT_TRIED
                env.budget.skip(f"model-wide choice {short_flags(option.label)}")
                continue
            b = self._build(env, default, option, trials, reference, wrong)
            if b is not None:
                built.append((option, b))
            if first_round and env.progress:
                env.progress("choices", i, len(options))
        if not built:
            steps.record(directory, labels, reference.variant.name, trials, wrong, untuned=untuned_of(env, labels, reference))
            return None
        cmp, behind = compare_halving(env, reference, [b for _, b in built], directory, timed=untimed)
        if env.budget is not None:
            env.budget.note_flag_step(env.budget.spent() - began, len(built))
        for option, b in built:
            if b.variant.name in behind:
                env.say(f"  {short_flags(option.label)}: {behind[b.variant.name]}")
        for option, b in built:
            name = b.variant.name
            trials[option.label] = (round(scale * cmp.paired[name].speedup, 4) if name in cmp.paired
                                    else cmp.failed.get(name, "failed"))
            if name in cmp.failed and name in cmp.errors:  # it ran, and its result was off
                wrong.add(option.label)
        over_wrong = reference is default and bool(cmp.reference_check)
        winners = [(o, b) for o, b in built if b.variant.name in cmp.paired and cmp.paired[b.variant.name].ratios
                   and b.variant.name not in behind and (over_wrong or cmp.paired[b.variant.name].beats_baseline)]
        option, best = max(winners, key=lambda w: cmp.paired[w[1].variant.name].speedup) if winners else (None, None)
        speedup = cmp.paired[best.variant.name].speedup if best else 1.0
        steps.record(directory, labels, reference.variant.name, trials, wrong,
                     (option and option.label, speedup, over_wrong), untuned_of(env, labels, reference))
        return Judged(option, best, speedup, over_wrong) if best else None

    def _extend(self, env: StageEnv, default: BuiltVariant, option: ModelOption, best: BuiltVariant, speedup: float,
                trials: dict, steps: StepLog) -> tuple[ModelOption, BuiltVariant, float]:
        """The choice with the other applying rewrites and the other flag sets added one at a
        time (extensions), each addition kept where the model with it beats the choice so far
        side by side (ResNet-50 on cuda: the subsample with channels-last first, then padded rows
        on top; all rewrites together would also turn its 1x1 convolutions into batched matmuls,
        slower than channels-last; direct convolutions ran 1.035x faster with O3 on top, BENCHMARKS.md).
        Each trial's figure against the default is the product of the two comparisons."""
        applying = applying_rewrites(env)
        # Each step's choice has one rewrite or flag set more than the last: the steps end.
        for step in itertools.count(1):
            # One the first round tried already (a flag set chosen alone, then a rewrite with it)
            # was slower than the choice: the same build, not timed again.
            more = [o for o in extensions(option, applying, self._flag_sets(env, option, best.variant.source))
                    if o.label not in trials]
            # The most promising first (what each adds, as it did alone in the first round): where
            # the share holds only some of them, those are tried (the Llama layer's two external
            # kernels on the H200: neither added to the other, the step of eight not fitting).
            more.sort(key=lambda o: -alone_gain(trials, option, o))
            room = flag_step_room(env.budget)
            if more and room is not None and room < len(more):
                why = ("is spent" if flag_share_spent(env.budget) else
                       f"would be spent before {len(more)} more choices are judged at the pace so far")
                left_out = more[room:]
                env.say(f"  the flag stage's share of the time budget {why}: "
                        + (f"trying {', '.join(short_flags(o.label) for o in more[:room])}; " if room else "")
                        + f"not tried on {short_flags(option.label)}: {', '.join(short_flags(o.label) for o in left_out)}")
                for o in left_out:
                    env.budget.skip(f"model-wide choice {short_flags(o.label)}")
                more = more[:room]
                if not more:
                    break
            judged = (self._judge(env, default, best, more, trials, f"flag-runs-{step}", set(), steps, scale=speedup)
                      if more else None)
            if judged is None:
                break
            option, best, gain = judged.option, judged.best, judged.speedup
            speedup *= gain
            env.say(f"  {short_flags(option.label)}: {gain:.2f}x the choice before it")
        return option, best, speedup

    def _flag_sets(self, env: StageEnv, option: ModelOption, source: Optional[Path]) -> list[ModelOption]:
        """The flag sets a choice can be extended by: those the model's dispatches offer, and
        those under which the model's pipeline would take a dispatch of the choice's own, as its
        flags and rewrites form them (under channels-last ResNet-50's 1x1 convolutions read their
        filter N x K, which the mma.sync kernel takes with the transposes kept: KEEP_TRANSPOSES)."""
        sets = offered_flag_sets(env, self.search.pipeline)
        if not self.search.pipeline or not (option.flags or source):
            return sets
        formed = formed_dispatches(env, source or env.model, option.flags)
        have = {s.flags for s in sets}
        return sets + [s for s in taking_flag_sets(formed, self.search.pipeline) if s.flags not in have]

    def _build(self, env: StageEnv, default: BuiltVariant, option: ModelOption, trials: dict,
               reference: BuiltVariant, wrong: set[str]) -> Optional[BuiltVariant]:
        """The model built with one option (the dispatches it forms tuned first, where it tunes
        any and computes the default's result untuned), or None with the reason in `trials` (and
        its label in `wrong` where the reason is another result); `reference`: what it is judged
        against (the default, or the choice it extends)."""
        source = rewritten_program(env, option.rewrite) if option.rewrite else None
        if option.rewrite and source is None:
            trials[option.label] = "nothing in the model to rewrite"
            return None
        # A dispatch the choice forms that the compiler cannot compile gets a config that can.
        pins = pins_for(env, self._first_variant(env, option), self.search.pipeline)
        untuned = self._untuned(option, source, pins)
        # Past the flag stage's share nothing it forms is tuned: its build is checked where it is
        # judged, and a check here first would run the model once more (Swin-T on the H200: the
        # first round's checks ran its flag stage 130 s past its share).
        if self._tunes(option) and not flag_share_spent(env.budget):
            off = wrong_result(env, default, untuned)
            if off:  # its dispatches are not tuned: every candidate would be judged on a wrong model
                trials[option.label] = f"{off} with the default configs (not tuned)"
                wrong.add(option.label)
                return None
        # A rewrite's dispatches are tuned in its source under the option's flags: by this
        # build's names (the read-back is by name), each one the flags form alike served by its
        # tuning under another choice. Under the default flags alone they could be judged on a
        # wrong model: the UNet widening block's 1x1 shortcut is wrong on cuda until channels-last
        # or its own rewrite takes it, and every im2col candidate was refused for it.
        gain = (env.cache.untuned_gains.get(untuned_key(option.label, reference.variant.name))
                if self._tunes(option) else None)
        if gain:
            over = "the default" if reference is default else "the choice before it"
            env.say(f"  {short_flags(option.label)}: {gain:.2f}x {over} with the compiler's configs for what it "
                    "forms: judged so, its dispatches left to the dispatch stage")
        parts = () if gain else self._tuned_parts(env, option.directory, option.tuned_kinds, source or env.model,
                                                  option.flags, said=short_flags(option.label), pins=pins)
        b = build_once(env, Variant(option.directory, option.flags, parts, source, pins))
        if parts and not b.ok:  # these flags form the created dispatch otherwise: its default config
            env.say(f"  {short_flags(option.label)}: judged with the default configs ({b.error})")
            b = build_once(env, untuned)
        extending = reference is not default
        if b.ok and ((option.flags and not option.rewrite) or extending) and same_module(b, reference):
            # A flag that changes nothing is no choice: reported, never timed as if it were one
            # (nor one added to a choice whose module it leaves as it was).
            trials[option.label] = (f"not applied: the module is the {'choice' if extending else 'default'}'s, "
                                    "byte for byte")
            return None
        return b

    def _check_untuned(self, env: StageEnv, default: BuiltVariant, reference: BuiltVariant,
                       options: list[ModelOption]) -> Optional[Comparison]:
        """Every option that tunes what it forms, built with the compiler's configs, checked and
        timed against `reference` (what it is judged against) side by side in one comparison: its
        numerics (`wrong_result` then reads them; one comparison a choice ran the default again
        each time and took DenseNet-121's first round on the H200 about 40 s), and, where it
        beats the reference so, its figure (RunCache.untuned_gains): it is then judged so, and
        what it forms is left to the dispatch stage. The README's BERT-base layer on the CPU
        spent 324 of its flag stage's 357 s tuning the dispatches two data-tiling choices form
        (no winner for two of the four) though both beat the default by 1.39-1.53x untuned. A
        choice that loses untuned is still tuned first: a raised attention can lose with the
        compiler's config and win tuned (0.72 against 0.28 ms on a Llama-style block, the
        module's docstring). Against a reference that is not the default, the numerics are the
        reference's result's, itself checked against the default's. Returns the comparison (None:
        nothing timed), whose figures the step's halving takes for the builds it timed."""
        untuned = []
        for option in options:
            program = rewritten_program(env, option.rewrite) if option.rewrite else None
            if not self._tunes(option) or (option.rewrite and program is None):
                continue
            variant = self._untuned(option, program, pins_for(env, self._first_variant(env, option),
                                                              self.search.pipeline))
            built = build_once(env, variant)
            if built.ok and untuned_key(option.label, reference.variant.name) not in env.cache.untuned_gains:
                untuned.append((option, built))
        return time_untuned(env, default, reference, [(option.label, b) for option, b in untuned])

    def _tunes(self, option: ModelOption) -> bool:
        """Whether the option's formed dispatches are tuned before it is judged."""
        return self.tune_budget > 0 and bool(option.tuned_kinds)

    def _first_variant(self, env: StageEnv, option: ModelOption) -> Optional[Variant]:
        """The option's first model build in `_build` (its numerics checked with the default
        configs where it tunes what it forms; else the build it is judged by); None where its
        rewrite finds nothing."""
        program = rewritten_program(env, option.rewrite) if option.rewrite else None
        if option.rewrite and program is None:
            return None
        return self._untuned(option, program) if self._tunes(option) else Variant(option.directory, option.flags,
                                                                                    source=program)

    def _built(self, env: StageEnv, option: ModelOption) -> bool:
        """Whether the option's first build (`_first_variant`) is made already."""
        first = self._first_variant(env, option)
        return first is not None and built_already(env, first)

    @staticmethod
    def _untuned(option: ModelOption, source: Optional[Path], pins: tuple[SpecPart, ...] = ()) -> Variant:
        """The option built with the compiler's configs for what it forms (its numerics check)."""
        return Variant(option.directory + "-default-configs", option.flags, source=source, pinned=pins)

    def _tuned_parts(self, env: StageEnv, name: str, kinds: tuple[DispatchKind, ...], source: Path,
                     flags: tuple[str, ...] = (), said: str = "", pins: tuple[SpecPart, ...] = ()
                     ) -> tuple[SpecPart, ...]:
        """tuner.stages.formed_tuning.FormedTuning.parts with this stage's budgets and search."""
        return FormedTuning(self.tune_budget, self.rewrite_tunes, self.search).parts(env, name, kinds, source, flags,
                                                                                   said, pins)
