"""How candidates are compiled and timed: plain settings shared by both sides of the tuner."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from tuner.core.running import ModuleRun, runtime_flags
from tuner.errors import InputError


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: `taskset -c 0-15 tune-model ...` gives a
    run 16 of the host's cores, one GPU's share on a machine of several), at least one. Every
    pool of compiles and checks is sized by it; os.cpu_count() counts the whole host."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


class Entry(Protocol):
    """What a run reads of the function it runs (tuner.discovery.workload.Workload is one)."""

    entry: str
    parameters: tuple[str, ...]


@dataclass(frozen=True)
class EvalSettings:
    compile_timeout_s: float = 300.0
    compile_workers: int = usable_cores()
    repetitions: int = 5
    min_time_s: float = 0.1
    run_timeout_s: float = 120.0
    # The first pass times the baseline again after every `baseline_every` candidates on each
    # device: each candidate is normalised by the baseline timing nearest to it, and a drift
    # between two of them is seen (tuner.core.comparison).
    baseline_every: int = 5
    # A winner is named only among the baseline and the `confirm_top` most promising candidates
    # timed side by side in `confirm_rounds` interleaved rounds: it must be faster than the
    # baseline in three rounds of four (tuner.core.comparison.WIN_SHARE).
    confirm_top: int = 4
    confirm_rounds: int = 4
    # Before the rounds, while the baseline runs slower than in the quieter part of the first pass
    # (beyond comparison.load_threshold), wait up to this many seconds for the load to pass: a ratio
    # taken under another job's load is not the quiet one (configs lose different shares of their
    # speed). If it never passes, the verdict says the figures hold for that load.
    quiet_wait_s: float = 120.0
    # Time the confirmation rounds again even where an earlier run confirmed the same candidates
    # the same way on a device like this one (a rerun of a finished tuning reuses its rounds).
    reconfirm: bool = False
    # Compare each candidate's output with the baseline's. Off where another stage checks the
    # numerics (tune-model's dispatch trips on a GPU: only each dispatch's benchmark module
    # travels, and every config kept is checked at the model's output).
    check_numerics: bool = True
    # `--strategy ray`: the cluster to use (None: $RAY_ADDRESS, else a local cluster started for
    # the run), and how many CPUs a CPU benchmark worker times on (0: half the node's).
    ray_address: Optional[str] = None
    benchmark_cores: int = 0
    # How a GPU dispatch is timed (tuner.evaluation.in_model.GPU_TIMINGS): "auto" by its kernels
    # inside the model's own call where CUPTI loads (CUDA), else alone from IREE's dumped
    # dispatch benchmarks; "model" or "alone" to insist on one.
    gpu_timing: str = "auto"

    def module_run(self, device: str, workload: Entry, inputs: tuple[Path, ...],
                   spread_over: Sequence[str] = ()) -> ModuleRun:
        """How each candidate is run and timed on `device` under these settings (`spread_over`:
        the devices a comparison of several whole-model builds is dealt over)."""
        checked = workload.checked_output if self.check_numerics else None
        return ModuleRun(device=device, entry=workload.entry, inputs=inputs, repetitions=self.repetitions,
                         min_time_s=self.min_time_s, timeout_s=self.run_timeout_s, outputs=len(workload.outputs),
                         checked=checked,
                         checked_type=workload.outputs[checked].element_type if checked is not None else "",
                         runtime_flags=runtime_flags(workload.parameters), spread_over=tuple(spread_over))


# The search `tune` and `tune-model` use unless told: the one that did best in the replay of the
# recorded spaces (BENCHMARKS.md, benchmarks/search_replay.py). tuner.search.SEARCHES names them.
DEFAULT_SEARCH = "preference"


@dataclass(frozen=True)
class SearchSettings:
    """How candidates are chosen (tuner.search): which search, how many evaluations (failed and
    duplicate ones count; confirmation re-timings do not), how many seconds, its random seed,
    points per batch, and a user's JSON seed entries."""

    name: str = DEFAULT_SEARCH
    budget: int = 30
    seconds: Optional[float] = None
    seed: int = 0
    batch_size: int = 8
    seeds_file: Optional[Path] = None
    # Where the valid configs come from (tuner.problem.sources): "native", "compiler", "both".
    constraints: str = "native"
    # Learning across runs: a model search also learns from the store's measurements of other
    # dispatches of the same pipeline on the same device (tuner.search.prior), where it has some.
    # Off unless asked: replayed against the recorded spaces it did not help (BENCHMARKS.md).
    warm_start: bool = False
    # tune-model: the codegen pipeline whose space is searched for each dispatch it takes (by
    # name, as `--pipeline`); the other dispatches, and every one where None, are tuned with the
    # pipeline of the compiler's own choice (tuner.stages.selection.tuning_pipeline).
    pipeline: Optional[str] = None

    def checked(self) -> "SearchSettings":
        """These settings, or one clear error for a budget no run can mean."""
        if self.budget < 1:
            raise InputError("--budget (--num-candidates) must be at least 1")
        if self.seconds is not None and not 0 < self.seconds < float("inf"):
            raise InputError("--time-budget must be a positive number of seconds")
        return self


@dataclass(frozen=True)
class RunOptions:
    """How a run measures, where, and what it starts from, besides what it tunes: shared by
    `tune`, `benchmark --configs` and `tune-model` (api.tune, api.benchmark_configs,
    stages.tune_model)."""

    settings: EvalSettings = EvalSettings()
    # An evaluator of tuner.strategies, or "auto": the target's own default.
    strategy: str = "auto"
    devices: tuple[str, ...] = ()  # runtime devices to time on (default: the target's)
    store_path: Optional[Path] = None  # the result store (default: DIR/results.sqlite)
    force: bool = False  # clear an output directory that holds another input's run
    inputs: tuple[Path, ...] = ()  # the user's own .npy files for the entry's arguments, in order
    compile_only: bool = False  # compile and verify; `iree-tuner benchmark DIR` measures where the device is
    # The model's external parameters: `SCOPE=FILE` each (tuner.input.parameters.parse_parameters).
    parameters: tuple[str, ...] = ()
    # The size of each dynamic dimension of the entry's arguments (None: what the program's
    # util.assume.int hints allow of DEFAULT_DYNAMIC_SIZE); the user's --input files decide it too.
    dynamic_size: Optional[int] = None
    host_reference: Optional[HostReference] = None
    # How candidates are run and timed: a runner of tuner.evaluation.runners ("local", "replay:STORE").
    runner: str = "local"


@dataclass(frozen=True)
class HostReference:
    """The run's program built for llvm-cpu and run on this host (tuner.stages.host_reference):
    the directory of the inputs it ran on (as Workload.write_inputs names them) and its checked
    result (.npy). A GPU tuning given one runs its builds on those inputs, and where the GPU
    default's result is off the host's, checks every candidate against the host's."""

    inputs: Path
    result: Path


@dataclass(frozen=True)
class Listeners:
    """Who hears what a run does (each optional): `progress(phase, done, total)`; `say(line)`, a
    line for the user; `on_discovered(program, dispatch, how)`, the dispatch picked and why;
    `on_search(summary)`, what the search starts from; `on_candidates(dispatch, candidates)`, the
    candidates made; `on_warning(text)`, a warning about the input (a given config outside the
    constraints, say); `on_results(results)`, each search batch's results as it ends (first-pass
    figures: the search's progress, shown live); `on_result(result)`, each candidate's first-pass
    result as it is stored (its figure against the nearest baseline timing so far), so that a
    search of one batch is seen as it goes."""

    progress: Optional[Callable[[str, int, int], None]] = None
    say: Callable[[str], None] = lambda text: None
    on_discovered: Optional[Callable] = None
    on_search: Optional[Callable[[dict], None]] = None
    on_candidates: Optional[Callable] = None
    on_warning: Optional[Callable[[str], None]] = None
    on_results: Optional[Callable[[list], None]] = None
    on_result: Optional[Callable] = None
