"""What a tuning leaves behind: best_spec.mlir, best_flags.txt, results.json, and the table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.table import Table

from tuner.ranking import Ranking
from tuner.results import Result, Status


def write_outputs(output_dir: Path, ranking: Ranking, results: list[Result],
                  best_spec: Optional[str], best_flags: list[str], meta: dict) -> None:
    """best_spec.mlir and best_flags.txt rebuild the winner with plain iree-compile;
    results.json keeps every candidate."""
    if ranking.best is not None and best_spec is not None:
        (output_dir / "best_spec.mlir").write_text(best_spec)
        (output_dir / "best_flags.txt").write_text("\n".join(best_flags) + "\n")
    payload = {
        **meta,
        "best": ranking.best.candidate_id if ranking.best else None,
        "within_noise_of_best": [r.candidate_id for r in ranking.within_noise_of_best()],
        "candidates": [{**r.to_json(), "speedup": ranking.speedup(r)} for r in results],
    }
    (output_dir / "results.json").write_text(json.dumps(payload, indent=2))


def render_table(ranking: Ranking, results: list[Result], console: Optional[Console] = None, top: int = 15) -> None:
    console = console or Console()
    table = Table(title="Candidates, fastest first")
    for col, justify in (("#", "right"), ("config", "left"), ("status", "left"), ("median ms", "right"),
                         ("spread %", "right"), ("speedup", "right"), ("rel. error", "right")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    shown = list(ranking.ranked[:top])
    if ranking.baseline and ranking.baseline not in shown:
        shown.append(ranking.baseline)
    for r in shown + list(ranking.failed):
        speedup = ranking.speedup(r)
        table.add_row(
            str(r.candidate_id),
            r.label if len(r.label) < 90 else r.label[:87] + "...",
            r.status.value if r.ok or r.status == Status.DUPLICATE else f"[red]{r.status.value}[/red]",
            f"{r.median_ms:.3f}" if r.median_ms is not None else "-",
            f"{r.spread_pct:.1f}" if r.spread_pct is not None else "-",
            f"{speedup:.2f}x" if speedup else "-",
            f"{r.relative_error:.1e}" if r.relative_error is not None else "-",
            style="bold green" if r is ranking.best else None,
        )
    console.print(table)
    if len(ranking.ranked) > top:
        console.print(f"({len(ranking.ranked) - top} more successful candidates in results.json)")
    close = ranking.within_noise_of_best()
    if close:
        console.print(f"within noise of the best (its interquartile spread): "
                      f"{', '.join(f'{r.candidate_id} ({r.label})' for r in close)}")
