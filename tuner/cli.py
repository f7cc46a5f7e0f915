"""The command line: thin click decorators over the Python API; the one place errors become exit
codes. Imports nothing of the compiler at module level, so `benchmark` runs with the runtime only."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from tuner.errors import InputError, OutputError, TunerError
from tuner.report.outputs import make_console


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a closed terminal), ended like SIGINT: every tool the run started is
    killed and the store closed."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum


def _terminate(signum, frame) -> None:
    raise Terminated(signum)


@click.group()
def main() -> None:
    """Tune IREE dispatches: enumerate lowering configs, compile and time them, keep the best."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
        signal.signal(signal.SIGHUP, _terminate)


class _Seconds(click.ParamType):
    """A positive, finite number of seconds (nan and inf are not)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not 0 < seconds < float("inf"):
            self.fail(f"{value!r}: a positive, finite number of seconds", param, ctx)
        return seconds


_SECONDS = _Seconds()


def _evaluation_options(f):
    """Options shared by the commands that compile and time candidates."""
    f = click.option("--store", "store_path", default=None, type=click.Path(path_type=Path),
                     help="SQLite result store to reuse and fill (default: OUTPUT/results.sqlite); may be shared by runs.")(f)
    f = click.option("--device", "devices", multiple=True,
                     help="Runtime device to benchmark on; repeat for several (e.g. cuda://0 cuda://1).")(f)
    f = click.option("--ray-address", default=None,
                     help="With --strategy ray: the cluster (default: $RAY_ADDRESS, else a local one for the run).")(f)
    f = click.option("--strategy", default="auto", show_default=True,
                     type=click.Choice(["auto", "overlapped", "sequential", "ray"]),
                     help="overlapped: time while compiling; sequential: compile, then time, one at a time; "
                          "ray: compile tasks and one benchmark worker per device on a Ray cluster (docs/reference.md); "
                          "auto: sequential on llvm-cpu (timing shares its cores), overlapped on GPUs.")(f)
    f = click.option("--compile-timeout", default=300.0, show_default=True, type=_SECONDS, help="Seconds per compile.")(f)
    f = click.option("--run-timeout", default=120.0, show_default=True, type=_SECONDS, help="Seconds per benchmark run.")(f)
    f = click.option("--repetitions", default=5, show_default=True, type=click.IntRange(min=1),
                     help="Timed repetitions per candidate.")(f)
    f = click.option("--baseline-every", default=5, show_default=True, type=click.IntRange(min=1),
                     help="Time the baseline again after every N candidates (per device): each candidate is "
                          "compared with the baseline timed nearest to it, and drift is seen.")(f)
    f = click.option("--confirm-rounds", default=4, show_default=True, type=click.IntRange(min=0),
                     help="Interleaved rounds timing the baseline and the most promising candidates side by side; "
                          "a winner must be faster in 3 of 4 (0: no winner is named).")(f)
    f = click.option("--force", is_flag=True, help="Clear an output directory that holds another input's run.")(f)
    f = click.option("--input", "input_files", multiple=True, type=click.Path(path_type=Path),
                     help="Your own .npy file for the entry's next argument (repeat, in order); default: generated.")(f)
    f = click.option("--dispatch", "dispatch_name", default=None, help="Which dispatch to tune (default: the largest).")(f)
    f = click.option("--pipeline", "pipeline_name", default=None,
                     help="Codegen pipeline to tune with (default: the one for the compiler's choice), "
                          "e.g. llvmgpu_vector_distribute on rocm.")(f)
    f = click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")(f)
    return f


def _constraints_option(f):
    return click.option("--constraints", "constraints", default="native", show_default=True,
                        type=click.Choice(["native", "compiler", "both"]),
                        help="Where the valid configs come from: this tuner's constraints, the ones IREE emits "
                             "for the op (GPU TileAndFuse and VectorDistribute contractions; configs built by "
                             "IREE's materializer), or this tuner's less those IREE's reject.")(f)


def _search_options(f):
    """--search, --budget (alias --num-candidates), --time-budget, --seed, --seeds, --warm-start,
    --constraints."""
    from tuner.search import DEFAULT_SEARCH, SEARCHES

    f = _constraints_option(f)
    f = click.option("--warm-start", "warm_start", is_flag=True,
                     help="--search model: learn also from the store's measurements of other dispatches of the "
                          "same pipeline on the same device, where it holds some (said when it does; it has not "
                          "helped in replay: BENCHMARKS.md).")(f)
    f = click.option("--seeds", "seeds_file", default=None, type=click.Path(path_type=Path),
                     help="JSON seed entries (configs found by benchmarking) tried first where they fit.")(f)
    f = click.option("--seed", default=0, show_default=True, type=int, help="Random seed of the search.")(f)
    f = click.option("--time-budget", "time_budget", default=None, type=_SECONDS,
                     help="Seconds the search may run; no new batch starts after them.")(f)
    f = click.option("--budget", "--num-candidates", "budget", default=30, show_default=True, type=int,
                     help="Configs to evaluate besides the baseline (failed and duplicate ones count).")(f)
    f = click.option("--search", "search_name", default=DEFAULT_SEARCH, show_default=True,
                     type=click.Choice(list(SEARCHES)),
                     help="How the valid space is searched: exhaustive order, uniform random, the pipeline's "
                          "preference tiers, or a model that learns from each batch's measurements.")(f)
    return f


def _search(search_name: str, budget: int, time_budget: float | None, seed: int, seeds_file: Path | None,
            constraints: str = "native", warm_start: bool = True):
    from tuner.settings import SearchSettings

    return SearchSettings(name=search_name, budget=budget, seconds=time_budget, seed=seed, seeds_file=seeds_file,
                          constraints=constraints, warm_start=warm_start)


def _settings(repetitions: int, compile_timeout: float, run_timeout: float, baseline_every: int = 5,
              confirm_rounds: int = 4, ray_address: str | None = None):
    from tuner.settings import EvalSettings

    return EvalSettings(compile_timeout_s=compile_timeout, run_timeout_s=run_timeout, repetitions=max(1, repetitions),
                        baseline_every=baseline_every, confirm_rounds=confirm_rounds, ray_address=ray_address)


@main.command()
@click.argument("input_file", type=click.Path(path_type=Path))
@_search_options
@click.option("--output", "output_dir", default="tuning-output", show_default=True, type=click.Path(path_type=Path),
              help="Where best_spec.mlir, best_flags.txt and results.json go.")
@click.option("--compile-only", is_flag=True, help="Compile and verify only; `iree-tuner benchmark DIR` measures later.")
@_evaluation_options
def tune(input_file: Path, search_name: str, budget: int, time_budget: float | None, seed: int,
         seeds_file: Path | None, warm_start: bool, constraints: str, output_dir: Path, compile_only: bool,
         target: str,
         pipeline_name: str | None, dispatch_name: str | None, input_files: tuple[Path, ...], force: bool,
         confirm_rounds: int, baseline_every: int, repetitions: int, run_timeout: float, compile_timeout: float,
         strategy: str, ray_address: str | None, devices: tuple[str, ...], store_path: Path | None) -> None:
    """Tune the largest tunable dispatch of INPUT_FILE: search its valid configs within the budget,
    each batch compiled and timed against the default, the best confirmed side by side."""
    from tuner import api

    console = make_console()
    with _errors_to_exit(), _progress(console) as on_progress:
        tuning = api.tune(input_file, target, None, output_dir, dispatch_name,
                          _settings(repetitions, compile_timeout, run_timeout, baseline_every, confirm_rounds,
                                    ray_address),
                          on_progress, _announce(console), compile_only, strategy, devices,
                          store_path, pipeline_name, force,
                          on_discovered=None if dispatch_name else _picked(console), inputs=input_files,
                          search=_search(search_name, budget, time_budget, seed, seeds_file, constraints, warm_start),
                          on_search=_searching(console))
    _say_compiler_constraints(console, tuning.compiler_says or {})
    if tuning.manifest is not None:
        ok = sum(b.result.ok for b in tuning.manifest.built)
        done = tuning.manifest.meta.get("search", {}).get("done")
        console.print(f"compiled {ok} of {len(tuning.manifest.built)} candidates into {output_dir}; "
                      f"measure them with: iree-tuner benchmark {output_dir}"
                      + ("; the search has spent its budget: that measurement is the last" if done else
                         "; then run this command again for the search's next batch (it reads what was measured)"))
        return
    _summary(console, tuning.ranking, list(tuning.results), tuning.stats, output_dir)


@main.command("tune-model")
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")
@click.option("--top", default=None, type=click.IntRange(min=1),
              help="Tune the K tunable dispatches with the largest measured shares (instead of --min-share).")
@click.option("--min-share", default=0.02, show_default=True, type=click.FloatRange(0.0, 1.0),
              help="Tune every tunable dispatch with at least this fraction of the model's dispatch time.")
@_search_options
@click.option("--model-flags/--no-model-flags", default=True, show_default=True,
              help="Try the target's model-wide flags (llvm-cpu: data tiling) on the whole model first.")
@click.option("--model-rounds", default=4, show_default=True, type=click.IntRange(min=1),
              help="Interleaved rounds for each whole-model comparison (flags, each merge step, the result).")
@click.option("--output", "output_dir", default="model-tuning", show_default=True, type=click.Path(path_type=Path),
              help="Where model_spec.mlir, model_flags.txt and results.json go (rerun to resume).")
@click.option("--force", is_flag=True, help="Clear an output directory that holds another input's run.")
@click.option("--compile-only", is_flag=True,
              help="Two machines: do the next compile step and leave OUTPUT/model-plan.json for "
                   "`iree-tuner benchmark OUTPUT` where the device is; repeat until done.")
@click.option("--repetitions", default=5, show_default=True, type=int, help="Timed repetitions per timing.")
@click.option("--confirm-rounds", default=4, show_default=True, type=click.IntRange(min=0),
              help="Interleaved rounds confirming each dispatch's most promising candidates.")
@click.option("--compile-timeout", default=300.0, show_default=True, type=float, help="Seconds per compile.")
@click.option("--run-timeout", default=120.0, show_default=True, type=float, help="Seconds per benchmark run.")
@click.option("--device", "devices", multiple=True, help="Runtime device to benchmark on.")
@click.option("--strategy", default="auto", show_default=True, type=click.Choice(["auto", "ray"]),
              help="ray: tune every dispatch at once on a Ray cluster, its candidates compiled and timed there "
                   "(docs/reference.md); auto: one dispatch after another on this machine.")
@click.option("--ray-address", default=None,
              help="With --strategy ray: the cluster (default: $RAY_ADDRESS, else a local one for the run).")
@click.option("--store", "store_path", default=None, type=click.Path(path_type=Path),
              help="SQLite result store to reuse and fill (default: OUTPUT/results.sqlite).")
def tune_model(input_file: Path, target: str, top: int | None, min_share: float, search_name: str, budget: int,
               time_budget: float | None, seed: int, seeds_file: Path | None, warm_start: bool, constraints: str,
               model_flags: bool,
               model_rounds: int,
               output_dir: Path, force: bool, compile_only: bool, repetitions: int, confirm_rounds: int, compile_timeout: float,
               run_timeout: float, devices: tuple[str, ...], strategy: str, ray_address: str | None,
               store_path: Path | None) -> None:
    """Tune a whole model (MLIR or ONNX): its dispatches that matter, merged into one spec that
    is validated on the model. Writes OUTPUT/model_spec.mlir and OUTPUT/model_flags.txt."""
    from tuner.report.outputs import render_model
    from tuner.stages import tune_model as run

    console = make_console()
    with _errors_to_exit(), _progress(console) as on_progress:
        tuning = run(input_file, target, output_dir, budget, min_share, top,
                     _settings(repetitions, compile_timeout, run_timeout, confirm_rounds=confirm_rounds,
                               ray_address=ray_address), devices,
                     store_path, force, on_progress, console.print, rounds=model_rounds, model_flags=model_flags,
                     compile_only=compile_only, search=_search(search_name, budget, time_budget, seed, seeds_file, constraints, warm_start),
                     strategy=strategy)
    if tuning.next_plan is not None:
        return
    render_model(json.loads((output_dir / "results.json").read_text()), console)
    from tuner.report.outputs import rebuild_command

    console.print(f"wrote {output_dir}/model_spec.mlir, model_flags.txt, results.json; rebuild with: "
                  f"{rebuild_command(output_dir, str(tuning.program_path), 'model_flags.txt')}")


@main.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.argument("dest", type=click.Path(path_type=Path))
def pack(directory: Path, dest: Path) -> None:
    """Copy what the device needs for DIRECTORY's pending tune-model step into DEST (the plan and
    the modules it times, not every earlier build). Run `iree-tuner benchmark DEST` there, then copy
    DEST back over DIRECTORY."""
    from tuner.stages.plan import pack as copy_plan

    with _errors_to_exit():
        files = copy_plan(directory, dest)
    size = sum((dest / f).stat().st_size for f in files)
    click.echo(f"copied {len(files)} files ({size / 2**20:.1f} MiB) into {dest}")


@main.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--configs", "configs_file", default=None, type=click.Path(path_type=Path),
              help="With an input file: JSON list of knob assignments (or a results.json) to evaluate.")
@click.option("--output", "output_dir", default=None, type=click.Path(path_type=Path),
              help="With an input file: where outputs go (default: benchmark-output).")
@_evaluation_options
def benchmark(path: Path, configs_file: Path | None, output_dir: Path | None, target: str, pipeline_name: str | None,
              dispatch_name: str | None, input_files: tuple[Path, ...], force: bool, confirm_rounds: int,
              baseline_every: int, repetitions: int, run_timeout: float, compile_timeout: float, strategy: str,
              ray_address: str | None, devices: tuple[str, ...], store_path: Path | None) -> None:
    """Evaluate given configs, no search. PATH is either a directory from `tune --compile-only`
    (measured here with the IREE runtime and numpy only), or an input .mlir with --configs."""
    console = make_console()
    settings = _settings(repetitions, compile_timeout, run_timeout, baseline_every, confirm_rounds, ray_address)
    with _errors_to_exit():
        if path.is_dir() and (path / "model-plan.json").is_file():
            from tuner.stages.plan import run_plan

            with _progress(console) as on_progress:
                plan = run_plan(path, devices, settings, on_progress, strategy)
            console.print(f"measured the {plan.step} step of {path}; next, where the compiler is: "
                          f"iree-tuner tune-model MODEL --compile-only --output {path}")
            return
        if path.is_dir():
            if configs_file is not None:
                raise InputError(f"{path} is a compiled directory; --configs goes with an input .mlir file")
            if input_files:
                raise InputError(f"{path} is a compiled directory: its inputs are the ones it was compiled with "
                                 f"(give --input to `tune --compile-only`)")
            from tuner.evaluation.benchmark_stage import benchmark_dir

            with _progress(console) as on_progress:
                measured = benchmark_dir(path, devices, settings, on_progress, store_path, strategy)
            _summary(console, measured.ranking, list(measured.results), measured.stats, path)
            return
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if configs_file is None:
            raise InputError(f"{path}: give --configs FILE to evaluate configs for an input file "
                               "(or a directory from `iree-tuner tune --compile-only`)")
        from tuner import api
        from tuner.input.configs_file import read_configs

        configs = read_configs(configs_file)
        output_dir = output_dir or Path("benchmark-output")
        with _progress(console) as on_progress:
            tuning = api.benchmark_configs(path, configs, target, output_dir, dispatch_name, settings, on_progress,
                                           _announce(console), strategy, devices, store_path,
                                           on_warning=lambda w: console.print(f"[yellow]warning:[/yellow] {w}"),
                                           pipeline_name=pipeline_name, force=force, inputs=input_files)
    _summary(console, tuning.ranking, list(tuning.results), tuning.stats, output_dir)


@main.command()
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")
@click.option("--num-candidates", default=30, show_default=True, type=int, help="Configs besides the baseline.")
@click.option("--dispatch", "dispatch_name", default=None, help="Which dispatch (default: the largest).")
@click.option("--pipeline", "pipeline_name", default=None, help="Codegen pipeline (default: the compiler's choice's).")
@click.option("--output", "output_dir", default=None, type=click.Path(path_type=Path),
              help="Write DIR/candidates.json (knobs, flags, compilation_info, spec) and DIR/specs/NNNN.mlir.")
@click.option("--specs", "show_specs", is_flag=True, help="Print each candidate's tuning spec too.")
@_constraints_option
def candidates(input_file: Path, target: str, num_candidates: int, dispatch_name: str | None,
               pipeline_name: str | None, output_dir: Path | None, show_specs: bool, constraints: str) -> None:
    """List the candidates `tune` would try for INPUT_FILE (knobs and specs); compile and time nothing."""
    import json

    from rich.table import Table

    from tuner import api

    console = make_console()
    with _errors_to_exit():
        with _progress(console) as on_progress:
            dispatch, found = api.list_candidates(input_file, target, num_candidates, dispatch_name, pipeline_name,
                                                  on_progress, constraints)
        if output_dir is not None:
            api.prepare_output(output_dir / "specs")
            entries = []
            for c in found:
                spec = output_dir / "specs" / f"{c.id:04d}.mlir"
                spec.write_text(c.spec)
                entries.append({"id": c.id, "is_baseline": c.is_baseline, "label": c.label, "pipeline": c.pipeline,
                                "knobs": dict(c.config.knobs), "flags": list(c.config.flags),
                                "compilation_info": c.config.compilation_info, "spec": str(spec.relative_to(output_dir))})
            (output_dir / "candidates.json").write_text(json.dumps(entries, indent=2))
    _announce(console, num_candidates)(dispatch, found)
    table = Table(title=f"Candidates for {dispatch.name} ({found[0].pipeline})")
    table.add_column("#", justify="right")
    table.add_column("config")
    table.add_column("knobs")
    for c in found:
        table.add_row(str(c.id), c.label, " ".join(f"{k}={v}" for k, v in c.config.knobs.items()) or "-")
    console.print(table)
    if show_specs:
        for c in found:
            console.rule(f"candidate {c.id}: {c.label}")
            console.print(c.spec, markup=False, highlight=False)
    if output_dir is not None:
        console.print(f"wrote {output_dir}/candidates.json and {output_dir}/specs/; "
                      f"evaluate them with: iree-tuner benchmark {input_file} --target {target} "
                      f"--configs {output_dir}/candidates.json")


@main.command()
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", required=True, help="A GPU target: cuda[:sm_NN], rocm[:gfxNNN] (llvm-cpu emits no constraints).")
@click.option("--dispatch", "dispatch_name", default=None, help="Only this dispatch (default: every tunable one).")
@click.option("--pipeline", "pipeline_name", default=None, help="Only this pipeline (default: each that takes the dispatch).")
@click.option("--limit", default=5000, show_default=True, type=click.IntRange(min=1),
              help="Compiler configs to enumerate at most (the space can be far larger).")
@click.option("--seconds", default=120.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds of solving for the compiler's space at most.")
@click.option("--compile", "compile_per_class", default=2, show_default=True, type=click.IntRange(min=0),
              help="Examples of each difference class compiled to settle who is right.")
@click.option("--output", "output_dir", default="crosscheck-output", show_default=True, type=click.Path(path_type=Path))
@click.option("--force", is_flag=True, help="Clear a directory holding another input's run first.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def crosscheck(input_file: Path, target: str, dispatch_name: str | None, pipeline_name: str | None, limit: int,
               seconds: float, compile_per_class: int, output_dir: Path, force: bool, as_json: bool) -> None:
    """Compare this tuner's constraints with the ones IREE emits for INPUT_FILE's dispatches:
    space sizes, configs one side accepts and the other rejects (by class), and examples of each
    class compiled to settle who is right. Writes DIR/crosscheck.json."""
    from rich.table import Table

    from tuner import api

    console = make_console(stderr=as_json)  # with --json, stdout holds the JSON alone
    with _errors_to_exit():
        with _progress(console) as on_progress:
            checks = api.crosscheck_input(input_file, target, output_dir, dispatch_name, pipeline_name, limit, seconds,
                                          compile_per_class, force, on_progress)
    data = [c.to_json() for c in checks]
    (output_dir / "crosscheck.json").write_text(json.dumps(data, indent=1))
    if as_json:
        print(json.dumps(data, indent=1))
        return
    for c in checks:
        bound = "" if c.compiler_complete else "at least "
        speed = ", ".join(f"{n} in {s:.1f} s" for n, s in c.compiler_seconds_to.items())
        console.print(f"{c.dispatch} on {c.target}, {c.pipeline} (compiler: {c.compiler_pipeline}): native "
                      f"{c.native} configs ({c.native_seconds:.2f} s), compiler {bound}{c.compiler}"
                      + (f" ({speed})" if speed else "") + f", both {c.both}")
        table = Table()
        for column in ("side", "class", "configs", "sampled builds", "example"):
            table.add_column(column)
        for cls in c.classes:
            table.add_row(cls.side, cls.reason, str(cls.count), " ".join(cls.compiled) or "-",
                          " ".join(f"{k}={v}" for k, v in cls.examples[0].items()) if cls.examples else "")
        console.print(table if c.classes else "no differences")
    console.print(f"wrote {output_dir}/crosscheck.json")


@main.command()
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")
@click.option("--pipeline", "pipeline_name", default=None, help="Codegen pipeline to ask about (default: the compiler's choice's).")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON, for scripts.")
@click.option("--profile", "with_profile", is_flag=True,
              help="Time each dispatch alone and each entry function whole on the target's device: shares of the time.")
@click.option("--output", "output_dir", default=None, type=click.Path(path_type=Path),
              help="With --profile: where the compiled program and dispatch benchmarks go (default: a temporary directory).")
def dispatches(input_file: Path, target: str, pipeline_name: str | None, as_json: bool, with_profile: bool,
               output_dir: Path | None) -> None:
    """List every dispatch of INPUT_FILE: kind, op, shape, runs per call, the function that runs it,
    and the pipeline that would tune it or why none does; with --profile, its measured time and share."""
    import json
    import tempfile

    from rich.table import Table

    from tuner import api

    console = make_console(stderr=as_json)
    with _errors_to_exit(), tempfile.TemporaryDirectory(prefix="iree-tuner-profile-") as scratch:
        work = (output_dir or Path(scratch)) if with_profile else None
        if work is not None and output_dir is not None:
            api.prepare_output(output_dir)
        with _progress(console) as on_progress:
            listed = api.list_dispatches(input_file, target, pipeline_name, work, on_progress)
    rows, measured = listed.rows, listed.profile
    if as_json:
        click.echo(json.dumps({"dispatches": [r.to_json() for r in rows],
                               "entry_ms": measured.entry_ms if measured else None,
                               "coverage": {e: measured.coverage(e) for e in measured.entry_ms} if measured else None,
                               "busy_ms": measured.busy_ms if measured else None,
                               "busy_coverage": ({e: measured.busy_coverage(e) for e in measured.busy_ms}
                                                 if measured else None),
                               "method": measured.method if measured else ""}, indent=2))
        return
    table = Table(title=f"Dispatches of {input_file} on {target}")
    columns = ["dispatch", "kind", "shape", "runs", "entry"] + (["ms", "share"] if measured else []) + ["tuned by / why not"]
    for col in columns:
        table.add_column(col, justify="right" if col in ("runs", "ms", "share") else "left")
    for r in rows:
        timed = [f"{r.ms:.3f}" if r.ms is not None else "-", f"{100 * r.share:.1f}%" if r.share is not None else "-"]
        table.add_row(r.name, r.kind or "-", r.shape or "-", str(r.runs), r.entry, *(timed if measured else []),
                      r.pipeline or f"[yellow]{r.why_not}[/yellow]")
    console.print(table)
    if measured:
        for entry, ms in measured.entry_ms.items():
            coverage = measured.coverage(entry)
            busy = measured.busy_coverage(entry)
            console.print(f"@{entry}: {ms:.3f} ms per call, timed whole; its dispatch times add up to "
                          + (f"{100 * coverage:.0f}% of it" if coverage else "nothing measurable")
                          + (f" and to {100 * busy:.0f}% of the {measured.busy_ms[entry]:.3f} ms its command buffers "
                             "executed (the rest of a call: allocations, submission, waits)" if busy else ""))
        console.print(f"timed: {measured.method}")
    tunable = sum(1 for r in rows if r.pipeline)
    console.print(f"{len(rows)} dispatches, {tunable} tunable; tune one with: iree-tuner tune {input_file} "
                  f"--target {target} --dispatch NAME")


@main.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--top", default=15, show_default=True, type=int, help="Rows of the table.")
def report(directory: Path, top: int) -> None:
    """Print the table of a finished tuning in DIRECTORY again and draw DIRECTORY/results.png
    (for a tune-model directory: its per-dispatch table and the model-level figure)."""
    from tuner.report.plot import plot_ranking
    from tuner.ranking import rank
    from tuner.report.outputs import render_model, render_table
    from tuner.results import Result

    console = make_console()
    with _errors_to_exit():
        path = directory / "results.json"
        if not path.is_file():
            raise InputError(f"{directory}: no results.json; run `iree-tuner tune` or `iree-tuner benchmark` first")
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                raise ValueError(f"a {type(data).__name__}, not the object this tuner writes")
            if data.get("kind") == "model":
                render_model(data, console)
                return
            results = [Result.from_json(c) for c in data["candidates"]]
        except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise InputError(f"{path}: not a readable results file ({e})") from None
        ranking = rank(results)
        render_table(ranking, results, console, top)
        if data.get("evaluation"):
            console.print(_stats_line(data["evaluation"]))
        console.print(("best: " if ranking.best else "no winner: ") + ranking.verdict)
        title = f"{data.get('dispatch', '')} on {', '.join(data.get('devices', [])) or data.get('target', '')}".strip()
        try:
            png = plot_ranking(ranking, directory / "results.png", title)
        except OSError as e:
            raise OutputError(f"cannot write {directory / 'results.png'}: {e.strerror or e}") from None
    console.print(f"wrote {png}")


def _picked(console: Console):
    """Say which dispatch `tune` picked by itself, and which it skipped and why."""
    def on_discovered(program, dispatch, how: str) -> None:
        others = [d.name for d in program.dispatches if d.name != dispatch.name]
        console.print(f"tuning {dispatch.name}: {how}" + (f" (others: {', '.join(others)})" if others else ""))
        for name, why in program.skipped:
            console.print(f"skipped {name}: {why}")

    return on_discovered


def _searching(console: Console):
    """Say what the search starts from: the space, the seeds and who proposed them."""
    def on_search(summary: dict) -> None:
        size = f"{summary['space']} valid configs" + ("" if summary["space_complete"]
                                                       else f" (a sample of {summary['space_size']})")
        seeds = ", ".join(f"{n} from {who}" for who, n in summary["seeds"].items()) or "none"
        line = (f"search: {summary['search']} over {size}, budget {summary['budget']}"
                + (f" or {summary['time_budget_s']:g} s" if summary["time_budget_s"] else "")
                + f", seed {summary['seed']}; seeds first: {seeds}")
        if summary["dropped_seeds"]:
            line += f"; {len(summary['dropped_seeds'])} seeds not valid for this dispatch were dropped"
        if summary["space_complete"] and summary["space"] <= summary["budget"]:
            line += "; the space holds no more than the budget: every config is tried"
        warm = summary.get("warm_started_from")
        if warm:
            line += (f"; warm start from {warm['points']} measurements of {len(warm['dispatches'])} other "
                     f"dispatches in the store: {', '.join(warm['dispatches'])}")
        console.print(line)

    return on_search


def _announce(console: Console, asked: int | None = None):
    def on_candidates(dispatch, candidates) -> None:
        console.print(f"[bold]{dispatch.name}[/bold]: {dispatch.op_name} {dispatch.shape_name}, "
                      f"default {dispatch.default.pipeline}; {len(candidates)} candidates (baseline included)")
        if asked is not None and len(candidates) - 1 < asked:
            console.print(f"the space holds {len(candidates) - 1} distinct configs for this dispatch, "
                          f"fewer than the {asked} asked for: all of them are tried")

    return on_candidates


def _stats_line(stats: dict) -> str:
    devices = ", ".join(f"{d} idle {100 * (1 - busy / stats['wall_s']):.0f}%" if stats["wall_s"] else d
                        for d, busy in stats["busy_s"].items())
    line = (f"{stats['strategy']}: {stats['candidates']} evaluated, {stats['reused']} reused from the store, "
            f"{stats['wall_s']:.1f} s ({devices}); baseline timed {stats.get('baseline_timings', 0)} times; "
            f"confirmation rounds {stats['confirm_s']:.1f} s")
    for drift in stats.get("drifts", []):
        line += (f"\nthe baseline drifted {drift['change_pct']:+.0f}% on {drift['device']} "
                 f"({drift['from_ms']:.3f} -> {drift['to_ms']:.3f} ms)")
    if stats.get("retimed"):
        line += f"; {stats['retimed']} candidates timed in a drifted span were timed again"
    for warning in stats.get("warnings", []):
        line += f"\n[yellow]warning:[/yellow] {warning}"
    return line


def _say_compiler_constraints(console: Console, says: dict) -> None:
    """For each candidate that failed to build or take: what IREE's own constraints say of it."""
    for cid, said in sorted(says.items()):
        console.print(f"candidate {cid} failed; IREE's constraints for it: {'; '.join(said)}", markup=False)


def _summary(console: Console, ranking, results, stats, output_dir: Path) -> None:
    from tuner.report.outputs import render_table, written_rebuild_command

    render_table(ranking, results, console)
    if stats is not None:
        console.print(_stats_line(stats.to_json()))
    console.print(("best: " if ranking.best else "no winner: ") + ranking.verdict)
    console.print(f"wrote {output_dir}/best_spec.mlir, best_flags.txt, results.json; rebuild with: "
                  f"{written_rebuild_command(output_dir)}")


class _errors_to_exit:
    """Bad input and failed tools end in one line and a non-zero exit, never a traceback."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, tb) -> bool:
        if isinstance(error, TunerError):
            click.echo(f"error: {error}", err=True)
            sys.exit(error.exit_code)
        if isinstance(error, KeyboardInterrupt):
            from tuner.tools import kill_running_tools

            kill_running_tools()  # nothing this run started outlives it
            how = "terminated" if isinstance(error, Terminated) else "interrupted"
            click.echo(f"{how}: every result measured so far is kept in the result store (and every compiled "
                       f"candidate in the manifest); run the same command again to resume", err=True)
            sys.exit(128 + error.signum if isinstance(error, Terminated) else 130)
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
