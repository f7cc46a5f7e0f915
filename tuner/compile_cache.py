"""Successful compiles kept by their content and given back on an identical one
(`IREE_TUNER_COMPILE_CACHE=DIR`; off unless set).

A compile is identified by the iree-compile it runs (its path, size and time of change), its
time limit, and each argument with every file it names read for its content: the input, a
`@flags` file, a tuning spec behind `--flag=PATH`. What it writes is not part of it: the module
behind `-o` and the directories behind `--iree-hal-dump-*-to=`, which a reuse writes again where
the new command asks (relative to its own directory), with the compile's stdout and stderr. Only
compiles that succeeded are kept; a tool other than iree-compile is never reused. The test suite
sets it (tests/conftest.py): its tests compile the same small programs under the same flags again
and again. Written for that and for a rerun on one machine: entries are never evicted."""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Optional, Sequence

ENV = "IREE_TUNER_COMPILE_CACHE"
DUMP = "--iree-hal-dump-"


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _named_file(value: str, cwd: Optional[Path]) -> Optional[Path]:
    path = Path(value) if os.path.isabs(value) else (cwd or Path.cwd()) / value
    try:
        return path if path.is_file() else None
    except OSError:  # a flag's value too long to be a path
        return None


def _identity(command: Sequence[str], timeout_s: float, cwd: Optional[Path]) -> Optional[tuple[str, list[str], list[str]]]:
    """(key, output files, dump directories) of a compile, or None where it is none to keep."""
    tool = Path(command[0])
    if tool.name != "iree-compile" or not tool.is_file():
        return None
    stat = tool.stat()
    h = hashlib.sha256(f"{tool}|{stat.st_size}|{stat.st_mtime_ns}|{timeout_s}".encode())
    outputs: list[str] = []
    dumps: list[str] = []
    args = list(command[1:])
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-o" and i + 1 < len(args):
            outputs.append(args[i + 1])
            h.update(b"\0-o <out>")
            i += 2
            continue
        if arg.startswith(DUMP) and "=" in arg:
            flag, directory = arg.split("=", 1)
            dumps.append(directory)
            h.update(f"\0{flag}=<dir>".encode())
        elif arg.startswith("@") and _named_file(arg[1:], cwd):
            h.update(b"\0@" + _file_digest(_named_file(arg[1:], cwd)).encode())
        elif "=" in arg and arg.startswith("-") and _named_file(arg.split("=", 1)[1], cwd):
            h.update(f"\0{arg.split('=', 1)[0]}=".encode() + _file_digest(_named_file(arg.split("=", 1)[1], cwd)).encode())
        elif not arg.startswith("-") and _named_file(arg, cwd):
            h.update(b"\0<file>" + _file_digest(_named_file(arg, cwd)).encode())
        else:
            h.update(b"\0" + arg.encode())
        i += 1
    return h.hexdigest(), outputs, dumps


def _where(path: str, cwd: Optional[Path]) -> Path:
    return Path(path) if os.path.isabs(path) else (cwd or Path.cwd()) / path


def reuse(command: Sequence[str], timeout_s: float, cwd: Optional[Path]) -> Optional[tuple[str, str, float]]:
    """The kept stdout, stderr and seconds of an identical compile, its outputs written where
    `command` asks, or None."""
    root = os.environ.get(ENV)
    identity = _identity(command, timeout_s, cwd) if root else None
    if identity is None:
        return None
    key, outputs, dumps = identity
    entry = Path(root) / key
    try:
        meta = json.loads((entry / "meta.json").read_text())
        for i, out in enumerate(outputs):
            target = _where(out, cwd)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes((entry / f"out{i}").read_bytes())
        for i, directory in enumerate(dumps):
            with tarfile.open(entry / f"dump{i}.tar") as tar:
                tar.extractall(_where(directory, cwd), filter="data")
    except (OSError, ValueError, KeyError, tarfile.TarError):
        return None
    return meta["stdout"], meta["stderr"], meta["seconds"]


def keep(command: Sequence[str], timeout_s: float, cwd: Optional[Path], ok: bool, stdout: str, stderr: str,
         seconds: float) -> None:
    """Keep a compile's result and outputs where it succeeded (written whole, then renamed into
    place)."""
    root = os.environ.get(ENV)
    identity = _identity(command, timeout_s, cwd) if root and ok else None
    if identity is None:
        return
    key, outputs, dumps = identity
    Path(root).mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=root, prefix=".new-"))
    try:
        for i, out in enumerate(outputs):
            (staging / f"out{i}").write_bytes(_where(out, cwd).read_bytes())
        for i, directory in enumerate(dumps):
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                if _where(directory, cwd).is_dir():
                    tar.add(_where(directory, cwd), arcname=".")
            (staging / f"dump{i}.tar").write_bytes(buffer.getvalue())
        (staging / "meta.json").write_text(json.dumps({"stdout": stdout, "stderr": stderr, "seconds": seconds}))
        os.rename(staging, Path(root) / key)
    except OSError:  # kept by another process meanwhile, or a disk that refuses: nothing kept
        for f in staging.glob("*"):
            f.unlink()
        staging.rmdir()
