"""The model-wide choices tune-model's flag stage tries (tuner.stages.flags): each flag set the
model's pipelines offer and each program rewrite that finds something to rewrite, each alone,
and what a choice can be extended by."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from pipelines import Dispatch, DispatchKind, flags_to_take, pipeline_for
from pipelines.model_flags import OUTER_DIM_CONCAT
from tuner.rewrite import (CHAIN_CONCATS, EXTERNAL, F32_REDUCTIONS, FEEDERS, JOIN_SIBLING_LINEARS, Rewrite, combined,
                            makes_kernels, named_rewrites, rewrites_for)
from tuner.stages.base import StageEnv, discovered_program, parsed_model
from tuner.stages.ledger import REWRITES

MAX_DIRECTORY = 120  # characters of a choice's directory name (file systems take 255 bytes)


@dataclass(frozen=True)
class ModelOption:
    """One model-wide choice the flag stage tries: flags for every dispatch, a rewrite of the
    program (tuner.rewrite), or both."""

    flags: tuple[str, ...] = ()
    rewrite: Optional[Rewrite] = None
    # Flags that form dispatches of these kinds taking configs of their own (data tiling
    # materialized early: the mmt4d): judged with the largest of them tuned, as a rewrite's.
    tunes: tuple[DispatchKind, ...] = ()
    # One of external_together's: the external kernels that apply, joined (the flag stage judges
    # these first, FlagStage._decide).
    kernels: bool = False

    @property
    def tuned_kinds(self) -> tuple[DispatchKind, ...]:
        """The kinds of dispatch the choice forms that are tuned before it is judged: its
        rewrite's and its flags' (a rewrite with channels-last tunes the convolutions too)."""
        return tuple(dict.fromkeys((*(self.rewrite.tunes if self.rewrite else ()), *self.tunes)))

    @property
    def label(self) -> str:
        return " ".join([*([self.rewrite.name] if self.rewrite else []), *self.flags])

    @property
    def directory(self) -> str:
        """Its builds' directory name: the label's words, cut to a length every file system takes
        with a digest of the whole label where longer (ResNet-50's choice joining two rewrites and
        four flag sets was 273 characters: ENAMETOOLONG on the H100 machine)."""
        name = "flags-" + "-".join(part.lstrip("-") for part in self.label.split())
        if len(name) <= MAX_DIRECTORY:
            return name
        return name[:MAX_DIRECTORY - 17] + "-" + hashlib.sha256(self.label.encode()).hexdigest()[:16]


def model_options(env: StageEnv, pipeline: Optional[str] = None) -> list[ModelOption]:
    """What the flag stage tries first: each flag set the pipelines of the model's dispatches
    offer (`pipeline`: the one the model is tuned with), and each program rewrite of the
    target's kind that finds something to rewrite, each alone; the stage then adds the other
    rewrites and flag sets to the fastest one at a time (FlagStage._extend), so a pair is built
    only where one of the two won alone (issue 62: every rewrite with every flag set made 12 of
    ConvNeXt-T's 24 whole-model builds on the H200, and the choice kept there, nd-linear-as-matmul
    with O3, extends the rewrite that won alone). A rewrite that finds nothing is one option,
    reported as such. The external kernels that apply are offered together (`external_together`)
    and then not each alone where they are joined without feeders: a kernel replaces ops no other
    takes, so the joined option was ahead of each kernel alone on every model tried (five tuned on
    the H200 in the twenty-fourth session: 2.51-166x the default joined, 1.59-85x the best kernel
    alone), and each alone was a whole-model build of the first round (Swin-T's flag stage took
    308 s of a 280 s run, its share 112)."""
    flag_sets = offered_flag_sets(env, pipeline)
    together = external_together(env)
    feeders = {r.name for r in FEEDERS}
    joined = {name for option in together if not feeders & set(option.rewrite.names) for name in option.rewrite.names}
    alone = [ModelOption((), r) for r in offered_rewrites(env) if not (r in EXTERNAL and r.name in joined)]
    return flag_sets + alone + together


# Exact rewrites put first in each joined option where they apply: f32-reductions, without which
# the model's result can be off whatever else is chosen (wav2vec2 in f16); chain-concats, which
# copies the same bytes in fewer dispatches (DenseNet-121's 594 copies: 1.72 ms of 3.88 with the
# kernels on the H200). Each is offered alone too (REWRITES).
EXACT_FIRST = (F32_REDUCTIONS, CHAIN_CONCATS)


def external_together(env: StageEnv) -> list[ModelOption]:
    """The external-kernel rewrites (tuner.rewrite.EXTERNAL) that apply to the model, joined into
    one option where two or more do; and, where a rewrite of FEEDERS applies too, those feeders
    followed by the external kernels as another. Each kernel replaces ops no other one takes
    (linear layers, attentions, depthwise convolutions), so their gains multiply; judged alone, one
    that takes a small part of the model is cut behind another in the first round and its pair with
    it left for an extension step the share may not reach (ConvNeXt-T on the H200: the depthwise
    kernel 1.24x alone, the GEMM 2.89x, the pair never built in a 380 s run; built, 8.28x
    untuned). The feeders turn convolutions into matrix products the GEMM kernel takes (one,
    patchify-as-matmul, is offered only here); alone, each forms IREE matmuls and is judged as
    such. Where sibling linears read one activation (a transformer's Q, K and V projections),
    the kernels are offered with them joined first too (JOIN_SIBLING_LINEARS): one GEMM of the
    kernel's where three launched (BERT-base's 512x768x768 ones fill 96 workgroups of the H200's
    132 SMs each, the joined 512x2304x768 one 144), the attention kernel reading Q, K and V from
    its rows; judged on the model like the others. Where a rewrite of EXACT_FIRST applies it
    comes first in each (joined with a kernel alone too). Each option is judged at the
    compiler's configs for what IREE still compiles (the dispatch stage tunes those after). Where the model copies into slices of buffers
    (pipelines.model_flags.OUTER_DIM_CONCAT: DenseNet's concatenations) each is offered with its
    concatenations made outermost too: alone, that flag is judged on a default that computes
    DenseNet-121 wrong on cuda, and the step adding it to the joined option was past the flag
    stage's share on the H200."""
    offered = offered_rewrites(env)
    offered = [*offered, *(r for r in FEEDERS if r not in offered)]  # a feeder offered only here too
    applies = [r for r in offered if r.name in {e.name for e in (*EXACT_FIRST, *EXTERNAL, *FEEDERS)}
               and rewrite_changes(env, r)]
    external = [r for r in applies if r in EXTERNAL]
    feeders = [r for r in FEEDERS if r in applies]  # in the order they feed one another
    exact = [r for r in EXACT_FIRST if r in applies]
    options = [ModelOption((), combined([*exact, *external]), kernels=True)] if len(external) > 1 or (external and exact) else []
    joins = [r for r in offered if r.name == JOIN_SIBLING_LINEARS.name and rewrite_changes(env, r)]
    if external and joins:  # sibling linears as one GEMM of the kernel's, the attention reading its rows
        options.append(ModelOption((), replace(combined([*exact, *joins, *external]), tunes=()), kernels=True))
    if external and feeders:
        options.append(ModelOption((), replace(combined([*exact, *feeders, *external]), tunes=()), kernels=True))
    if env.program.in_place_copies:  # copies into slices (concatenations): each also with them made outermost
        options += [replace(o, flags=OUTER_DIM_CONCAT) for o in options]
    return options


def alone_gain(trials: dict, option: ModelOption, extension: ModelOption) -> float:
    """What `extension` adds to `option` (a rewrite or flags), as its first-round figure alone
    against the default (0 where it has none: failed, wrong or not tried)."""
    have = set(option.rewrite.names) if option.rewrite else set()
    added = [n for n in (extension.rewrite.names if extension.rewrite else ()) if n not in have]
    added.append(" ".join(f for f in extension.flags if f not in option.flags))
    figure = trials.get(" ".join(a for a in added if a))
    return figure if isinstance(figure, (int, float)) else 0.0


def without_each_kernel(env: StageEnv, kernels: Sequence[ModelOption], wrong: set[str]) -> list[ModelOption]:
    """Where a joined kernel option (external_together's) computed another result than the
    reference, that option once without each of its kernels that changes the model, in turn: a
    numerics fault of one kernel on an export it was not written against then costs that kernel,
    not every kernel with it (the options that lack it are judged as any other). Nothing where
    none was wrong or it joins fewer than two kernels."""
    first = next((o for o in kernels if o.label in wrong and o.rewrite is not None), None)
    if first is None:
        return []
    external = {e.name for e in EXTERNAL}
    parts = [p for p in (first.rewrite.parts or (first.rewrite,)) if p.name in external and rewrite_changes(env, p)]
    if len(parts) < 2:
        return []
    env.say(f"  {first.label}: another result than the reference's; each of its kernels left out in turn")
    return [replace(first, rewrite=replace(first.rewrite.without(p.name), tunes=first.rewrite.tunes)) for p in parts]


def offered_flag_sets(env: StageEnv, pipeline: Optional[str] = None,
                      dispatches: Optional[Sequence[Dispatch]] = None) -> list[ModelOption]:
    """Each flag set the pipelines of the dispatches (default: the model's under the default
    flags) offer (and, for the model's own where it copies into slices, OUTER_DIM_CONCAT), with the kinds of dispatch it forms that are tuned before it is judged; and
    those under which `pipeline`, the one the model is tuned with, would take a dispatch it
    declines as formed now (Pipeline.flags_to_take), judged with that dispatch's kind tuned."""
    flag_sets: list[tuple[str, ...]] = []
    tunes: dict[tuple[str, ...], tuple[DispatchKind, ...]] = {}

    def offer(flags: tuple[str, ...], tuned_kind: Optional[DispatchKind]) -> None:
        if flags not in flag_sets:
            flag_sets.append(flags)
        if tuned_kind is not None and tuned_kind not in tunes.get(flags, ()):
            tunes[flags] = (*tunes.get(flags, ()), tuned_kind)

    own = dispatches is None
    dispatches = env.program.dispatches if own else dispatches
    for d in dispatches:
        p = pipeline_for(d)
        for flags in map(tuple, p.model_flags_for(d) if p else ()):
            offer(flags, d.kind if flags in p.tuned_model_flags_for(d) else None)
    for option in taking_flag_sets(dispatches, pipeline):
        for kind in option.tunes:
            offer(option.flags, kind)
    if own and env.program.in_place_copies:  # no pipeline offers it: none reads a copy
        offer(OUTER_DIM_CONCAT, None)
    return [ModelOption(flags, tunes=tunes.get(flags, ())) for flags in flag_sets]


def taking_flag_sets(dispatches: Sequence[Dispatch], pipeline: Optional[str]) -> list[ModelOption]:
    """The flag sets under which `pipeline` would take dispatches it declines as formed now
    (Pipeline.flags_to_take), each with the kinds of those dispatches, tuned before it is judged."""
    tunes: dict[tuple[str, ...], tuple[DispatchKind, ...]] = {}
    for d in dispatches if pipeline else ():
        for flags in map(tuple, flags_to_take(d, pipeline)):
            if d.kind not in tunes.get(flags, ()):
                tunes[flags] = (*tunes.get(flags, ()), d.kind)
    return [ModelOption(flags, tunes=kinds) for flags, kinds in tunes.items()]


def extensions(option: ModelOption, applying: list[Rewrite], flag_sets: list[ModelOption]) -> list[ModelOption]:
    """The choice with one more applying rewrite, or with one more flag set's flags (after its
    own; the kinds either tunes are tuned). The rewrite goes where REWRITES puts it among the
    choice's own, which stay as they are (a joined option's feeder offered only there,
    patchify-as-matmul, too)."""
    have = option.rewrite.names if option.rewrite else ()
    known = {**named_rewrites(), **{r.name: r for r in applying}}
    rank = {r.name: i for i, r in enumerate(applying)}

    def with_extra(extra: Rewrite) -> Rewrite:
        at = next((i for i, n in enumerate(have) if rank.get(n, -1) > rank[extra.name]), len(have))
        return combined([known[n] for n in (*have[:at], extra.name, *have[at:])])

    more = [replace(option, rewrite=with_extra(extra)) for extra in applying if extra.name not in have]
    for f in flag_sets:
        flags = (*option.flags, *(flag for flag in f.flags if flag not in option.flags))
        if flags != option.flags:
            more.append(replace(option, flags=flags, tunes=(*option.tunes, *(k for k in f.tunes if k not in option.tunes))))
    return more


def together_options(env: StageEnv, wrong: set[str], pipeline: Optional[str] = None) -> list[ModelOption]:
    """The applying rewrites that were each refused alone for computing another result, joined
    into one, alone and with each flag set; none where fewer than two were. Each rewrite may take
    away one part that the compiler computes wrong and leave another: in an SD 1.x attention block
    on cuda, raise-attention leaves the NCHW 1x1 convolutions (1.1 off llvm-cpu) and
    pointwise-conv-as-matmul the batch matmuls over heads of 40 (not finite): only together can
    the build be right (BENCHMARKS.md, "Four held-out Stable Diffusion blocks on the H100")."""
    refused = [r for r in applying_rewrites(env) if r.name in wrong]  # REWRITES order: the joined name is stable
    if len(refused) < 2:
        return []
    together = combined(refused)
    return [ModelOption((), together)] + [replace(f, rewrite=together) for f in offered_flag_sets(env, pipeline)]


def offered_rewrites(env: StageEnv) -> tuple[Rewrite, ...]:
    return rewrites_for(env.target)


def applying_rewrites(env: StageEnv) -> list[Rewrite]:
    """The offered rewrites that find something to rewrite in the model, in REWRITES order."""
    return [r for r in offered_rewrites(env) if rewrite_changes(env, r)]


def rewrite_changes(env: StageEnv, rewrite: Rewrite) -> list[str]:
    """What `rewrite` changes in the model (empty: nothing), found once per run on a copy of the
    model's program parsed once (`RunCache.parsed`); nothing is written."""
    if rewrite.name not in env.cache.changes:
        parsed = parsed_model(env)
        known = set(parsed.failures)
        with env.ledger.timed(REWRITES):
            changed = parsed.changes(rewrite, prebuild=makes_kernels(rewrite))
        env.cache.changes[rewrite.name] = changed
        for name in set(parsed.failures) - known:  # said once a run: a fault of ours, not the model's
            env.say(f"  {name}: failed on this model and left out ({parsed.failures[name]})")
        if changed:
            env.say(f"  {rewrite.name}: {len(changed)} to rewrite ({changes_text(changed)})")
    return env.cache.changes[rewrite.name]


def rewritten_program(env: StageEnv, rewrite: Rewrite) -> Optional[Path]:
    """The model's program rewritten (DIR/imported/NAME.REWRITE.mlir, written once per run, when
    first asked for: to be built), or None when the rewrite finds nothing to change."""
    if rewrite.name not in env.cache.rewritten:
        out = env.output_dir / "imported" / f"{env.model.stem}.{rewrite.name}.mlir"
        changed = rewrite_changes(env, rewrite)
        if changed:
            with env.ledger.timed(REWRITES):
                parsed_model(env).write(rewrite, out)
            env.say(f"  {rewrite.name}: written to {out}")
        env.cache.rewritten[rewrite.name] = out if changed else None
    return env.cache.rewritten[rewrite.name]


def formed_dispatches(env: StageEnv, source: Path, flags: tuple[str, ...]) -> tuple[Dispatch, ...]:
    """The dispatches `source` forms under the model-wide `flags`, discovered once per run."""
    return tuple(discovered_program(env, source, flags).dispatches)


def rewrites_nothing(env: StageEnv, option: ModelOption) -> bool:
    """Whether the option is a rewrite that finds nothing in the model to change (found without
    a build: such an option is said so, and not "not tried", however little time is left)."""
    return option.rewrite is not None and not rewrite_changes(env, option.rewrite)


def changes_text(changed: list[str], most: int = 6) -> str:
    """What a rewrite changed, each distinct change once with how many times (in the order first
    met), the first `most` of them: ResNet-50's 33 1x1 convolutions made a line of 1,300 characters."""
    counts: dict[str, int] = {}
    for change in changed:
        counts[change] = counts.get(change, 0) + 1
    shown = [f"{c} ({n} times)" if n > 1 else c for c, n in list(counts.items())[:most]]
    more = len(counts) - most
    return ", ".join(shown) + (f" and {more} more kind{'s' if more > 1 else ''}" if more > 0 else "")
