"""A picture of a tuning: each candidate against the baseline, in the order of the ranking."""

from __future__ import annotations

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

    ranked = [r for r in ranking.ranked if not r.is_baseline and (r.speedup or r.first_pass_speedup)]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(ranked) + 2), 4.2), dpi=110)
    if ranked:
        xs = list(range(len(ranked)))
        heights = [r.speedup if r.confirmed else r.first_pass_speedup for r in ranked]
        low = [h - min(r.round_ratios) if r.confirmed else 0.0 for h, r in zip(heights, ranked)]
        high = [max(r.round_ratios) - h if r.confirmed else 0.0 for h, r in zip(heights, ranked)]
        colors = ["#2a9d8f" if r is ranking.best else "#577590" if r.confirmed else "#c9d1dc" for r in ranked]
        ax.bar(xs, heights, yerr=[low, high], color=colors, capsize=2)
        ax.set_xticks(xs, [str(r.candidate_id) for r in ranked], fontsize=7, rotation=90)
        ax.bar([], [], color="#577590", label="confirmed: median of paired rounds (range of rounds)")
        ax.bar([], [], color="#c9d1dc", label="first pass only: vs the nearest baseline timing")
    ax.axhline(1.0, color="#e76f51", linestyle="--", linewidth=1, label="the compiler's default")
    ax.plot([], [], " ", label=("best: " if ranking.best else "no winner: ") + (
        f"#{ranking.best.candidate_id}, {ranking.best.speedup:.2f}x" if ranking.best else "the default stays"))
    if ranking.failed:
        ax.plot([], [], " ", label=f"{len(ranking.failed)} not timed (failed or duplicate)")
    ax.set_xlabel("candidate (ranked)")
    ax.set_ylabel("speedup over the default (x)")
    ax.set_title(title or "Candidates against the compiler's default")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
