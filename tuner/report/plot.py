"""A picture of a tuning: each candidate against the baseline, in the order of the ranking."""

from __future__ import annotations

import os
import tempfile

from pathlib import Path

from tuner.ranking import Ranking


def plot_ranking(ranking: Ranking, path: Path, title: str = "") -> Path:
    """Write a PNG: one bar per measured candidate, its speedup over the baseline (the paired
    median for the confirmed ones, with the range of their per-round ratios; the first-pass
    figure, paler, for the others), a line at 1.0 (the default), the winner highlighted, and a
    count of failed candidates."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    ranked = [r for r in ranking.ranked if not r.is_baseline and (r.speedup or r.first_pass_speedup)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(ranked) + 2), 5.0), dpi=110)
    if ranked:
        xs = list(range(len(ranked)))
        heights = [r.speedup if r.confirmed else r.first_pass_speedup for r in ranked]
        # The range of the rounds each height is the median of (a winner's: its fresh rounds).
        low = [h - min(r.speedup_ratios) if r.confirmed else 0.0 for h, r in zip(heights, ranked)]
        high = [max(r.speedup_ratios) - h if r.confirmed else 0.0 for h, r in zip(heights, ranked)]
        colors = ["#2a9d8f" if r is ranking.best else "#577590" if r.confirmed else "#c9d1dc" for r in ranked]
        ax.bar(xs, heights, yerr=[low, high], color=colors, capsize=2)
        ax.set_xticks(xs, [str(r.candidate_id) for r in ranked], fontsize=7, rotation=90)
    ax.axhline(1.0, color="#e76f51", linestyle="--", linewidth=1)
    verdict = (f"best: #{ranking.best.candidate_id}, {ranking.best.speedup:.2f}x" if ranking.best
               else "no winner: the default stays")
    handles = [Patch(color="#2a9d8f", label=verdict),
               Patch(color="#577590", label="confirmed: median of paired rounds (bar: their range)"),
               Patch(color="#c9d1dc", label="first pass only: vs the nearest baseline timing"),
               Line2D([], [], color="#e76f51", linestyle="--", label="the compiler's default (1.0x)")]
    if ranking.failed:
        handles.append(Patch(color="white", label=f"{len(ranking.failed)} not timed (failed or duplicate)"))
    ax.set_xlabel("candidate (ranked)")
    ax.set_ylabel("speedup over the default (x)")
    ax.set_title(title or "Candidates against the compiler's default")
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=7, frameon=False)
    fig.tight_layout()
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as f:  # a new file in its place: never written through a planted link
        f.write(buffer.getvalue())
    os.replace(tmp, path)
    return path
