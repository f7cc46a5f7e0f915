"""The runs a directory's result store holds, as a table (`iree-tuner report DIR`, and the
History section of its --html page): a directory tuned again keeps what every run left in
DIR/results.sqlite, and this is where a person sees it."""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console
from rich.table import Table



def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


def render_history(store: Path, runs: list[dict], console: Console) -> None:
    """Print the table of `runs`, what the store at `store` holds (tuner.store.store_history), on
    `console`; nothing where it holds none."""
    if not runs:
        return
    table = Table(title=f"runs in {store}", title_justify="left")
    numbers = ("results", "timed", "failed", "dispatches", "best first pass", "confirmed")
    for column in ("run (host:process:start)", "first result", "last result", *numbers):
        table.add_column(column, justify="right" if column in numbers else "left")
    for run in runs:
        first = f"{run['best_first_pass']:.2f}x" if run["best_first_pass"] else "-"
        confirmed = (f"{run['confirmed']:.2f}x" + (" (under load)" if run["confirmed_loaded"] else "")
                     if run["confirmed"] else "-")
        table.add_row(run["run"], _when(run["first"]), _when(run["last"]), str(run["results"]), str(run["ok"]),
                      str(run["failed"]), str(len(run["dispatches"])), first, confirmed)
    console.print(table)
