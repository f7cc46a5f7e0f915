"""Pictures of a tuning: each candidate against the baseline in the order of the ranking, the
search's history (the best first-pass figure so far against evaluations), and for a tune-model
run each dispatch's gain beside the model's."""

from __future__ import annotations

import math
from pathlib import Path

from tuner.ranking import Ranking
from tuner.report.outputs import short_dispatch_name

WINNER, CONFIRMED, FIRST_PASS, DEFAULT, CHOSEN = "#2a9d8f", "#577590", "#c9d1dc", "#e76f51", "#264653"
# A first-pass bar taller than this many times the tallest confirmed one is cut at that height,
# its figure written on it: one timing beside a drifted baseline (10.4x) squeezed a 1.42x
# winner to the bottom of the panel (issue 63).
FIRST_PASS_HEADROOM = 2.0


def _ticks(results, width: int = 34) -> list[str]:
    """Each candidate's id and config, less the words every label shares (the intrinsic, say),
    cut to `width`."""
    import os.path

    words = [r.label.split() for r in results]
    shared = len(os.path.commonprefix(words)) if len(words) > 1 else 0
    out = []
    for r, w in zip(results, words):
        text = f"{r.candidate_id}: {' '.join(w[shared:]) or r.label}"
        out.append(text if len(text) <= width else text[: width - 1] + "\u2026")
    return out


def plot_ranking(ranking: Ranking, path: Path, title: str = "") -> Path:
    """Write a PNG of two panels. Left: one bar per measured candidate, named by id and config,
    its speedup over the baseline (the paired median for the confirmed ones, with the range of
    their per-round ratios; the first-pass figure, paler and without a range, which one timing
    does not have, for the others), a line at 1.0 (the default), the winner highlighted, and a
    count of failed candidates. Right: the search's history, each candidate's first-pass figure
    in the order it was evaluated and the best so far."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ranked = [r for r in ranking.ranked if not r.is_baseline and (r.speedup or r.first_pass_speedup)]
    fig, (ax, hist) = plt.subplots(1, 2, figsize=(max(6.0, 0.3 * len(ranked) + 2) + 5.0, 5.6), dpi=110,
                                   gridspec_kw={"width_ratios": [max(6.0, 0.3 * len(ranked) + 2), 5.0]})
    if ranked:
        xs = list(range(len(ranked)))
        heights = [r.speedup if r.confirmed else r.first_pass_speedup for r in ranked]
        colors = [WINNER if r is ranking.best else CONFIRMED if r.confirmed else FIRST_PASS for r in ranked]
        # One timing each, beside the nearest baseline's: not a claim (hatched, so that a tall pale
        # bar does not read as a result above the winner's, issue 63).
        ax.bar(xs, heights, color=colors, hatch=["" if r.confirmed else "///" for r in ranked], edgecolor="white")
        # The range of the rounds each confirmed height is the median of (a winner's: its fresh rounds).
        # Figures a results file may hold that no range can be drawn for (1e308: a median of two
        # is inf) are drawn without one; a range never goes below zero by rounding.
        confirmed = [(x, h, r) for x, h, r in zip(xs, heights, ranked) if r.confirmed and r.speedup_ratios
                     and all(math.isfinite(v) for v in (h, *r.speedup_ratios))]
        if confirmed:
            ax.errorbar([x for x, _, _ in confirmed], [h for _, h, _ in confirmed],
                        yerr=[[max(0.0, h - min(r.speedup_ratios)) for _, h, r in confirmed],
                              [max(0.0, max(r.speedup_ratios) - h) for _, h, r in confirmed]],
                        fmt="none", ecolor="black", capsize=2, linewidth=0.8)
        ax.set_xticks(xs, _ticks(ranked), fontsize=6, rotation=90)
        top = FIRST_PASS_HEADROOM * max([1.0] + [h for h, r in zip(heights, ranked) if r.confirmed and math.isfinite(h)])
        cut = [(x, h) for x, h, r in zip(xs, heights, ranked) if not r.confirmed and h > top]
        if cut:
            ax.set_ylim(0, top)
            for x, h in cut:
                ax.text(x, 0.97 * top, f"{h:.1f}x", ha="center", va="top", fontsize=6, rotation=90)
    ax.axhline(1.0, color=DEFAULT, linestyle="--", linewidth=1)
    claim = ranking.best.speedup_interval if ranking.best else None
    verdict = (f"best: #{ranking.best.candidate_id}, {ranking.best.speedup:.2f}x"
               + (f" ({claim.low:.2f}-{claim.high:.2f}, {100 * claim.coverage:.0f}%)" if claim else "")
               if ranking.best else "no winner: the default stays")
    handles = [Patch(color=WINNER, label=verdict),
               Patch(color=CONFIRMED, label="confirmed: median of paired rounds (bar: their range)"),
               Patch(facecolor=FIRST_PASS, hatch="///", edgecolor="white",
                     label="first pass only: one timing vs the nearest baseline's (not a claim)"),
               Line2D([], [], color=DEFAULT, linestyle="--", label="the compiler's default (1.0x)")]
    if ranking.failed:
        handles.append(Patch(color="white", label=f"{len(ranking.failed)} not timed (failed or duplicate)"))
    ax.set_xlabel("candidate (ranked): id and config")
    ax.set_ylabel("speedup over the default (x)")
    ax.set_title(title or "Candidates against the compiler's default", fontsize=9)
    ax.legend(handles=handles, loc="best", fontsize=6, framealpha=0.8)
    _history(hist, ranking)
    fig.tight_layout()
    return _save(fig, plt, path)


def history_points(ranking: Ranking) -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """The search's history as (evaluation, first-pass figure) points: those timed beside a
    baseline near its usual time, and those whose nearest baseline timing ran beyond LOAD_CHANGE
    slower than the baselines' median (a load came: a 10.4x against a baseline that had drifted
    from 29.7 to 292 ms dominated a plot, issue 63), which the best-so-far line leaves out.
    Failed candidates are points at 0."""
    import statistics

    from tuner.core.comparison import LOAD_CHANGE

    tried = sorted((r for r in (*ranking.ranked, *ranking.failed) if not r.is_baseline), key=lambda r: r.candidate_id)
    bases = [r.baseline_ms for r in tried if r.baseline_ms]
    usual = statistics.median(bases) if bases else None
    kept, drifted = [], []
    for i, r in enumerate(tried, 1):
        point = (i, r.first_pass_speedup or 0.0)
        off = usual is not None and r.baseline_ms is not None and r.baseline_ms > usual * (1 + LOAD_CHANGE)
        (drifted if off else kept).append(point)
    return kept, drifted


def _history(ax, ranking: Ranking) -> None:
    """The search as it went: each evaluated candidate's first-pass figure by evaluation (the
    candidates' ids are the order they were proposed in), failed ones at 0, and the best so far;
    figures timed beside a drifted baseline hollow, and out of the best so far."""
    kept, drifted = history_points(ranking)
    best, steps = 0.0, []
    for x, f in kept:
        best = max(best, f)
        steps.append((x, best))
    ax.scatter([x for x, _ in kept], [f for _, f in kept], s=10, color=CONFIRMED,
               label="each candidate (first pass; 0: failed)")
    top = FIRST_PASS_HEADROOM * max([1.0] + [f for _, f in kept])
    if drifted:  # drawn at most at `top`, its figure written beside it where it is higher
        ax.scatter([x for x, _ in drifted], [min(f, top) for _, f in drifted], s=14, facecolors="none",
                   edgecolors=CONFIRMED, label="beside a drifted baseline (left out of the best)")
        for x, f in drifted:
            if f > top:
                ax.text(x, top, f" {f:.1f}x", fontsize=6, va="center")
        ax.set_ylim(0, top * 1.05)
    if steps:
        ax.step([x for x, _ in steps], [b for _, b in steps], where="post", color=WINNER, label="best so far")
    ax.axhline(1.0, color=DEFAULT, linestyle="--", linewidth=1)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("first-pass speedup (x)")
    ax.set_title("The search's history", fontsize=9)
    ax.legend(fontsize=7, frameon=False)


def plot_model(data: dict, path: Path) -> Path:
    """Write a PNG of a tune-model run (its results.json): per tuned dispatch (labelled with its
    share of the time), its tuning's speedup and its winner's effect on the whole model; then the
    tuned model against the default. A log scale where the figures span more than 10x."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import textwrap
    from matplotlib.patches import Patch

    rows = [d for d in data.get("dispatches", []) if d.get("speedup") or d.get("model_speedup")]
    figure = (data.get("figure") or {}).get("speedup")
    choices = model_choice_bars(data)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * (len(rows) + len(choices)) + 3) + 3.5, 5.0), dpi=110)
    # The model-wide choices tried, each against the default on the whole model (the kept one
    # marked), first: a gain made by data tiling alone was not in the picture (issue 63).
    cx = list(range(len(choices)))
    ax.bar(cx, [v for _, v, _ in choices], width=0.6, color=[CHOSEN if kept else FIRST_PASS for _, _, kept in choices])
    xs = [len(choices) + x for x in range(len(rows))]
    ax.bar([x - 0.2 for x in xs], [d.get("speedup") or 0.0 for d in rows], width=0.4, color=CONFIRMED)
    ax.bar([x + 0.2 for x in xs], [d.get("model_speedup") or 0.0 for d in rows], width=0.4, color=WINNER)
    share = lambda d: f" ({100 * d['share']:.0f}%)" if d.get("share") else ""  # noqa: E731
    labels = (["\n".join(textwrap.wrap(label, 28)[:3]) for label, _, _ in choices]
              + [short_dispatch_name(d["name"])[:30] + share(d) for d in rows])
    if figure:
        ax.bar([len(labels)], [figure], width=0.4, color="black")
        labels.append("the model")
    ax.set_xticks(list(range(len(labels))), labels, fontsize=6, rotation=60, ha="right")
    ax.set_xlim(-0.75, max(len(labels), 2) - 0.25)
    values = ([v for d in rows for v in (d.get("speedup"), d.get("model_speedup")) if v] + ([figure] if figure else [])
              + [v for _, v, _ in choices])
    if values and max(values) / max(min(values), 1e-9) > 10:
        ax.set_yscale("log")
    ax.axhline(1.0, color=DEFAULT, linestyle="--", linewidth=1)
    kept = " ".join([*data.get("rewrites", []), *data.get("flags", [])])
    ax.set_ylabel("speedup over the default (x)")
    common = common_choice_parts(data)
    title = (f"@{data.get('entry', '')} on {data.get('target', '')}" + (f"; model-wide: {kept}" if kept else "")
             + ("" if rows else "; no dispatch kept a config")
             + (f"; every choice tried with {' '.join(common)}" if common else ""))
    ax.set_title("\n".join(textwrap.wrap(title, 90)[:4]), fontsize=7)
    ax.legend(handles=[Patch(color=FIRST_PASS, label="a model-wide choice tried, against the default"),
                       Patch(color=CHOSEN, label="the model-wide choice kept"),
                       Patch(color=CONFIRMED, label="the dispatch, in its tuning (as the table's 'timed' says)"),
                       Patch(color=WINNER, label="the model with its winner against without it"),
                       Patch(color="black", label="the tuned model against the default"
                                                  + (f": {figure:.2f}x" if figure else "")),
                       plt.Line2D([], [], color=DEFAULT, linestyle="--", label="the default (1.0x)")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    fig.tight_layout()
    return _save(fig, plt, path)


def model_choice_bars(data: dict) -> list[tuple[str, float, bool]]:
    """Each model-wide choice a tune-model run timed (results.json's flag_trials with a figure),
    as (its short label, its speedup over the default on the whole model, whether it is the
    one kept), in the order tried. A label leaves out the parts (rewrites and flags) every
    choice timed has (`common_choice_parts`), so that what tells the bars apart is what is read."""
    from tuner.report.outputs import kept_choice

    kept = kept_choice(data)
    timed = _timed_choices(data)
    common = set(common_choice_parts(data))
    return [(" ".join(p for p in _choice_parts(choice) if p not in common) or "(the common part alone)", figure,
             choice == kept) for choice, figure in timed]


def common_choice_parts(data: dict) -> list[str]:
    """The rewrites and flags (by short name) every model-wide choice timed has, where there are
    two or more: the plot names them once, in its title."""
    parts = [_choice_parts(choice) for choice, _ in _timed_choices(data)]
    return [p for p in parts[0] if all(p in other for other in parts[1:])] if len(parts) > 1 else []


def _timed_choices(data: dict) -> list[tuple[str, float]]:
    return [(choice, float(figure)) for choice, figure in (data.get("flag_trials") or {}).items()
            if isinstance(figure, (int, float)) and math.isfinite(figure) and figure > 0]


def _choice_parts(choice: str) -> list[str]:
    """A choice's label (rewrites joined by `+`, then flags) as its parts, the flags by short name."""
    try:
        from pipelines.model_flags import short_flags
    except ImportError:  # a runtime-only machine: the flags as they are
        short_flags = str  # noqa: E731
    words = short_flags(choice).split()
    rewrites = words[0].split("+") if words and not choice.startswith("-") else []
    return [*rewrites, *(words[1:] if rewrites else words)]


def _save(fig, plt, path: Path) -> Path:
    """The picture as a new file in `path`'s place (never written through a planted link), with
    the mode the umask gives, as every output of the tuner."""
    from tuner.run_dir import write_file

    try:
        return write_file(path, lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
