"""The runners a run can name (`--runner NAME[:ARGUMENT]`): how a built candidate is run and
timed (tuner.evaluation.measure.ModuleRunner). A new runner is a class and a line here.

"local" (the default) runs modules on this machine's devices (and, on CUDA with CUPTI, times
candidates by their kernels inside the whole model); "replay:STORE" replays an earlier run's
timings (tuner.evaluation.replay_runner). A Ray cluster's workers are the runner of `--strategy
ray`, which makes its own."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from tuner.errors import InputError
from tuner.evaluation.measure import LOCAL, ModuleRunner


def _local(argument: str) -> ModuleRunner:
    if argument:
        raise InputError("--runner local takes no argument")
    return LOCAL


def _replay(argument: str) -> ModuleRunner:
    from tuner.evaluation.replay_runner import ReplayRunner

    if not argument:
        raise InputError("--runner replay needs the store to replay: --runner replay:DIR/results.sqlite")
    if not Path(argument).is_file():
        raise InputError(f"--runner replay: {argument} is no file")
    return ReplayRunner(Path(argument))


# name -> a maker given what follows the name's colon ("" where nothing does)
RUNNERS: dict[str, Callable[[str], ModuleRunner]] = {"local": _local, "replay": _replay}


def runner_named(spec: str) -> ModuleRunner:
    """The runner `spec` names ("NAME" or "NAME:ARGUMENT"), or one clear InputError."""
    name, _, argument = spec.partition(":")
    if name not in RUNNERS:
        raise InputError(f"unknown runner {name!r}; choose one of {', '.join(RUNNERS)}")
    return RUNNERS[name](argument)
