"""The command line: thin click decorators over tuner.api; the one place errors become exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tuner.errors import TunerError


@click.group()
def main() -> None:
    """Tune IREE dispatches: enumerate lowering configs, compile and time them, keep the best."""


@main.command()
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target (llvm-cpu).")
@click.option("--num-candidates", default=30, show_default=True, type=int, help="Configs to try besides the baseline.")
@click.option("--output", "output_dir", default="tuning-output", show_default=True, type=click.Path(path_type=Path),
              help="Where best_spec.mlir, best_flags.txt and results.json go.")
@click.option("--dispatch", "dispatch_name", default=None, help="Which dispatch to tune (default: the largest).")
@click.option("--repetitions", default=5, show_default=True, type=int, help="Timed repetitions per candidate.")
@click.option("--compile-timeout", default=300.0, show_default=True, type=float, help="Seconds per compile.")
def tune(input_file: Path, target: str, num_candidates: int, output_dir: Path, dispatch_name: str | None,
         repetitions: int, compile_timeout: float) -> None:
    """Tune the largest tunable dispatch of INPUT_FILE (a .mlir with linalg ops)."""
    from tuner import api
    from tuner.evaluate import EvalSettings
    from tuner.report import render_table

    console = Console(stderr=False)
    settings = EvalSettings(compile_timeout_s=compile_timeout, repetitions=max(1, repetitions))
    with _errors_to_exit(console), _progress(console) as bar:
        tasks: dict[str, int] = {}

        def on_progress(phase: str, done: int, total: int) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        def on_candidates(dispatch, candidates) -> None:
            console.print(f"[bold]{dispatch.name}[/bold]: {dispatch.op_name} {dispatch.shape_name}, "
                          f"default {dispatch.default.pipeline}; {len(candidates)} candidates (baseline included)")

        tuning = api.tune(input_file, target, num_candidates, output_dir, dispatch_name, settings,
                          on_progress, on_candidates)
    render_table(tuning.ranking, list(tuning.results), console)
    best = tuning.ranking.best
    if best is not None:
        speedup = tuning.ranking.speedup(best)
        console.print(f"best: candidate {best.candidate_id} ({best.label}), {best.median_ms:.3f} ms"
                      + (f", {speedup:.2f}x the default" if speedup else ""))
    console.print(f"wrote {output_dir}/best_spec.mlir, best_flags.txt, results.json")


class _errors_to_exit:
    """Bad input and failed tools end in one line and a non-zero exit, never a traceback."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if isinstance(error, TunerError):
            click.echo(f"error: {error}", err=True)
            sys.exit(error.exit_code)
        if isinstance(error, KeyboardInterrupt):
            click.echo("interrupted: results so far are in results.jsonl; run again to resume", err=True)
            sys.exit(130)
        return False


def _progress(console: Console) -> Progress:
    return Progress(TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False)


if __name__ == "__main__":
    main()
