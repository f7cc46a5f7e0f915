"""Pictures of a tuning: each candidate against the baseline in the order of the ranking, the
search's history (the best first-pass figure so far against evaluations), and for a tune-model
run each dispatch's gain beside the model's."""

from __future__ import annotations

import math
from pathlib import Path

from tuner.ranking import Ranking
from tuner.report.outputs import short_dispatch_name

WINNER, CONFIRMED, FIRST_PASS, DEFAULT = "#2a9d8f", "#577590", "#c9d1dc", "#e76f51"


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
        ax.bar(xs, heights, color=colors)
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
    ax.axhline(1.0, color=DEFAULT, linestyle="--", linewidth=1)
    verdict = (f"best: #{ranking.best.candidate_id}, {ranking.best.speedup:.2f}x" if ranking.best
               else "no winner: the default stays")
    handles = [Patch(color=WINNER, label=verdict),
               Patch(color=CONFIRMED, label="confirmed: median of paired rounds (bar: their range)"),
               Patch(color=FIRST_PASS, label="first pass only: vs the nearest baseline timing"),
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


def _history(ax, ranking: Ranking) -> None:
    """The search as it went: each evaluated candidate's first-pass figure by evaluation (the
    candidates' ids are the order they were proposed in), failed ones at 0, and the best so far."""
    tried = sorted((r for r in (*ranking.ranked, *ranking.failed) if not r.is_baseline), key=lambda r: r.candidate_id)
    figures = [r.first_pass_speedup or 0.0 for r in tried]
    best, so_far = 0.0, []
    for f in figures:
        best = max(best, f)
        so_far.append(best)
    xs = list(range(1, len(tried) + 1))
    ax.scatter(xs, figures, s=10, color=CONFIRMED, label="each candidate (first pass; 0: failed)")
    ax.step(xs, so_far, where="post", color=WINNER, label="best so far")
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
    from matplotlib.patches import Patch

    rows = [d for d in data.get("dispatches", []) if d.get("speedup") or d.get("model_speedup")]
    figure = (data.get("figure") or {}).get("speedup")
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(rows) + 3), 5.0), dpi=110)
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [d.get("speedup") or 0.0 for d in rows], width=0.4, color=CONFIRMED)
    ax.bar([x + 0.2 for x in xs], [d.get("model_speedup") or 0.0 for d in rows], width=0.4, color=WINNER)
    share = lambda d: f" ({100 * d['share']:.0f}%)" if d.get("share") else ""  # noqa: E731
    labels = [short_dispatch_name(d["name"])[:30] + share(d) for d in rows]
    if figure:
        ax.bar([len(rows)], [figure], width=0.4, color="black")
        labels.append("the model")
    ax.set_xticks(list(range(len(labels))), labels, fontsize=6, rotation=60, ha="right")
    ax.set_xlim(-0.75, max(len(labels), 2) - 0.25)
    values = [v for d in rows for v in (d.get("speedup"), d.get("model_speedup")) if v] + ([figure] if figure else [])
    if values and max(values) / max(min(values), 1e-9) > 10:
        ax.set_yscale("log")
    ax.axhline(1.0, color=DEFAULT, linestyle="--", linewidth=1)
    kept = " ".join([*data.get("rewrites", []), *data.get("flags", [])])
    ax.set_ylabel("speedup over the default (x)")
    import textwrap

    title = (f"@{data.get('entry', '')} on {data.get('target', '')}" + (f"; model-wide: {kept}" if kept else "")
             + ("" if rows else "; no dispatch kept a config"))
    ax.set_title("\n".join(textwrap.wrap(title, 90)[:3]), fontsize=7)
    ax.legend(handles=[Patch(color=CONFIRMED, label="the dispatch, in its tuning (as the table's 'timed' says)"),
                       Patch(color=WINNER, label="the model with its winner against without it"),
                       Patch(color="black", label="the tuned model against the default"
                                                  + (f": {figure:.2f}x" if figure else "")),
                       plt.Line2D([], [], color=DEFAULT, linestyle="--", label="the default (1.0x)")],
              loc="best", fontsize=7, framealpha=0.8)
    fig.tight_layout()
    return _save(fig, plt, path)


def _save(fig, plt, path: Path) -> Path:
    """The picture as a new file in `path`'s place (never written through a planted link), with
    the mode the umask gives, as every output of the tuner."""
    from tuner.run_dir import write_file

    try:
        return write_file(path, lambda f: fig.savefig(f, format="png"))
    finally:
        plt.close(fig)
