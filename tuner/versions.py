"""The IREE versions a result depends on: part of every stored result's key.

A result is keyed by the tools that made it. Those are the installed wheels' unless
$IREE_TUNER_TOOLS names other ones (a source build, a wrapper), whose results must not be reused
by a run with the wheels' tools or with other ones: the version then carries a digest of that
directory's tools (where they resolve to, their sizes and modification times)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

TOOLS = ("iree-compile", "iree-run-module", "iree-benchmark-module")


def tools_identity() -> str:
    """"" for the installed wheels' tools; else "+tools:DIGEST" of the tools $IREE_TUNER_TOOLS names."""
    from tuner.tools import TOOLS_ENV

    override = os.environ.get(TOOLS_ENV)
    if not override:
        return ""
    h = hashlib.sha256()
    for name in TOOLS:
        path = Path(override) / name
        try:
            real = path.resolve()
            st = real.stat()
            h.update(f"{name}={real}:{st.st_size}:{st.st_mtime_ns};".encode())
        except OSError:
            h.update(f"{name}=missing;".encode())
    return f"+tools:{h.hexdigest()[:12]}"


def compiler_version() -> str:
    try:
        from iree.compiler.version import VERSION
    except ImportError:
        VERSION = "none"
    return VERSION + tools_identity()


def runtime_version() -> str:
    try:
        from iree.runtime.version import VERSION
    except ImportError:
        VERSION = "none"
    return VERSION + tools_identity()


def version_text() -> str:
    """What `iree-tuner --version` prints: this tuner's version and the tools it runs."""
    from importlib import metadata

    try:
        tuner = metadata.version("iree-dispatch-tuner")
    except metadata.PackageNotFoundError:
        tuner = "unknown (not installed)"
    try:
        import z3

        solver = z3.get_version_string()
    except ImportError:
        solver = "none"
    return (f"iree-tuner {tuner}\nIREE compiler {compiler_version()}, runtime {runtime_version()}\n"
            f"z3 {solver}")
