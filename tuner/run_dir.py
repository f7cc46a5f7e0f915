"""A run's output directory: one run at a time, and one input's run in it.

The lock is an `fcntl.flock` on DIR/.iree-tuner.lock, held for the whole run by `tune`,
`benchmark INPUT --configs` and `benchmark DIR` (not by `report`, which only reads). The kernel
drops it when its holder dies, so a run killed with -9 never blocks the next one. The lock file
names its holder, for the error the second run gets.

DIR/run.json says whose run the directory holds (the input's digest, the target, the dispatch
and pipeline asked for). A run of anything else into it is refused, since its candidates/ and
outputs would overwrite the other's; `--force` clears the directory's run files first (the
result store stays: its keys carry the input's digest, so nothing in it is mistaken for another's).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import sys
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Callable, Optional

from tuner.errors import InputError, LockedError, OtherRunError, OutputError, TunerError, unreadable_input

def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# The process's file-creation mask, read once (reading it means setting it).
UMASK = _umask()


def write_file(path: Path, content: str | bytes | Callable[[BinaryIO], object]) -> Path:
    """Write `content` to `path` atomically, never through what is there: a new file beside it
    (created exclusively) takes its place, so a symbolic link planted at `path` (or at any
    temporary name) is replaced, and the file it points to is left alone. `content`: text, bytes,
    or a function writing into the open binary file (an array saved without a copy in memory:
    `lambda f: numpy.save(f, array)`). The file gets the mode any new file gets under the umask
    (the exclusive creation alone would make it 0600)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~UMASK)
        with os.fdopen(fd, "w" if isinstance(content, str) else "wb") as f:
            if callable(content):
                content(f)
            else:
                f.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def unwritable_output(path: Path, error: OSError) -> OutputError:
    """The one line for an output directory that cannot be made or written: where the path (or a
    directory above it) is a file, said so ("File exists" said nothing a user could act on)."""
    blocking = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        what = "is a file" if blocking == path else f"is under {blocking}, which is a file"
        return OutputError(f"output directory {path} {what}, not a directory: name a directory for --output")
    return OutputError(f"cannot write to output directory {path}: {error.strerror or error}")


# The run directories this process holds (RunDirectory), as given: below them, no directory is
# ever reached through a symbolic link (real_directory, remove_tree).
_HELD: list[Path] = []


def _held_root(path: Path) -> Optional[Path]:
    return next((r for r in _HELD if path == r or r in path.parents), None)


def real_directory(path: Path, root: Optional[Path] = None) -> Path:
    """`path` made a directory (with its parents), where below `root` (default: a run directory
    this process holds) every component is a real directory: a symbolic link planted at one
    (`DIR/candidates ->` elsewhere) is removed, its target untouched, and a directory made in its
    place, so nothing is written or deleted through it. A file in its place is one error line.
    The root itself may be a link the user made. Outside any root: a plain mkdir."""
    path = Path(os.path.abspath(path))
    root = Path(os.path.abspath(root)) if root is not None else _held_root(path)
    if root is None:
        path.mkdir(parents=True, exist_ok=True)
        return path
    current = root
    for part in path.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            current.unlink(missing_ok=True)  # (another thread may have replaced it first)
        elif current.exists() and not current.is_dir():
            raise OutputError(f"{current} is a file where the run keeps a directory; remove it or give another --output")
        current.mkdir(exist_ok=True)
    return path


def remove_tree(path: Path) -> None:
    """Remove `path` and what it holds, never through a symbolic link: below a held run
    directory its parents are made real first (real_directory: a planted `DIR/candidates` link
    would otherwise lead the removal of `DIR/candidates/0001` outside), a link at `path` is
    removed itself (its target untouched), and rmtree does not follow the links inside."""
    path = Path(os.path.abspath(path))
    if _held_root(path) is not None:
        real_directory(path.parent)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def fresh(path: Path) -> Path:
    """`path` cleared of a symbolic link a tool would write through (its target untouched)."""
    if path.is_symlink():
        path.unlink()
    return path


def fresh_in_run(path: Path) -> Path:
    """`path` cleared of a symbolic link (fresh) where it lies in a run directory this process
    holds, where any link was planted, not made by the user; elsewhere as it is (a `--store` the
    user named may be a link of theirs)."""
    return fresh(path) if _held_root(Path(os.path.abspath(path))) is not None else path


LOCK = ".iree-tuner.lock"
RUN = "run.json"
# What a run writes into its directory, removed by --force (the result store is not among them).
RUN_FILES = ("candidates", "inputs", "given-inputs", "imported", "profile", "manifest.json", "results.json", "best_spec.mlir", "best_flags.txt",
             "results.png", RUN)


def input_digest(path: Path) -> str:
    """The digest of the input file's bytes (the same digest the candidates' keys carry)."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except (FileNotFoundError, IsADirectoryError):
        raise unreadable_input(path) from None
    except OSError as e:
        raise InputError(f"{path}: cannot read it ({e.strerror or e})") from None


def run_identity(input_path: Path, target: str, dispatch: Optional[str], pipeline: Optional[str]) -> dict:
    """What makes two runs the same run: a rerun of it resumes, anything else needs its own DIR."""
    return {"input": str(input_path.resolve()), "input_digest": input_digest(input_path), "target": target,
            "dispatch": dispatch, "pipeline": pipeline}


def _same(a: dict, b: dict) -> bool:
    return all(a.get(k) == b.get(k) for k in ("input_digest", "target", "dispatch", "pipeline"))


# What a run keeps that a later run resumes from or a person reads: where any of these is in a
# directory, a refused run leaves the directory as it is.
MEASURED = ("profile/profile.json", "profile.json", "manifest.json", "results.json", "flag-decision.json", "model-plan.json")


def holds_measurements(path: Path) -> bool:
    """Whether a run directory holds anything measured or planned: a result store with a result
    in it, a profile, a manifest, results, a decision (an unreadable store counts: kept)."""
    if any((path / name).exists() for name in MEASURED):
        return True
    store = path / "results.sqlite"
    if not store.exists():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"{store.resolve().as_uri()}?mode=ro", uri=True)) as db:
            return db.execute("SELECT EXISTS (SELECT 1 FROM results)").fetchone()[0] == 1
    except sqlite3.Error:
        return True


class RunDirectory:
    """`with RunDirectory(DIR, identity, force):` creates DIR, takes its lock (or fails with one
    line naming the holder) and checks that DIR holds no other run; the lock is released on exit."""

    def __init__(self, path: Path, identity: Optional[dict] = None, force: bool = False) -> None:
        self.path = Path(path)
        self.identity = identity
        self.force = force
        self._fd: Optional[int] = None
        self._fresh = False  # this run wrote the directory's first run.json
        self._created = False  # this run made the directory

    def __enter__(self) -> "RunDirectory":
        try:
            self._created = not self.path.exists()
            self.path.mkdir(parents=True, exist_ok=True)
            fresh(self.path / LOCK)  # the holder's line is written into it: never through a link
            self._fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as e:
            raise unwritable_output(self.path, e) from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder()
            os.close(self._fd)
            self._fd = None
            raise LockedError(f"{self.path} is in use by another run ({holder}); wait for it to end or give "
                              f"another --output") from None
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                        "command": " ".join(["iree-tuner", *sys.argv[1:]]),
                                        "since": time.strftime("%Y-%m-%d %H:%M:%S")}).encode(), 0)
        _HELD.append(Path(os.path.abspath(self.path)))
        try:
            if self.identity is not None:
                self._claim()
        except BaseException:
            self.__exit__()
            raise
        return self

    @staticmethod
    def owner(path: Path) -> Optional[dict]:
        """Whose run the directory holds (its run.json), if it says."""
        try:
            data = json.loads((Path(path) / RUN).read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _holder(self) -> str:
        try:
            info = json.loads(Path(self.path / LOCK).read_text())
            return f"pid {info['pid']} on {info['host']} since {info['since']}: {info['command']}"
        except (OSError, ValueError, KeyError, TypeError):
            return "holder unknown"

    def _claim(self) -> None:
        run_file = self.path / RUN
        if run_file.exists():
            previous = self.owner(self.path) or {}
            if not _same(previous, self.identity or {}):
                if not self.force:
                    raise OtherRunError(
                        f"{self.path} holds the run of another input or setting ({previous.get('input', '?')}, "
                        f"target {previous.get('target', '?')}); give another --output, or --force to clear it")
                self.clear()
        else:
            self._fresh = True
            if self.force:
                self.clear()
        write_file(run_file, json.dumps(self.identity, indent=2))  # never through a link planted there

    def clear(self) -> None:
        """Remove the run files of whatever run the directory held (not the result store)."""
        for name in RUN_FILES:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()

    def __exit__(self, exc_type=None, *exc) -> None:
        refused = exc_type is not None and issubclass(exc_type, TunerError)
        if self._fresh and refused:
            # Refused before it measured anything (bad input, a tool that cannot run): a directory
            # this run claimed first is left unclaimed, for a run of another input.
            (self.path / RUN).unlink(missing_ok=True)
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
            _HELD.remove(Path(os.path.abspath(self.path)))
        if self._created and refused and not holds_measurements(self.path):
            # A directory this run made, refused before it measured anything (bad input, a tool
            # that cannot run), is removed with what it wrote there (an ONNX model's import, the
            # generated inputs): a refused run leaves no ./tuning-output and no partial
            # imported/ or candidates/ behind (issue 63).
            remove_tree(self.path)
