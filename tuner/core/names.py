"""Names that come from outside the run (a program's functions and dispatches, the names in a
plan, a manifest or a results file) and become file names under the run's directory: one rule,
here. A name that breaks it is refused in one line where it was read, or (a program's function)
what it runs is left untuned saying why; it never becomes a path."""

from __future__ import annotations

MAX_BYTES = 255  # a file name's limit on Linux file systems


def why_not_a_file_name(name: object) -> str | None:
    """Why `name` cannot be one file name as it is (None: it can): empty, `.` or `..`, a path
    separator or NUL, a control character (it would reach the terminal too), or too long."""
    if not isinstance(name, str) or not name:
        return f"{name!r} is not a name"
    if name in (".", ".."):
        return f"{name!r} names a directory, not a file"
    if any(c in name for c in "/\\\0"):
        return f"{name!r} holds a path separator"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"{name!r} holds a control character"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        return f"a name of {len(name.encode('utf-8', 'surrogatepass'))} bytes is longer than a file name may be ({MAX_BYTES})"
    return None


def is_file_name(name: object) -> bool:
    return why_not_a_file_name(name) is None


def shown(name: str) -> str:
    """`name` as it is printed: itself where it is a file name, else its repr (no control
    characters reach the terminal)."""
    return name if is_file_name(name) else repr(name)


def printable(text: str) -> str:
    """`text` (a label read from a results file, say) as the terminal gets it: control and
    right-to-left characters written as escapes, and rich's markup (`[bold]`) shown as it is,
    never interpreted."""
    from rich.markup import escape

    return escape("".join(c if c.isprintable() and not 0x202A <= ord(c) <= 0x202E and not 0x2066 <= ord(c) <= 0x2069
                          else c.encode("unicode_escape").decode("ascii") for c in text))
