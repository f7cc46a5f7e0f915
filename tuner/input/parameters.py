"""External parameters: a model whose weights live in a parameter archive (`.irpa`, or any
file IREE's parameter providers read: .gguf, .safetensors), the usual form of iree-turbine
exports and of `iree-import-onnx --externalize-params`. The program names them
(`#flow.parameter.named<"model"::"weight">`); iree-compile needs no file for them (the module
reads them when it runs), the runtime tools need `--parameters=SCOPE=FILE` for each scope.

The user names them (`--parameters SCOPE=FILE`, repeatable; a bare FILE is the default scope,
""). They are checked against the scopes the program reads, recorded by absolute path in the
run (the manifest's workload, so `benchmark DIR` uses them too), and never copied."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable

from tuner.errors import InputError
from tuner.core.running import runtime_flags  # noqa: F401 (the runtime tools' flags for them)

# `#flow.parameter.named<"scope"::"key">`, `#stream.parameter.named<"key">` (the default scope).
_NAMED = re.compile(r'parameter\.named<"((?:[^"\\]|\\.)*)"(::"(?:[^"\\]|\\.)*")?>')


def required_scopes(program_text: str) -> set[str]:
    """The parameter scopes the program reads ("" for the default scope)."""
    return {m.group(1) if m.group(2) else "" for m in _NAMED.finditer(program_text)}


def parse_parameters(values: Iterable[str]) -> tuple[str, ...]:
    """`SCOPE=FILE` (or `FILE`, the default scope) as the runtime tools' flag value
    `SCOPE=/absolute/FILE`; one clear line for a file that is not there or a scope given twice."""
    out: dict[str, str] = {}
    for value in values:
        scope, sep, path = value.partition("=")
        if not sep:
            scope, path = "", value
        if not path:
            raise InputError(f"--parameters {value!r}: expected SCOPE=FILE (a parameter archive, e.g. model=weights.irpa)")
        file = Path(path).expanduser()
        if not file.is_file():
            raise InputError(f"--parameters {value!r}: {file} is not a readable file")
        if scope in out:
            raise InputError(f"--parameters: scope {scope!r} given twice ({out[scope]} and {file})")
        out[scope] = str(file.resolve())
    return tuple(f"{scope}={path}" for scope, path in out.items())


def scope_of(parameter: str) -> str:
    return parameter.partition("=")[0]


def check_scopes(source: Path, text: str, parameters: tuple[str, ...]) -> None:
    """One clear line when the program in `source` (its `text`) reads a scope no `--parameters`
    gives."""
    missing = sorted(required_scopes(text) - {scope_of(p) for p in parameters})
    if missing:
        named = ", ".join(repr(s) if s else "the default scope" for s in missing)
        example = " ".join(f"--parameters {s + '=' if s else ''}FILE.irpa" for s in missing)
        raise InputError(f"{source}: its weights are external parameters ({named}), read from a parameter "
                         f"archive when it runs: give it with {example}")


def check_present(parameters: Iterable[str], where: str) -> None:
    """One clear line when a recorded parameter file is not on this machine (a run compiled on
    another machine): the user names it here with --parameters."""
    for p in parameters:
        scope, _, path = p.partition("=")
        if not Path(path).is_file():
            raise InputError(f"{where} reads its parameters (scope {scope!r}) from {path}, which is not on this "
                             f"machine: give it with --parameters {scope + '=' if scope else ''}FILE")


def on_this_machine(recorded: tuple[str, ...], given: Iterable[str], where: str) -> tuple[str, ...]:
    """The parameters a recorded run (a manifest, a model plan) reads here: `given`
    (`--parameters` on this machine) in place of the recorded ones of the same
    scope, each file checked to be here."""
    given = parse_parameters(given)
    mine = {scope_of(p) for p in given}
    out = (*given, *(p for p in recorded if scope_of(p) not in mine))
    check_present(out, where)
    return out
