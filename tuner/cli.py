"""The command line: thin click decorators over the Python API; the one place errors become exit
codes. Imports nothing of the compiler at module level, so `benchmark` runs with the runtime only."""

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
@click.option("--compile-only", is_flag=True, help="Compile and verify only; `iree-tuner benchmark DIR` measures later.")
def tune(input_file: Path, target: str, num_candidates: int, output_dir: Path, dispatch_name: str | None,
         repetitions: int, compile_timeout: float, compile_only: bool) -> None:
    """Tune the largest tunable dispatch of INPUT_FILE (a .mlir with linalg ops)."""
    from tuner import api
    from tuner.settings import EvalSettings

    console = Console()
    settings = EvalSettings(compile_timeout_s=compile_timeout, repetitions=max(1, repetitions))
    with _errors_to_exit(), _progress(console) as on_progress:
        def on_candidates(dispatch, candidates) -> None:
            console.print(f"[bold]{dispatch.name}[/bold]: {dispatch.op_name} {dispatch.shape_name}, "
                          f"default {dispatch.default.pipeline}; {len(candidates)} candidates (baseline included)")

        tuning = api.tune(input_file, target, num_candidates, output_dir, dispatch_name, settings,
                          on_progress, on_candidates, compile_only)
    if tuning.ranking is None:
        ok = sum(b.result.ok for b in tuning.manifest.built)
        console.print(f"compiled {ok} of {len(tuning.manifest.built)} candidates into {output_dir}; "
                      f"measure them with: iree-tuner benchmark {output_dir}")
        return
    _summary(console, tuning.ranking, list(tuning.results), output_dir)


@main.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--device", default=None, help="Runtime device (default: the manifest's, e.g. local-task or cuda).")
@click.option("--repetitions", default=5, show_default=True, type=int, help="Timed repetitions per candidate.")
def benchmark(directory: Path, device: str | None, repetitions: int) -> None:
    """Measure the candidates compiled into DIRECTORY (needs only the IREE runtime and numpy)."""
    from tuner.benchmark_stage import benchmark_dir
    from tuner.settings import EvalSettings

    console = Console()
    with _errors_to_exit(), _progress(console) as on_progress:
        measured = benchmark_dir(directory, device, EvalSettings(repetitions=max(1, repetitions)), on_progress)
    _summary(console, measured.ranking, list(measured.results), directory)


@main.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--top", default=15, show_default=True, type=int, help="Rows of the table.")
def report(directory: Path, top: int) -> None:
    """Print the table of a finished tuning in DIRECTORY again and draw DIRECTORY/results.png."""
    import json

    from tuner.errors import InputError
    from tuner.plot import plot_ranking
    from tuner.ranking import rank
    from tuner.report import render_table
    from tuner.results import Result

    console = Console()
    with _errors_to_exit():
        path = directory / "results.json"
        if not path.is_file():
            raise InputError(f"{directory}: no results.json; run `iree-tuner tune` or `iree-tuner benchmark` first")
        try:
            data = json.loads(path.read_text())
            results = [Result.from_json(c) for c in data["candidates"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}: not a readable results file ({e})") from None
        ranking = rank(results)
        render_table(ranking, results, console, top)
        title = f"{data.get('dispatch', '')} on {data.get('device') or data.get('target', '')}".strip()
        png = plot_ranking(ranking, directory / "results.png", title)
    console.print(f"wrote {png}")


def _summary(console: Console, ranking, results, output_dir: Path) -> None:
    from tuner.report import render_table

    render_table(ranking, results, console)
    best = ranking.best
    if best is not None:
        speedup = ranking.speedup(best)
        console.print(f"best: candidate {best.candidate_id} ({best.label}), {best.median_ms:.3f} ms"
                      + (f", {speedup:.2f}x the default" if speedup else ""))
        close = ranking.within_noise_of_best()
        if close:
            console.print(f"within noise of the best: {', '.join(f'{r.candidate_id} ({r.label})' for r in close)}")
    console.print(f"wrote {output_dir}/best_spec.mlir, best_flags.txt, results.json")


class _errors_to_exit:
    """Bad input and failed tools end in one line and a non-zero exit, never a traceback."""

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


class _progress:
    """A progress bar per phase (compile, benchmark, confirm), with ETA; yields the callback."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(TextColumn("{task.description:>9}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TimeRemainingColumn(), console=console)
        self.tasks: dict[str, int] = {}

    def __enter__(self):
        self.bar.__enter__()
        return self.update

    def __exit__(self, *exc) -> None:
        self.bar.__exit__(*exc)

    def update(self, phase: str, done: int, total: int) -> None:
        if phase not in self.tasks:
            self.tasks[phase] = self.bar.add_task(phase, total=total)
        self.bar.update(self.tasks[phase], completed=done, total=total)


if __name__ == "__main__":
    main()
