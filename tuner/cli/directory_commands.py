"""Commands over a finished run's directory: `report` prints its table again and plots it,
`rebuild` compiles its result with the compiler of the tuner's own environment."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from tuner.core.names import printable
from tuner.cli.say import errors_to_exit, stats_line
from tuner.errors import InputError, OutputError
from tuner.report.outputs import make_console, read_families
from tuner.report.rebuild import rebuild_line


@click.command(short_help="Print a finished tuning's table again, and plot it.")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--top", default=15, show_default=True, type=click.IntRange(min=1), help="Rows of the table.")
@click.option("--html", "as_html", is_flag=True,
              help="Also write DIRECTORY/report.html: the report, the plot and the rebuild command in one "
                   "self-contained page.")
def report(directory: Path, top: int, as_html: bool) -> None:
    """Print the table of a finished tuning in DIRECTORY again and draw DIRECTORY/results.png:
    the candidates against the default and the search's history (for a tune-model directory: its
    per-dispatch table, each dispatch's gain beside the model's); the runs its result store holds;
    then the rebuild command. With --html, the same in DIRECTORY/report.html."""
    from tuner.report.history import render_history
    from tuner.report.html import recording_console, write_page
    from tuner.store import STORE, store_history
    from tuner.report.plot import plot_model, plot_ranking
    from tuner.ranking import rank
    from tuner.report.outputs import render_model, render_table
    from tuner.core.results import Result

    console = make_console()
    consoles = [console, recording_console()] if as_html else [console]
    with errors_to_exit():
        if directory.name == "results.json" and directory.is_file():
            directory = directory.parent  # the file named instead of its directory
        path = directory / "results.json"
        if not directory.is_dir():
            raise InputError(f"{directory}: no such directory; name the --output directory of a `tune` or `tune-model` run")
        if not path.is_file():
            raise InputError(f"{directory}: no results.json; run `iree-tuner tune` or `iree-tuner benchmark` first")
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"a {type(data).__name__}, not the object this tuner writes")
            model = data.get("kind") == "model"
            if model:
                for c in consoles:
                    render_model(data, c)
            else:
                results = [Result.from_json(c) for c in data["candidates"]]
                families = read_families(data.get("families"))
                if data.get("evaluation") is not None and not isinstance(data["evaluation"], dict):
                    raise ValueError(f"its evaluation {data['evaluation']!r} is not an object")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise InputError(f"{path}: not a readable results file ({e})") from None
        if not model:
            ranking = rank(results)
            for c in consoles:
                render_table(ranking, results, c, top, families)
                if data.get("evaluation"):
                    c.print(stats_line(data["evaluation"]))
                c.print(("best: " if ranking.best else "no winner: ") + printable(ranking.verdict))
        title = f"{data.get('dispatch', '')} on {', '.join(data.get('devices', [])) or data.get('target', '')}".strip()
        try:
            png = (plot_model(data, directory / "results.png") if model
                   else plot_ranking(ranking, directory / "results.png", title))
        except (KeyError, TypeError, ValueError) as e:
            raise InputError(f"{path}: not a readable results file ({e})") from None
        except OSError as e:
            raise OutputError(f"cannot write {directory / 'results.png'}: {e.strerror or e}") from None
        console.print(f"wrote {png}")
        runs = store_history(directory / STORE) if (directory / STORE).is_file() else []
        history = recording_console() if as_html and runs else None
        for c in (console, history) if runs else ():
            if c is not None:
                render_history(directory / STORE, runs, c)
        if as_html:
            verdict = printable(str(data.get("verdict") or (ranking.verdict if not model else "")))
            heading = (f"tune-model {Path(str(data.get('input', ''))).name} on {data.get('target', '')}" if model
                       else f"tune {title}")
            try:
                page = write_page(directory / "report.html", heading, verdict, consoles[1], png, rebuild_line(directory),
                                  history)
            except OSError as e:
                raise OutputError(f"cannot write {directory / 'report.html'}: {e.strerror or e}") from None
            console.print(f"wrote {page}")
    console.print(f"rebuild with: {rebuild_line(directory)}")


@click.command(short_help="Compile a finished tuning's result with plain iree-compile.")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out", required=True, type=click.Path(path_type=Path),
              help="The module to write (.vmfb).")
def rebuild(directory: Path, out: Path) -> None:
    """Compile the result of the `tune` or `tune-model` run in DIRECTORY (its program with
    best_flags.txt or model_flags.txt) into OUT with the iree-compile of the environment the
    tuner runs in: no activated environment and no PATH needed. Prints how to run the module
    where the model reads external parameters."""
    from tuner.report.rebuild import rebuild as compile_result

    console = make_console()
    with errors_to_exit():
        target = compile_result(directory, out)
    console.print(f"wrote {out}", soft_wrap=True)
    if target.parameters:
        console.print("run it with its parameters (and your inputs, --input=...): "
                      + " ".join(map(shlex.quote, target.run_command(out.resolve()))), markup=False, soft_wrap=True)


# Where a run keeps the inputs it generated and ran on: tune-model's, tune's, a two-machine tune's.
INPUT_DIRECTORIES = ("model-inputs", "candidates/inputs", "inputs")  # "inputs": a two-machine run's manifest


def _tuners_inputs(directory: Path) -> tuple[str, ...]:
    """The --input values of the inputs the run in `directory` generated, in order (none where
    it kept none); only files inside the directory, never through a link out of it."""
    from tuner.core.running import input_flag
    from tuner.discovery.workload import input_files

    root = directory.resolve()
    for name in INPUT_DIRECTORIES:
        files = [f for f in input_files(directory / name) if f.is_file() and f.resolve().is_relative_to(root)]
        if files:
            return tuple(input_flag(f) for f in files)
    return ()


@click.command("run", short_help="Run a rebuilt result with its parameters and your inputs.")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("-m", "--module", "module", required=True, type=click.Path(path_type=Path),
              help="The module `rebuild` wrote.")
@click.option("--input", "inputs", multiple=True, help="An input as iree-run-module takes it (@FILE.npy, ...), in order; "
                   "default: the inputs the tuning ran on.")
def run(directory: Path, module: Path, inputs: tuple[str, ...]) -> None:
    """Run MODULE, rebuilt from the run in DIRECTORY, with iree-run-module of the tuner's
    environment: the entry the run tuned, on its target's device, with the model's external
    parameters as the run recorded them, and the --input values given (passed on as they are), or
    else the inputs the tuning generated and ran on."""
    from tuner.errors import ToolError
    from tuner.report.rebuild import read_rebuild
    from tuner.tools import run_tool

    with errors_to_exit():
        if not module.is_file():
            raise InputError(f"-m {module}: no such module; write it with `iree-tuner rebuild {directory} -o {module}`")
        rebuilt = read_rebuild(directory)
        if not inputs:
            inputs = _tuners_inputs(directory)
            if inputs:
                click.echo(f"no --input given: running it on the inputs the tuning ran on ({len(inputs)} in "
                           f"{Path(inputs[0][1:]).parent})", err=True)
        command = [*rebuilt.run_command(module), *(f"--input={i}" for i in inputs)]
        done = run_tool(command, 3600)
        if not done.ok:
            raise ToolError(f"iree-run-module did not run {module}: {done.first_error()}", command, done.stderr)
    click.echo(done.stdout, nl=False)
