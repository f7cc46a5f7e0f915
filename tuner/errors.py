"""The few errors bad input can raise; only the CLI turns them into exit codes."""

from __future__ import annotations

from pathlib import Path


class TunerError(Exception):
    """Base class: the message says what was wrong and what to do."""

    exit_code = 1


class InputError(TunerError):
    """The input file is missing, is not MLIR, or has nothing to tune."""

    exit_code = 2


class UnusableBaseline(InputError):
    """The compiler's default gives a result no candidate can be checked against (not finite):
    the whole run stops for `tune`; in a model's tuning, only that dispatch goes untuned."""


class NotTimedAlone(InputError):
    """The dispatch cannot be timed alone, from IREE's dumped dispatch benchmark
    (Pipeline.untimed_alone: a matrix-vector product's does not compile), and this run would time
    it so: `tune` stops with one line; in a model's tuning, only that dispatch goes untuned."""


class TargetError(TunerError):
    """The target is unknown or its tools are missing."""

    exit_code = 3


class OutputError(TunerError):
    """The output directory cannot be written."""

    exit_code = 4


class ToolError(TunerError):
    """An IREE tool failed where the run cannot go on (e.g. the baseline does not build)."""

    exit_code = 5

    def __init__(self, message: str, command: list[str] | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.command = command or []
        self.stderr = stderr


class LockedError(TunerError):
    """Another run holds the output directory."""

    exit_code = 6


class OtherRunError(TunerError):
    """The output directory holds the run of another input (or target, dispatch, pipeline)."""

    exit_code = 7


class StoreError(TunerError):
    """The --store file is not a result store of this tuner (or one from before a schema change)."""

    exit_code = 8


def unreadable_input(path) -> InputError:
    """The one line for an input path that is not a file to read."""
    path = Path(path)
    if str(path) == "-":
        return InputError("-: models are read from files, not from standard input; give the model's file")
    if path.is_dir():
        return InputError(f"{path}: a directory, not a model file")
    return InputError(f"{path}: no such file")
