"""The options several commands share (search, evaluation, constraints), the settings they make,
and the signals a run ends on like SIGINT."""

from __future__ import annotations

import functools
import os
import signal
import socket
import threading
import time
from pathlib import Path

import click

from tuner.errors import InputError


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP (a closed terminal), ended like SIGINT: every tool the run started is
    killed and the store closed."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = signum


def _say_version(ctx: click.Context, _param, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from tuner.versions import version_text

        click.echo(version_text())
        ctx.exit()


def version_option(f):
    return click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_say_version,
                        help="Show this tuner's version and the IREE and z3 versions it runs, then exit.")(f)


def json_option(f):
    return click.option("--json", "as_json", is_flag=True,
                        help="Print the result as JSON on stdout (results.json, with the rebuild command); "
                             "tables and progress go to stderr.")(f)


def print_json_result(output_dir) -> None:
    """`--json`: the run's results.json on stdout, with the command that rebuilds its result."""
    import json

    from tuner.report.rebuild import rebuild_line

    data = json.loads((output_dir / "results.json").read_text())
    click.echo(json.dumps({**data, "rebuild": rebuild_line(output_dir)}, indent=1))


def print_json_step(output_dir, step: str, done: bool, **figures) -> None:
    """`--json` with `--compile-only`: what the compile step left for the device, on stdout (the
    step, the directory, the command that measures it, and whether the search is done)."""
    import json

    click.echo(json.dumps({"compile_only": True, "step": step, "directory": str(output_dir.resolve()),
                           "next": f"iree-tuner benchmark {output_dir.resolve()}", "done": done, **figures}, indent=1))


def kind_list(text: str) -> tuple[str, ...]:
    """--kinds as a list; given, it names at least one kind (`--kinds ,` is not every kind)."""
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    if text and not kinds:
        raise InputError(f"--kinds {text!r}: names no kind; leave it out to tune every kind")
    return kinds


# The signals that ended this run, as terminate() received them: a library between the handler
# and the CLI (Ray's `ray.get`) may catch the Terminated it raised and raise a plain
# KeyboardInterrupt instead; the exit still says which signal it was.
RECEIVED: list[int] = []


def terminate(signum, frame) -> None:
    RECEIVED.append(signum)
    raise Terminated(signum)


STOP_GRACE_S = 60.0  # after a stop signal, how long the run may take to end in order
_STOP_WATCH: list = []  # the watcher's socket pair, once per process


def watch_for_stop(grace_s: float = STOP_GRACE_S) -> None:
    """End the process `grace_s` after SIGTERM, SIGHUP or SIGINT where the run has not ended by
    then. Python runs a signal's handler only when the main thread comes back to Python code: a
    main thread stuck in a C call (a compiler binding, the solver, a driver call) never sees it,
    and on the H100 `timeout -s TERM` left a tune-model running until the machine's own limit.
    The signal's number reaches this watcher through the interpreter's wakeup fd, which its
    C-level handler writes whatever the main thread is doing; the watcher then kills the run's
    tools and exits, as the ordinary path would have. Once per process, from the main thread."""
    if _STOP_WATCH or threading.current_thread() is not threading.main_thread():
        return
    reader, writer = socket.socketpair()
    writer.setblocking(False)
    try:
        signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    except ValueError:  # not the main thread of the main interpreter
        return
    _STOP_WATCH.extend((reader, writer))

    def watch() -> None:
        while True:
            stops = [n for n in reader.recv(64) if n in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)]
            if stops:
                time.sleep(grace_s)
                from tuner.tools import kill_running_tools

                kill_running_tools()
                os.write(2, f"stopped: the run did not end within {grace_s:.0f} s of the signal (its main thread "
                            f"is in a call that does not return); every result measured so far is kept in the "
                            f"result store\n".encode())
                os._exit(128 + stops[0])

    threading.Thread(target=watch, name="stop-watch", daemon=True).start()


def ended_by(error: KeyboardInterrupt) -> int | None:
    """The signal (SIGTERM, SIGHUP) that ended the run with `error`, or None for Ctrl-C."""
    if isinstance(error, Terminated):
        return error.signum
    return RECEIVED[-1] if RECEIVED else None


class Seconds(click.ParamType):
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


SECONDS = Seconds()


def evaluation_options(f):
    """Options shared by the commands that compile and time candidates: the command gets them as
    one `run: RunOptions` (see `as_run`), with `target`, `pipeline_name` and `dispatch_name`."""
    f = as_run(f)
    f = parameters_option(f)
    f = dynamic_size_option(f)
    f = click.option("--store", "store_path", default=None, type=click.Path(path_type=Path),
                     help="SQLite result store to reuse and fill (default: OUTPUT/results.sqlite); may be shared by runs.")(f)
    f = click.option("--device", "devices", multiple=True,
                     help="Runtime device to benchmark on; repeat for several (e.g. cuda://0 cuda://1). Default: the "
                          "target's; on cuda, every GPU of the host where it has several.")(f)
    f = click.option("--ray-address", default=None,
                     help="With --strategy ray: the cluster (default: $RAY_ADDRESS, else a local one for the run).")(f)
    f = click.option("--strategy", default="auto", show_default=True,
                     type=click.Choice(["auto", "overlapped", "sequential", "ray"]),
                     help="overlapped: time while compiling; sequential: compile, then time, one at a time; "
                          "ray: compile tasks and one benchmark worker per device on a Ray cluster (docs/reference.md); "
                          "auto: sequential on llvm-cpu (timing shares its cores), overlapped on GPUs.")(f)
    f = click.option("--compile-timeout", default=300.0, show_default=True, type=SECONDS, help="Seconds per compile.")(f)
    f = click.option("--run-timeout", default=120.0, show_default=True, type=SECONDS, help="Seconds per benchmark run.")(f)
    f = click.option("--repetitions", default=5, show_default=True, type=click.IntRange(min=1),
                     help="Timed repetitions per candidate.")(f)
    f = min_time_option(f)
    f = click.option("--baseline-every", default=5, show_default=True, type=click.IntRange(min=1),
                     help="Time the baseline again after every N candidates (per device): each candidate is "
                          "compared with the baseline timed nearest to it, and drift is seen.")(f)
    f = click.option("--confirm-rounds", default=4, show_default=True, type=click.IntRange(min=0),
                     help="Interleaved rounds timing the baseline and the most promising candidates side by side; "
                          "a winner must be faster in 3 of 4 (0: no winner is named).")(f)
    f = quiet_wait_option(f)
    f = gpu_timing_option(f)
    f = click.option("--reconfirm", is_flag=True,
                     help="Time the confirmation rounds again where an earlier run confirmed the same candidates "
                          "the same way on this device (a rerun of a finished tuning reuses them).")(f)
    f = click.option("--force", is_flag=True, help="Clear an output directory that holds another input's run.")(f)
    f = click.option("--input", "input_files", multiple=True, type=click.Path(path_type=Path),
                     help="Your own .npy file for the entry's next argument (repeat, in order); default: generated.")(f)
    f = click.option("--dispatch", "dispatch_name", default=None, help="Which dispatch to tune (default: the largest).")(f)
    f = click.option("--pipeline", "pipeline_name", default=None,
                     help="Codegen pipeline to tune with (default: the one for the compiler's choice), "
                          "e.g. llvmgpu_vector_distribute on rocm.")(f)
    f = click.option("--target", default="llvm-cpu", show_default=True, help="Compile target: llvm-cpu, cuda[:sm_NN], rocm[:gfxNNN].")(f)
    return f


def parameters_option(f):
    return click.option("--parameters", "parameters", multiple=True, metavar="SCOPE=FILE",
                        help="A parameter archive the model reads its weights from (.irpa, .gguf, .safetensors), "
                             "as IREE's runtime tools take it: repeat per scope; FILE alone is the default scope. "
                             "Recorded by path in the run, never copied.")(f)


def min_time_option(f):
    return click.option("--min-time", "min_time", default=0.1, show_default=True, type=click.FloatRange(min=0.001),
                        envvar="IREE_TUNER_MIN_TIME",
                        help="Seconds each timed repetition runs at least (calls back to back; its warm-up as long, "
                             "at most 0.05 s). Default also from $IREE_TUNER_MIN_TIME.")(f)


def quiet_wait_option(f):
    return click.option("--quiet-wait", "quiet_wait", default=120.0, show_default=True, type=click.FloatRange(min=0.0),
                        envvar="IREE_TUNER_QUIET_WAIT",
                        help="Seconds the confirmation rounds may wait for a load on the device to pass (seen as "
                             "the baseline running >20% slower than in the first pass); 0: never wait, say it. "
                             "Default also from $IREE_TUNER_QUIET_WAIT.")(f)


def gpu_timing_option(f):
    return click.option("--gpu-timing", "gpu_timing", default="auto", show_default=True, envvar="IREE_TUNER_GPU_TIMING",
                        type=click.Choice(["auto", "model", "alone"]),
                        help="How a CUDA dispatch is timed: model: by its kernels inside the model's own call "
                             "(CUPTI, the cuda extra); alone: IREE's dumped dispatch benchmarks (the fallback, "
                             "bounded); auto: model where CUPTI loads. Also from $IREE_TUNER_GPU_TIMING.")(f)


def dynamic_size_option(f):
    return click.option("--dynamic-size", "dynamic_size", default=None, type=click.IntRange(min=1),
                        help="The size of each dynamic dimension of the entry's arguments (default: 128, within "
                             "what the program's util.assume.int hints allow); your --input files decide it too.")(f)


def constraints_option(f):
    return click.option("--constraints", "constraints", default="native", show_default=True,
                        type=click.Choice(["native", "compiler", "both"]),
                        help="Where the valid configs come from: this tuner's constraints, the ones IREE emits "
                             "for the op (GPU TileAndFuse and VectorDistribute contractions; configs built by "
                             "IREE's materializer), or this tuner's less those IREE's reject.")(f)


SEARCH_SECONDS_HELP = "Seconds the search may run; no new batch starts after them."


def search_options(f=None, *, time_budget_help: str = SEARCH_SECONDS_HELP):
    """--search, --budget (alias --num-candidates), --time-budget (`time_budget_help` says what
    it bounds), --seed, --seeds, --warm-start, --constraints: the command gets them as one
    `search: SearchSettings` (its `seconds` from --time-budget)."""
    from tuner.search import DEFAULT_SEARCH, SEARCHES

    if f is None:
        return functools.partial(search_options, time_budget_help=time_budget_help)

    f = as_search(f)
    f = constraints_option(f)
    f = click.option("--warm-start", "warm_start", is_flag=True,
                     help="--search model: learn also from the store's measurements of other dispatches of the "
                          "same pipeline on the same device, where it holds some (said when it does; it has not "
                          "helped in replay: BENCHMARKS.md).")(f)
    f = click.option("--seeds", "seeds_file", default=None, type=click.Path(path_type=Path),
                     help="JSON seed entries (configs found by benchmarking) tried first where they fit.")(f)
    f = click.option("--seed", default=0, show_default=True, type=int, help="Random seed of the search.")(f)
    f = click.option("--time-budget", "time_budget", default=None, type=SECONDS,
                     help=time_budget_help)(f)
    f = click.option("--budget", "--num-candidates", "budget", default=30, show_default=True, type=int,
                     help="Configs to evaluate besides the baseline (failed and duplicate ones count).")(f)
    f = click.option("--search", "search_name", default=DEFAULT_SEARCH, show_default=True,
                     type=click.Choice(list(SEARCHES)),
                     help="How the valid space is searched: exhaustive order, uniform random, the pipeline's "
                          "preference tiers, or a model that learns from each batch's measurements.")(f)
    return f


def search_settings(search_name: str, budget: int, time_budget: float | None, seed: int, seeds_file: Path | None,
                    constraints: str = "native", warm_start: bool = False):
    from tuner.core.settings import SearchSettings

    return SearchSettings(name=search_name, budget=budget, seconds=time_budget, seed=seed, seeds_file=seeds_file,
                          constraints=constraints, warm_start=warm_start)


def eval_settings(repetitions: int, compile_timeout: float, run_timeout: float, baseline_every: int = 5,
                  confirm_rounds: int = 4, ray_address: str | None = None, reconfirm: bool = False,
                  quiet_wait: float = 120.0, gpu_timing: str = "auto", min_time: float = 0.1):
    from tuner.core.settings import EvalSettings

    return EvalSettings(compile_timeout_s=compile_timeout, run_timeout_s=run_timeout, repetitions=max(1, repetitions),
                        baseline_every=baseline_every, confirm_rounds=confirm_rounds, ray_address=ray_address,
                        reconfirm=reconfirm, quiet_wait_s=quiet_wait, gpu_timing=gpu_timing, min_time_s=min_time)


def as_search(f):
    """`f` called with the search options as one `search: SearchSettings`."""
    @functools.wraps(f)
    def command(*args, search_name, budget, time_budget, seed, seeds_file, warm_start, constraints, **kwargs):
        return f(*args, search=search_settings(search_name, budget, time_budget, seed, seeds_file, constraints,
                                               warm_start), **kwargs)
    return command


def as_run(f):
    """`f` called with the evaluation options as one `run: RunOptions`; `--target`, `--pipeline`
    and `--dispatch` stay its own."""
    @functools.wraps(f)
    def command(*args, store_path, devices, ray_address, strategy, compile_timeout, run_timeout, repetitions,
                baseline_every, confirm_rounds, reconfirm, quiet_wait, gpu_timing, force, input_files, parameters,
                dynamic_size, min_time, **kwargs):
        from tuner.core.settings import RunOptions

        settings = eval_settings(repetitions, compile_timeout, run_timeout, baseline_every, confirm_rounds,
                                 ray_address, reconfirm, quiet_wait, gpu_timing, min_time)
        return f(*args, run=RunOptions(settings, strategy, tuple(devices), store_path, force, tuple(input_files),
                                       parameters=tuple(parameters), dynamic_size=dynamic_size), **kwargs)
    return command
