"""A picture of a tuning: every candidate's median time against the baseline's, fastest first."""

from __future__ import annotations

from pathlib import Path

from tuner.ranking import Ranking


def plot_ranking(ranking: Ranking, path: Path, title: str = "") -> Path:
    """Write a PNG: one bar per measured candidate (interquartile spread as error bars), the
    baseline's median as a line, the winner highlighted, and a count of failed candidates."""
    import matplotlib

    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    ranked = list(ranking.ranked)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.28 * len(ranked) + 2), 4.2), dpi=110)
    if ranked:
        xs = range(len(ranked))
        medians = [r.median_ms for r in ranked]
        errors = [r.median_ms * (r.spread_pct or 0.0) / 200.0 for r in ranked]
        colors = ["#2a9d8f" if r is ranking.best else "#8d99ae" if not r.is_baseline else "#e76f51" for r in ranked]
        ax.bar(xs, medians, yerr=errors, color=colors, capsize=2)
        ax.set_xticks(list(xs), [str(r.candidate_id) for r in ranked], fontsize=7, rotation=90)
    if ranking.baseline is not None and ranking.baseline.median_ms:
        ax.axhline(ranking.baseline.median_ms, color="#e76f51", linestyle="--", linewidth=1,
                   label=f"baseline {ranking.baseline.median_ms:.3f} ms")
    if ranking.best is not None and ranking.speedup(ranking.best):
        ax.plot([], [], " ", label=f"best: #{ranking.best.candidate_id}, {ranking.speedup(ranking.best):.2f}x")
    if ranking.failed:
        ax.plot([], [], " ", label=f"{len(ranking.failed)} not timed (failed or duplicate)")
    ax.set_xlabel("candidate (fastest first)")
    ax.set_ylabel("median time (ms)")
    ax.set_title(title or "Candidates against the compiler's default")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
