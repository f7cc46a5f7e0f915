"""Rebuilding a finished tuning's result, and the command lines that say how.

A run directory holds what rebuilds its result with plain iree-compile: the program it compiled
(results.json's `input`) and the flags (best_flags.txt for `tune`, model_flags.txt for
`tune-model`, naming the spec by its absolute path). `rebuild` runs that compile with the compiler
of the environment the tuner runs in, so it works with the virtual environment not activated and
from any directory. The lines the tuner prints name that command by absolute paths, so that a
pasted line works from anywhere; a model with external parameters gets its run line apart (the
compiler needs no parameters), never a `;` that a shell would run as a second command."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import InputError, OutputError, TargetError, ToolError
from tuner.input.parameters import runtime_flags
from tuner.tools import find_tool, run_tool_retrying_a_hang
from tuner.core.trusted_flags import checked_flags

FLAG_FILES = {"model": "model_flags.txt"}  # by results.json's `kind`; any other: best_flags.txt


@dataclass(frozen=True)
class Rebuild:
    """What rebuilds a run directory's result: the program, the flags file, and how to run it."""

    source: Path  # the program it compiled
    flags_file: Path
    entry: str
    parameters: tuple[str, ...]
    device: str = ""  # the runtime device the run's target means ("" where results.json names none)

    def compile_command(self, out: Path | str) -> list[str]:
        return [find_tool("iree-compile"), str(self.source), f"@{self.flags_file}", "-o", str(out)]

    def run_command(self, module: Path | str) -> list[str]:
        """iree-run-module with the module's parameters (the inputs are the user's to give)."""
        return [find_tool("iree-run-module"), f"--module={module}", f"--function={self.entry}",
                *([f"--device={self.device}"] if self.device else []), *runtime_flags(self.parameters)]


def read_rebuild(directory: Path) -> Rebuild:
    """The rebuild of the finished run in `directory`; one clear line where it cannot be (no
    results.json, a program or spec that is gone: a directory moved after the run, say)."""
    path = directory / "results.json"
    if not directory.is_dir():
        raise InputError(f"{directory}: no such directory; name the --output directory of a `tune` or `tune-model` run")
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(f"{directory}: no results.json; only a finished `tune` or `tune-model` can be rebuilt") from None
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable results file ({e})") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("input"), str):
        raise InputError(f"{path}: names no program (`input`); not a results file of this tuner")
    flags_file = (directory / FLAG_FILES.get(meta.get("kind", ""), "best_flags.txt")).resolve()
    if not flags_file.is_file():
        raise InputError(f"{directory}: no {flags_file.name}; the run did not finish writing its result")
    source = Path(meta["input"])
    if not source.is_file():
        raise InputError(f"{path} names the program {source}, which is gone (was the directory moved?)")
    _check_source(directory, source, path)
    for flag in checked_flags(read_flags(flags_file), directory, str(flags_file)):
        value = flag.split("=", 1)[1] if "=" in flag else ""
        if value.endswith(".mlir") and not Path(value).is_file():
            raise InputError(f"{flags_file.name} names {value}, which is gone (was the directory moved?)")
    return Rebuild(source, flags_file, str(meta.get("entry", "")), tuple(meta.get("parameters", ())),
                   _device(meta.get("target")))


def _check_source(directory: Path, source: Path, results: Path) -> None:
    """The program `source` that results.json names is one the run compiled: inside its directory
    (an imported or rewritten program), or the run's own input, whose digest run.json holds
    (issue 60: a results.json naming /etc/hostname had it compiled)."""
    from tuner.run_dir import RunDirectory, input_digest

    if source.resolve().is_relative_to(directory.resolve()):
        return
    owner = RunDirectory.owner(directory) or {}
    if not owner.get("input_digest") or owner["input_digest"] != input_digest(source):
        raise InputError(f"{results} names the program {source}, which is not the input this directory's run "
                         "tuned (its digest differs from run.json's); refusing to compile it")


def _device(target) -> str:
    """The runtime device of the run's target (results.json's `target`), or "" if it names none."""
    from tuner.targets import parse_target

    try:
        return parse_target(target).device if isinstance(target, str) and target else ""
    except TargetError:  # a target this tuner no longer knows: the runtime's default device
        return ""


def read_flags(flags_file: Path) -> list[str]:
    """The flags of a response file as iree-compile reads it (GNU-quoted; a quoted flag may hold a
    newline, as an output directory's path may, so the file is read whole, not line by line)."""
    try:
        return shlex.split(flags_file.read_text())
    except ValueError as e:
        raise InputError(f"{flags_file}: not a readable flags file ({e})") from None


def rebuild(directory: Path, out: Path, timeout_s: float = 1800.0) -> Rebuild:
    """Compile the result of the run in `directory` into `out` with plain iree-compile."""
    target = read_rebuild(directory)
    if out.exists() and out.is_dir():
        raise OutputError(f"-o {out}: a directory; name the .vmfb file to write")
    command = target.compile_command(out)
    # IREE 3.13's iree-compile now and then hangs after writing its module (no CPU, futex waits):
    # killed after COMPILE_IDLE_S without CPU and run once more, as candidates' compiles are.
    run = run_tool_retrying_a_hang(command, timeout_s)
    if not run.ok:
        raise ToolError(f"iree-compile did not rebuild {directory}: {run.first_error()}", command, run.stderr)
    if not out.is_file():
        raise OutputError(f"iree-compile wrote no {out}")
    return target


def tuner_command() -> str:
    """This tuner as a command that works pasted anywhere: the `iree-tuner` script of its
    environment by absolute path, else this Python running its CLI module."""
    script = Path(sys.executable).parent / "iree-tuner"
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m tuner.cli"


def rebuild_line(directory: Path) -> str:
    """The command that rebuilds the result in `directory`, to print."""
    return f"{tuner_command()} rebuild {shlex.quote(str(directory.resolve()))} -o OUT.vmfb"
