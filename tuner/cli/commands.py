"""The commands: thin click decorators over the Python API. Imports nothing of the compiler at
module level, so `benchmark` runs with the runtime only."""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import replace
from pathlib import Path

import click

from tuner.cli.options import (SECONDS, constraints_option, dynamic_size_option, eval_settings, evaluation_options,
                               gpu_timing_option, json_option, kind_list, parameters_option, print_json_result, print_json_step,
                               min_time_option, quiet_wait_option, search_options, terminate, version_option)
from tuner.cli.say import (LiveResults, dispatches_json, errors_to_exit, progress_bars, say_candidates, say_dispatches, say_failures,
                           say_picked, say_rebuild, say_search, say_summary)
from tuner.errors import InputError
from tuner.report.outputs import make_console
from tuner.run_dir import real_directory, write_file


NONE_TOOK = 9  # exit status when no candidate took its config (each config_not_applied): default kept


@click.group()
@version_option
def main() -> None:
    """Tune IREE dispatches: enumerate lowering configs, compile and time them, keep the best."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, terminate)
        signal.signal(signal.SIGHUP, terminate)


@main.command(short_help="Tune one dispatch: search its configs, time them, keep the best.")
@click.argument("input_file", type=click.Path(path_type=Path))
@search_options
@click.option("--output", "output_dir", default="tuning-output", show_default=True, type=click.Path(path_type=Path),
              help="Where best_spec.mlir, best_flags.txt and results.json go.")
@click.option("--compile-only", is_flag=True, help="Compile and verify only; `iree-tuner benchmark DIR` measures later.")
@click.option("--runner", default="local", show_default=True,
              help="How candidates are run and timed: local (this machine's devices), or replay:STORE (the timings "
                   "an earlier run stored, e.g. DIR/results.sqlite: nothing runs; tuner.evaluation.runners).")
@json_option
@evaluation_options
def tune(input_file: Path, output_dir: Path, compile_only: bool, runner: str, as_json: bool, target: str,
         pipeline_name: str | None, dispatch_name: str | None, search, run) -> None:
    """Tune the largest tunable dispatch of INPUT_FILE: search its valid configs within the budget,
    each batch compiled and timed against the default, the best confirmed side by side."""
    from dataclasses import replace

    from tuner import api
    from tuner.core.settings import Listeners

    console = make_console(stderr=as_json)
    live = LiveResults(console)
    with errors_to_exit(), progress_bars(console) as on_progress:
        tuning = api.tune(input_file, target, output_dir, dispatch_name, pipeline_name, search,
                          replace(run, compile_only=compile_only, runner=runner),
                          Listeners(on_progress, on_discovered=say_picked(console), on_search=say_search(console),
                                    on_candidates=say_candidates(console), on_results=live, on_result=live.one))
    none_took = say_failures(console, tuning.results if tuning.manifest is None else
                             [b.result for b in tuning.manifest.built], tuning.compiler_says or {})
    if tuning.manifest is not None:
        ok = sum(b.result.ok for b in tuning.manifest.built)
        done = tuning.manifest.meta.get("search", {}).get("done")
        console.print(f"compiled {ok} of {len(tuning.manifest.built)} candidates into {output_dir}; "
                      f"measure them with: iree-tuner benchmark {output_dir}"
                      + ("; the search has spent its budget: that measurement is the last" if done else
                         "; then run this command again for the search's next batch (it reads what was measured)"))
        if as_json:
            print_json_step(output_dir, "candidates", bool(done), compiled=ok, candidates=len(tuning.manifest.built))
    else:
        say_summary(console, tuning.ranking, list(tuning.results), tuning.stats, output_dir, tuning.families)
        if as_json:
            print_json_result(output_dir)
    if none_took:
        raise SystemExit(NONE_TOOK)


@main.command("tune-model", short_help="Tune a whole model: model-wide choices, its dispatches, one spec.")
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")
@click.option("--top", default=None, type=click.IntRange(min=1),
              help="Tune the K tunable dispatches with the largest measured shares (instead of --min-share).")
@click.option("--min-share", default=0.02, show_default=True, type=click.FloatRange(0.0, 1.0),
              help="Tune every tunable dispatch with at least this fraction of the model's dispatch time.")
@click.option("--kinds", default="", metavar="KIND[,KIND...]",
              help="Tune only dispatches of these kinds (contraction, convolution, attention, softmax, "
                   "normalization, reduction); default: every kind.")
@search_options(time_budget_help="Seconds the whole run may take: the flag stage up to 40% of them, the dispatch "
                                 "stage what is left less 15% kept for the merge; the verdict says what was not done.")
@click.option("--pipeline", "pipeline_name", default=None,
              help="Codegen pipeline to tune each dispatch it takes with; the others are tuned with the one for "
                   "the compiler's choice. Default on cuda: llvmgpu_mma_sync (llvmgpu_tile_and_fuse: the "
                   "compiler's for every dispatch); elsewhere the compiler's.")
@click.option("--dispatch-time", "dispatch_seconds", default=None, type=SECONDS,
              help="Seconds the dispatch stage's searches may take together: each dispatch gets the time left "
                   "in proportion to its share; the dispatches left when it is spent are not tuned (said).")
@click.option("--model-flags/--no-model-flags", default=True, show_default=True,
              help="Try the target's model-wide flags (llvm-cpu: data tiling) on the whole model first.")
@click.option("--model-rounds", default=4, show_default=True, type=click.IntRange(min=1, max=1000),
              help="Interleaved rounds for each whole-model comparison (flags, each merge step, the result).")
@click.option("--output", "output_dir", default="model-tuning", show_default=True, type=click.Path(path_type=Path),
              help="Where model_spec.mlir, model_flags.txt and results.json go (rerun to resume).")
@click.option("--force", is_flag=True, help="Clear an output directory that holds another input's run.")
@click.option("--compile-only", is_flag=True,
              help="Two machines: do the next compile step and leave OUTPUT/model-plan.json for "
                   "`iree-tuner benchmark OUTPUT` where the device is; repeat until done.")
@click.option("--repetitions", default=5, show_default=True, type=click.IntRange(min=1),
              help="Timed repetitions per timing.")
@min_time_option
@click.option("--confirm-rounds", default=4, show_default=True, type=click.IntRange(min=0),
              help="Interleaved rounds confirming each dispatch's most promising candidates.")
@click.option("--reconfirm", is_flag=True,
              help="Time a dispatch's confirmation rounds again where an earlier run confirmed the same candidates.")
@click.option("--compile-timeout", default=300.0, show_default=True, type=SECONDS, help="Seconds per compile.")
@click.option("--run-timeout", default=120.0, show_default=True, type=SECONDS, help="Seconds per benchmark run.")
@click.option("--device", "devices", multiple=True,
              help="Runtime device to benchmark on; repeat for several GPUs (cuda://0, cuda://1): candidates and "
                   "whole-model variants are timed on all, each against the baseline on its own device. Default: "
                   "the target's; on cuda, every GPU of the host where it has several.")
@click.option("--strategy", default="auto", show_default=True, type=click.Choice(["auto", "ray"]),
              help="ray: tune every dispatch at once on a Ray cluster, its candidates compiled and timed there "
                   "(docs/reference.md); auto: one dispatch after another on this machine.")
@click.option("--ray-address", default=None,
              help="With --strategy ray: the cluster (default: $RAY_ADDRESS, else a local one for the run).")
@parameters_option
@dynamic_size_option
@quiet_wait_option
@gpu_timing_option
@click.option("--store", "store_path", default=None, type=click.Path(path_type=Path),
              help="SQLite result store to reuse and fill (default: OUTPUT/results.sqlite).")
@json_option
def tune_model(input_file: Path, target: str, top: int | None, min_share: float, kinds: str, search,
               pipeline_name: str | None, dispatch_seconds: float | None, model_flags: bool,
               model_rounds: int, output_dir: Path, force: bool, compile_only: bool, repetitions: int,
               confirm_rounds: int, reconfirm: bool, compile_timeout: float, run_timeout: float,
               devices: tuple[str, ...], strategy: str, ray_address: str | None, store_path: Path | None,
               parameters: tuple[str, ...], dynamic_size: int | None, quiet_wait: float, gpu_timing: str,
               min_time: float, as_json: bool) -> None:
    """Tune a whole model (MLIR or ONNX): its dispatches that matter, merged into one spec that
    is validated on the model. Writes OUTPUT/model_spec.mlir and OUTPUT/model_flags.txt."""
    from tuner.report.outputs import render_model
    from tuner.core.settings import Listeners, RunOptions
    from tuner.stages import ModelOptions, tune_model as run

    console = make_console(stderr=as_json)
    settings = eval_settings(repetitions, compile_timeout, run_timeout, confirm_rounds=confirm_rounds,
                             ray_address=ray_address, reconfirm=reconfirm, quiet_wait=quiet_wait,
                             gpu_timing=gpu_timing, min_time=min_time)
    with errors_to_exit(), progress_bars(console) as on_progress:
        # tune-model's --time-budget is the whole run's (ModelOptions), not each dispatch's search's.
        tuning = run(input_file, target, output_dir, replace(search, pipeline=pipeline_name, seconds=None),
                     RunOptions(settings, strategy, devices, store_path, force, compile_only=compile_only,
                                parameters=parameters, dynamic_size=dynamic_size),
                     ModelOptions(min_share, top, model_rounds, model_flags,
                                  kinds=kind_list(kinds),
                                  dispatch_seconds=dispatch_seconds, time_budget_s=search.seconds),
                     Listeners(on_progress, console.print))
    if tuning.next_plan is not None:
        if as_json:
            print_json_step(output_dir, tuning.next_plan.step, False)
        return
    render_model(json.loads((output_dir / "results.json").read_text()), console)
    console.print(f"wrote {output_dir}/model_spec.mlir, model_flags.txt, results.json")
    say_rebuild(console, output_dir)
    if as_json:
        print_json_result(output_dir)


@main.command(short_help="Copy what the device needs for a pending two-machine step.")
@click.argument("directory", type=click.Path(path_type=Path))
@click.argument("dest", type=click.Path(path_type=Path))
def pack(directory: Path, dest: Path) -> None:
    """Copy what the device needs for DIRECTORY's pending tune-model step into DEST (the plan and
    the modules it times, not every earlier build). Run `iree-tuner benchmark DEST` there, then copy
    DEST back over DIRECTORY."""
    from tuner.stages.plan import pack as copy_plan

    with errors_to_exit():
        files = copy_plan(directory, dest)
    size = sum((dest / f).stat().st_size for f in files)
    click.echo(f"copied {len(files)} files ({size / 2**20:.1f} MiB) into {dest}")


@main.command(short_help="Measure a --compile-only directory here, or given configs.")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--configs", "configs_file", default=None, type=click.Path(path_type=Path),
              help="With an input file: JSON list of knob assignments (or a results.json) to evaluate.")
@click.option("--output", "output_dir", default=None, type=click.Path(path_type=Path),
              help="With an input file: where outputs go (default: benchmark-output).")
@evaluation_options
def benchmark(path: Path, configs_file: Path | None, output_dir: Path | None, target: str, pipeline_name: str | None,
              dispatch_name: str | None, run) -> None:
    """Evaluate given configs, no search. PATH is either a directory from `tune --compile-only`
    (measured here with the IREE runtime and numpy only), or an input .mlir with --configs."""
    console = make_console()
    with errors_to_exit():
        if path.is_dir() and (path / "model-plan.json").is_file():
            from tuner.stages.plan import run_plan

            with progress_bars(console) as on_progress:
                plan = run_plan(path, run.devices, run.settings, on_progress, run.strategy, run.parameters)
            console.print(f"measured the {plan.step} step of {path}; next, where the compiler is: "
                          f"iree-tuner tune-model MODEL --compile-only --output {path}")
            return
        if path.is_dir():
            if configs_file is not None:
                raise InputError(f"{path} is a compiled directory; --configs goes with an input .mlir file")
            if run.inputs:
                raise InputError(f"{path} is a compiled directory: its inputs are the ones it was compiled with "
                                 f"(give --input to `tune --compile-only`)")
            from tuner.benchmark_dir import benchmark_dir

            with progress_bars(console) as on_progress:
                measured = benchmark_dir(path, run.devices, run.settings, on_progress, run.store_path, run.strategy,
                                         run.parameters)
            say_summary(console, measured.ranking, list(measured.results), measured.stats, path, measured.families)
            return
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        if configs_file is None:
            raise InputError(f"{path}: give --configs FILE to evaluate configs for an input file "
                               "(or a directory from `iree-tuner tune --compile-only`)")
        from tuner import api
        from tuner.input.configs_file import read_configs
        from tuner.core.settings import Listeners

        configs = read_configs(configs_file)
        output_dir = output_dir or Path("benchmark-output")
        with progress_bars(console) as on_progress:
            tuning = api.benchmark_configs(path, configs, target, output_dir, dispatch_name, pipeline_name, run,
                                           Listeners(on_progress, on_candidates=say_candidates(console),
                                                     on_warning=lambda w: console.print(f"[yellow]warning:[/yellow] {w}")))
    none_took = say_failures(console, tuning.results, tuning.compiler_says or {})
    say_summary(console, tuning.ranking, list(tuning.results), tuning.stats, output_dir, tuning.families)
    if none_took:
        raise SystemExit(NONE_TOOK)


@main.command(short_help="List the candidates tune would try, without compiling them.")
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")
@click.option("--num-candidates", default=30, show_default=True, type=int, help="Configs besides the baseline.")
@click.option("--dispatch", "dispatch_name", default=None, help="Which dispatch (default: the largest).")
@click.option("--pipeline", "pipeline_name", default=None, help="Codegen pipeline (default: the compiler's choice's).")
@click.option("--output", "output_dir", default=None, type=click.Path(path_type=Path),
              help="Write DIR/candidates.json (knobs, flags, compilation_info, spec) and DIR/specs/NNNN.mlir.")
@click.option("--specs", "show_specs", is_flag=True, help="Print each candidate's tuning spec too.")
@constraints_option
def candidates(input_file: Path, target: str, num_candidates: int, dispatch_name: str | None,
               pipeline_name: str | None, output_dir: Path | None, show_specs: bool, constraints: str) -> None:
    """List the candidates `tune` would try for INPUT_FILE (knobs and specs); compile and time nothing."""
    import json

    from rich.table import Table

    from tuner import api

    console = make_console()
    with errors_to_exit():
        with progress_bars(console) as on_progress:
            dispatch, found = api.list_candidates(input_file, target, num_candidates, dispatch_name, pipeline_name,
                                                  on_progress, constraints)
        if output_dir is not None:
            api.prepare_output(output_dir)
            real_directory(output_dir / "specs", root=output_dir)
            entries = []
            for c in found:
                spec = output_dir / "specs" / f"{c.id:04d}.mlir"
                write_file(spec, c.spec)
                entries.append({"id": c.id, "is_baseline": c.is_baseline, "label": c.label, "pipeline": c.pipeline,
                                "knobs": dict(c.config.knobs), "flags": list(c.config.flags),
                                "compilation_info": c.config.compilation_info, "spec": str(spec.relative_to(output_dir))})
            write_file(output_dir / "candidates.json", json.dumps(entries, indent=2))
    say_candidates(console, num_candidates)(dispatch, found)
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


@main.command(short_help="Compare this tuner's constraints with IREE's own.")
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
    with errors_to_exit():
        with progress_bars(console) as on_progress:
            from tuner.problem.crosscheck import CrossCheckLimits

            checks = api.crosscheck_input(input_file, target, output_dir, dispatch_name, pipeline_name,
                                          CrossCheckLimits(limit, seconds, compile_per_class), force, on_progress)
    data = [c.to_json() for c in checks]
    write_file(output_dir / "crosscheck.json", json.dumps(data, indent=1))
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


@main.command(short_help="List a program's dispatches, what tunes each, their shares.")
@click.argument("input_file", type=click.Path(path_type=Path))
@click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")
@click.option("--pipeline", "pipeline_name", default=None, help="Codegen pipeline to ask about (default: the compiler's choice's).")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON, for scripts.")
@click.option("--profile", "with_profile", is_flag=True,
              help="Time each dispatch (inside the model where CUPTI loads, else alone) and each entry function "
                   "whole on the target's device: shares of the time.")
@click.option("--output", "output_dir", default=None, type=click.Path(path_type=Path),
              help="With --profile: where the compiled program and dispatch benchmarks go (default: a temporary directory).")
@parameters_option
@dynamic_size_option
@gpu_timing_option
def dispatches(input_file: Path, target: str, pipeline_name: str | None, as_json: bool, with_profile: bool,
               output_dir: Path | None, parameters: tuple[str, ...], dynamic_size: int | None, gpu_timing: str) -> None:
    """List every dispatch of INPUT_FILE: kind, op, shape, runs per call, the function that runs it,
    and the pipeline that would tune it or why none does; with --profile, its measured time and share."""
    import tempfile
    from contextlib import nullcontext

    from tuner import api
    from tuner.run_dir import RunDirectory

    console = make_console(stderr=as_json)
    with errors_to_exit(), tempfile.TemporaryDirectory(prefix="iree-tuner-profile-") as scratch:
        work = (output_dir or Path(scratch)) if with_profile else None
        with RunDirectory(output_dir) if work is not None and output_dir is not None else nullcontext():
            with progress_bars(console) as on_progress:
                listed = api.list_dispatches(input_file, target, pipeline_name, work, on_progress, parameters,
                                             dynamic_size, gpu_timing)
    if as_json:
        click.echo(dispatches_json(listed))
    else:
        say_dispatches(console, listed, input_file, target)


if __name__ == "__main__":
    main()
