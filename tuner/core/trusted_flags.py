"""Which iree-compile flags read back from a run directory (a manifest's, best_flags.txt,
model_flags.txt) are taken: IREE compiler flags of the kinds the tuner writes, none that tells
the compiler to write files (its dumps), and none naming a file outside that directory. A
directory is the user's to move and share: what it holds must not make `rebuild` or `benchmark
DIR` read or write elsewhere (issue 60: `--iree-hal-dump-executable-sources-to=/elsewhere` in
best_flags.txt made `rebuild` write there). Plain Python: the benchmark side reads it too."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from tuner.errors import InputError

# Flag names holding these write files or change where output goes: never in a result.
_WRITERS = ("dump", "output", "print-ir", "-to-file", "reproducer")


def why_refused(flag: str, directory: Path) -> str | None:
    """Why `flag`, read from `directory`, is not taken (None: it is)."""
    if not isinstance(flag, str) or not flag.startswith("--iree-"):
        return f"{flag!r} is not an IREE compiler flag of the kinds the tuner writes"
    name, _, value = flag.partition("=")
    if any(w in name for w in _WRITERS):
        return f"{name} makes the compiler write files; a result never holds it"
    if "/" in value:  # a file: the spec, by the absolute path the tuner wrote (a library's @entry after it)
        path = Path(value.split("@", 1)[0])
        root = Path(directory).resolve()
        if not path.is_absolute() or not path.resolve().is_relative_to(root):
            return f"{name} names {path}, outside {root} (was the directory moved? tune again into it)"
    return None


def checked_flags(flags: Iterable[str], directory: Path, source: str) -> list[str]:
    """`flags` if every one is taken (why_refused), else one error line naming the first that
    is not and where it was read (`source`)."""
    flags = list(flags)
    for flag in flags:
        why = why_refused(flag, directory)
        if why:
            raise InputError(f"{source}: {why}; refusing to compile with it")
    return flags
