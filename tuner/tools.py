"""Running IREE's command-line tools in their own processes, with timeouts, keeping what they said."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tuner.errors import TargetError


@dataclass(frozen=True)
class ToolRun:
    """One finished (or killed) tool invocation."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def first_error(self) -> str:
        """The first line of stderr that reads like an error, for one-line reports."""
        for line in self.stderr.splitlines():
            if "error" in line.lower():
                return line.strip()
        lines = [l for l in self.stderr.splitlines() if l.strip()]
        return lines[0].strip() if lines else f"exit code {self.returncode}"


def find_tool(name: str) -> str:
    """The path of an IREE tool: next to this Python first (the venv's console scripts), then
    inside the installed wheels, then on PATH."""
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    for package in ("iree._runtime_libs", "iree.compiler._mlir_libs"):
        try:
            import importlib.util

            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            spec = None
        if spec and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                candidate = Path(loc) / name
                if candidate.exists():
                    return str(candidate)
    found = shutil.which(name)
    if found:
        return found
    raise TargetError(f"cannot find the IREE tool {name!r}: install iree-base-compiler and iree-base-runtime")


def run_tool(command: list[str], timeout_s: float, cwd: Path | None = None) -> ToolRun:
    """Run a tool in its own process group, so that a timeout kills it and its children."""
    import time

    start = time.perf_counter()
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        return ToolRun(tuple(command), proc.returncode, out, err, time.perf_counter() - start)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return ToolRun(tuple(command), -9, out or "", err or "", time.perf_counter() - start, timed_out=True)
