"""Running IREE's command-line tools in their own processes, with timeouts, keeping what they said."""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import weakref
import time
from dataclasses import dataclass
from pathlib import Path

from tuner.core.reaper import Reaper, start_reaper
from tuner.errors import TargetError

# A directory of IREE tools to use instead of the installed wheels' (a source build, a wrapper).
TOOLS_ENV = "IREE_TUNER_TOOLS"

# On Linux every tool is started through this launcher: it asks the kernel to SIGKILL it when the
# thread that started it goes away (PR_SET_PDEATHSIG, kept across exec), then becomes the tool.
# So a tuner killed with -9, which can run no handler, leaves no tool loading the machine behind
# it. (Not preexec_fn: that is unsafe in a process with threads.)
_LAUNCHER = ("import ctypes, os, sys\n"
             "ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"  # PR_SET_PDEATHSIG, SIGKILL
             "if os.getppid() != int(sys.argv[1]): os._exit(137)\n"  # the tuner died before that
             "os.execvp(sys.argv[2], sys.argv[2:])\n")


def _launched(command: list[str]) -> list[str]:
    return [sys.executable, "-S", "-c", _LAUNCHER, str(os.getpid()), *command] if sys.platform == "linux" else command


# The parent-death signal reaches the tool alone, not what it starts: after `kill -9` of the tuner,
# iree-compile's `sh` and `iree-lld` ran on with parent 1 and left their objects in /tmp. Every
# tool carries this process's mark in its environment, with TMPDIR a directory of the mark's
# own, and the reaper (tuner.core.reaper) kills what carries the mark and removes the directory
# when this process ends, however it ends.
TOOLS_MARK = "IREE_TUNER_TOOLS_RUN"
_reaper: Reaper | None = None
_scratch: Path | None = None
_reaper_lock = threading.Lock()


def _tool_environment() -> dict[str, str]:
    """The environment a tool starts in: this process's, marked, its temporary files in the
    mark's directory (the reaper and its directory made at the first tool of the process)."""
    global _reaper, _scratch
    with _reaper_lock:
        if _reaper is None or (_reaper.process is not None and not _reaper.alive):
            _reaper = start_reaper(TOOLS_MARK)
            _scratch = _reaper.temp_dir("tools")
            if _reaper.process is None:  # no reaper here: the directory goes at a normal exit
                atexit.register(shutil.rmtree, _scratch, ignore_errors=True)
        _scratch.mkdir(parents=True, exist_ok=True)  # removed under a long-lived process: made again
        return {**os.environ, TOOLS_MARK: _reaper.token, "TMPDIR": str(_scratch)}


@dataclass(frozen=True)
class ToolRun:
    """One finished (or killed) tool invocation."""

    command: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool = False
    # Timed out having used almost no CPU: waiting on something, not working (an intermittent
    # deadlock inside iree-compile 3.13 while it loads a tuning spec looks like this).
    hung: bool = False
    retried: bool = False  # it hung once and this is its second try

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    @property
    def crashed(self) -> bool:
        """Killed by a signal it did not ask for (a segfault, an abort), not by our timeout."""
        return self.returncode < 0 and not self.timed_out

    def first_error(self) -> str:
        """The first line of stderr that reads like an error, for one-line reports."""
        if self.crashed:
            return f"{Path(self.command[0]).name} crashed: {_signal_name(-self.returncode)}"
        for line in self.stderr.splitlines():
            if "error" in line.lower():
                return line.strip()
        lines = [l for l in self.stderr.splitlines() if l.strip()]
        return lines[0].strip() if lines else f"exit code {self.returncode}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def find_tool(name: str) -> str:
    """The path of an IREE tool: in $IREE_TUNER_TOOLS if set, the executable inside the installed
    wheels, next to this Python (the venv's console scripts), then on PATH. The wheels' own
    executable comes before the venv's script of the same name: that script is a Python process
    that starts the executable as a child of its own, which the parent-death signal set on the
    tool (tuner.tools.run_tool) does not reach, so a tuner killed with SIGKILL left it running."""
    override = os.environ.get(TOOLS_ENV)
    if override:
        path = Path(override) / name
        if not path.exists():
            raise TargetError(f"{TOOLS_ENV}={override} has no {name}")
        return str(path)
    for package in ("iree._runtime_libs", "iree.compiler._mlir_libs"):
        try:
            spec = importlib.util.find_spec(package)
        except ModuleNotFoundError:
            spec = None
        if spec and spec.submodule_search_locations:
            for loc in spec.submodule_search_locations:
                candidate = Path(loc) / name
                if candidate.exists():
                    return str(candidate)
    here = Path(sys.executable).parent / name
    if here.exists():
        return str(here)
    found = shutil.which(name)
    if found:
        return found
    raise TargetError(f"cannot find the IREE tool {name!r}: install iree-base-compiler and iree-base-runtime")


# Process groups of the tools running now, so that an interrupted run leaves none behind.
_live: set[int] = set()
_live_lock = threading.Lock()
# Threads that were working when a run was interrupted: they start no new tool. (A worker still
# busy would otherwise start the next one, say a baseline timed again, after the kill.) The
# thread that stopped them, and any thread started later, may: a later run in the same process.
_stopped: "weakref.WeakSet[threading.Thread]" = weakref.WeakSet()


class ToolsStopped(RuntimeError):
    """A tool asked for by a thread of an interrupted run (its tools killed): not started."""


def kill_running_tools() -> None:
    """Kill every tool process group this process started and that is still running; the other
    threads alive now start no more tools."""
    with _live_lock:
        me = threading.current_thread()
        _stopped.update(t for t in threading.enumerate() if t is not me)
        groups = list(_live)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _hold_signals() -> tuple[list, dict]:
    """In the main thread (where Python runs signal handlers): SIGINT, SIGTERM and SIGHUP are noted
    rather than handled until `_release_signals`. A handler that raised while a tool was being
    started (inside Popen, waiting for its exec) would leave that tool running, unregistered."""
    if threading.current_thread() is not threading.main_thread():
        return [], {}
    caught: list = []
    previous = {}
    for s in _HELD_SIGNALS:
        previous[s] = signal.signal(s, lambda signum, frame: caught.append((signum, frame)))
    return caught, previous


def _release_signals(caught: list, previous: dict) -> None:
    """Handle what arrived while signals were held, as their handlers would have."""
    for s, handler in previous.items():
        signal.signal(s, handler)
    for signum, frame in caught:
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)  # e.g. raises KeyboardInterrupt, or the CLI's Terminated
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), signum)


HUNG_CPU_SHARE = 0.05  # a tool that used less CPU than this share of its wall time was waiting


def _cpu_seconds(pgid: int) -> float | None:
    """CPU time the running processes of a process group have used: a tool and what it started
    (the wheels' iree-compile is a Python script running the real binary). Linux /proc; None
    elsewhere or when none is found."""
    total, found = 0, False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # pgrp
                total += int(fields[11]) + int(fields[12])  # utime, stime (clock ticks)
                found = True
        except (OSError, ValueError, IndexError):
            continue
    return total / os.sysconf("SC_CLK_TCK") if found else None


def _communicate(proc: subprocess.Popen, start: float, timeout_s: float, idle_s: float | None) -> tuple[str, str]:
    """proc.communicate within `timeout_s` of `start`; with `idle_s`, TimeoutExpired as soon as its
    process group has gained no CPU time for `idle_s` (checked every few seconds)."""
    if idle_s is None:
        return proc.communicate(timeout=timeout_s)
    deadline = start + timeout_s
    last_cpu, last_gain = _cpu_seconds(proc.pid) or 0.0, time.perf_counter()
    while True:
        now = time.perf_counter()
        try:
            return proc.communicate(timeout=max(0.01, min(IDLE_POLL_S, deadline - now)))
        except subprocess.TimeoutExpired:
            now = time.perf_counter()
            cpu = _cpu_seconds(proc.pid)
            if cpu is not None and cpu > last_cpu:
                last_cpu, last_gain = cpu, now
            if cpu is not None and now - last_gain >= idle_s:
                raise _Idle(proc.args, idle_s) from None
            if now >= deadline:
                raise


class _Idle(subprocess.TimeoutExpired):
    """The tool's process group gained no CPU time for `idle_s`: hung, whatever it used before."""


IDLE_POLL_S = 2.0
# A compile that gains no CPU time for this long is hung (IREE 3.13's iree-compile deadlocks now
# and then, seen at its exit with the module written: three threads in futex waits, no CPU).
COMPILE_IDLE_S = 20.0


def run_tool_retrying_a_hang(command: list[str], timeout_s: float, cwd: Path | None = None) -> ToolRun:
    """run_tool for a compile, and once more if it hung (no CPU gained for COMPILE_IDLE_S, or no
    CPU to speak of until its timeout): one hang inside IREE decides nothing. The second try
    says it is one (`retried`)."""
    run = run_tool(command, timeout_s, cwd, idle_s=COMPILE_IDLE_S)
    if run.timed_out and run.hung:
        second = run_tool(command, timeout_s, cwd, idle_s=COMPILE_IDLE_S)
        return ToolRun(second.command, second.returncode, second.stdout, second.stderr, run.seconds + second.seconds,
                       second.timed_out, second.hung, retried=True)
    return run


def run_tool(command: list[str], timeout_s: float, cwd: Path | None = None, idle_s: float | None = None) -> ToolRun:
    """Run a tool in its own process group, so that a timeout kills it and its children.
    Safe to call from several threads at once; refused (ToolsStopped) in a thread of a run whose
    tools were killed. An interruption while it starts takes it down too. `idle_s`: a tool whose
    process group gains no CPU time for that long is hung (killed, `timed_out` and `hung`)
    before its timeout; only for tools that never wait on anything but the CPU (compiles)."""
    start = time.perf_counter()
    caught, previous = _hold_signals()
    try:
        with _live_lock:  # started and registered at once: kill_running_tools sees it or it never starts
            if threading.current_thread() in _stopped:
                raise ToolsStopped(f"not started after the run was interrupted: {command[0]}")
            proc = subprocess.Popen(
                _launched(command), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
                env=_tool_environment(),
                errors="replace",  # a tool's bytes that are not UTF-8 are shown, never a traceback
                start_new_session=True,
            )
            _live.add(proc.pid)
    except BaseException:
        _release_signals([], previous)
        raise
    try:
        _release_signals(caught, previous)  # an interruption that came meanwhile raises here
        out, err = _communicate(proc, start, timeout_s, idle_s)
        return ToolRun(tuple(command), proc.returncode, out, err, time.perf_counter() - start)
    except subprocess.TimeoutExpired as expired:
        idle = isinstance(expired, _Idle)
        cpu = _cpu_seconds(proc.pid)
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        wall = time.perf_counter() - start
        return ToolRun(tuple(command), -9, out or "", err or "", wall, timed_out=True,
                       hung=idle or (cpu is not None and cpu < HUNG_CPU_SHARE * wall))
    except BaseException:  # interrupted: take the tool down with us
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        raise
    finally:
        with _live_lock:
            _live.discard(proc.pid)
