"""What a run leaves behind, however it ends: the processes that carry its mark and the temporary
directories named after it.

The parent-death signal the tool launcher sets (tuner.tools) reaches the tool alone: iree-compile
links each executable by starting `iree-lld` (through `sh`), which kept running with parent 1
after `kill -9` of the tuner, and left its `.o` and `.so` files in /tmp. A Ray cluster's agents
outlive their driver the same way (tuner.cluster.connect). So a run marks what it starts with a
token of its own in an environment variable, which every descendant inherits, and starts a
reaper: a process holding the read end of a pipe whose write end only the run holds. When the run
ends (its exit, a signal, SIGKILL) the pipe closes, and the reaper kills every process still
carrying the mark, removes the directories of the system's temporary directory whose names hold
the token (`temp_dir`), and exits. It lives in a session of its own, so a Ctrl-C to the run's
terminal does not end it first. Linux (/proc); elsewhere it kills nothing.

A process that renames itself (setproctitle, as Ray's agents do) may overwrite the memory /proc
reads its environment from, and then shows no mark: the reaper also kills every process below
a marked one, notes what it finds every two seconds while the run lives (an agent whose raylet
died with the run is below no marked process when the run ends), and sweeps again for a few
seconds after (an agent the raylet was starting as the run ended appears after the first sweep)."""

from __future__ import annotations

import os
import secrets
import select
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

# The reaper's program: argv[1] is the mark ("NAME=TOKEN"), argv[2] the temporary directory
# where directories named "iree-tuner-*-TOKEN*" are removed.
_REAPER = """
import glob, os, select, shutil, signal, sys, time
mark, temp = sys.argv[1].encode(), sys.argv[2]
naming = {n.encode() for n in sys.argv[3].split(",") if n} if len(sys.argv) > 3 else set()
poll = float(sys.argv[4]) if len(sys.argv) > 4 and sys.argv[4] else None  # seconds; None: only at the end
ever = set()  # the processes seen carrying the mark

def stat(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[1]), fields[19]  # the parent, the start time (a pid used again has another)

born = int(stat(os.getpid())[1])

def found():
    # Each process that carries the mark, or names a process that carried it in one of `naming`
    # (Ray's agents: RAY_RAYLET_PID) and started after this reaper, and each one below such a
    # process (a process that renames itself, setproctitle: Ray's agents, can overwrite its
    # environment's memory, from which /proc reads it, and then shows no mark of its own), with
    # its start time
    parent, start, environ = {}, {}, {}
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            parent[int(pid)], start[int(pid)] = stat(pid)
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ[int(pid)] = f.read().split(b"\\0")
        except (OSError, ValueError, IndexError):
            pass
    marked = {pid for pid, items in environ.items() if mark in items}
    ever.update(marked)
    for pid, items in environ.items():
        for item in items:
            name, _, value = item.partition(b"=")
            if name in naming and value.isdigit() and int(value) in ever and int(start[pid]) >= born:
                marked.add(pid)
    hits = {}
    for pid in parent:
        above, steps = pid, 0
        while above in parent and above not in marked and steps < 64:
            above, steps = parent[above], steps + 1
        if above in marked:
            hits[pid] = start[pid]
    return hits

# While the run lives, what carries its mark is noted every `poll` seconds: a Ray agent whose
# raylet died with the run is no longer below a marked process when the run ends (its parent is
# then 1) and may show no mark (renamed): it is known by the raylet it names, which must have
# been seen with the mark (tests/test_cluster.py: agents up 1-2 s after their raylet, the run
# killed then, outlived a reaper that looked every 2 s)
known, pending = {}, b""
while True:
    if select.select([sys.stdin.buffer], [], [], poll)[0]:
        data = os.read(sys.stdin.fileno(), 65536)
        if not data:
            break  # the run that started this has ended: the pipe is closed
        # the run names processes of its own, a line each (Reaper.note): what names them is reaped
        *lines, pending = (pending + data).split(b"\\n")
        ever.update(int(line) for line in lines if line.strip().isdigit())
    known.update(found())

def sweep():
    known.update(found())
    for pid, start in list(known.items()):
        try:
            if stat(pid)[1] == start:
                os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError, IndexError):
            known.pop(pid, None)  # gone

sweep()
token = sys.argv[1].split("=", 1)[1]
for path in glob.glob(os.path.join(glob.escape(temp), f"iree-tuner-*-{glob.escape(token)}*")):
    shutil.rmtree(path, ignore_errors=True)
try:  # done: a run that waits for this (reap_now) goes on
    os.write(1, b"x")
except OSError:
    pass
# Again for a few seconds: a process the run's own (a raylet) was starting as the run ended
# carries the mark too, and appears later (Ray's agents outlived a single sweep under load).
end = time.monotonic() + 5
while time.monotonic() < end:
    time.sleep(0.5)
    sweep()
"""


def _is_mark(variable: str) -> bool:
    """Whether an environment variable is a run's mark (IREE_TUNER_..._RUN)."""
    return variable.startswith("IREE_TUNER_") and variable.endswith("_RUN")


def _reaper_environment() -> dict[str, str]:
    """The reaper's environment: this process's without any run's mark. A reaper started by a
    process that carries another run's mark (a Ray worker's, for its tools) would be killed by
    that run's reaper before it had done its work."""
    return {k: v for k, v in os.environ.items() if not _is_mark(k)}


@dataclass
class Reaper:
    """One run's mark (`variable`=`token`) and the reaper process that acts on it."""

    variable: str
    token: str
    process: Optional[subprocess.Popen]

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def temp_dir(self, kind: str) -> Path:
        """A new directory in the system's temporary directory that the reaper removes when the run
        ends (named iree-tuner-KIND-TOKEN-...), and so does the reaper of any run that encloses
        this process (its mark's token is in the name too): Ray kills a worker's children when
        the worker exits, the reaper of the worker's tools with them."""
        enclosing = "".join(f"{os.environ[v]}-" for v in sorted(os.environ) if _is_mark(v) and v != self.variable)
        return Path(tempfile.mkdtemp(prefix=f"iree-tuner-{kind}-{self.token}-{enclosing}"))

    def note(self, pid: int) -> None:
        """Tell the reaper of a process of the run's own (a raylet): a process started during the
        run that names it in one of the reaper's `naming` variables is reaped with the run, though
        it shows no mark and its parent has died (Ray's agents, when the raylet dies with the run
        before the reaper has seen it)."""
        try:
            if self.process is not None and self.process.stdin is not None:
                self.process.stdin.write(f"{pid}\n".encode())
                self.process.stdin.flush()
        except (OSError, ValueError):
            pass

    def reap_now(self, timeout_s: float = 10.0) -> None:
        """Have the reaper act now (the run's own part is over: a cluster shut down), and wait until
        it has killed what carries the mark and removed the directories (it sweeps a few seconds
        more on its own)."""
        process, self.process = self.process, None
        if process is None:
            return
        try:
            process.stdin.close()
            if not select.select([process.stdout], [], [], timeout_s)[0]:
                process.kill()
        except (OSError, ValueError):
            process.kill()


def start_reaper(variable: str, naming: tuple[str, ...] = (), poll_s: Optional[float] = None) -> Reaper:
    """`variable` is the mark's name, IREE_TUNER_..._RUN. A new token for `variable` and a reaper for what will carry it (none off Linux: a Reaper
    whose process is None still names temporary directories, which the run removes itself).
    `naming`: variables whose value is a process's id; a process started during the run whose
    variable names a process that carried the mark is reaped too (Ray's agents name their
    raylet in RAY_RAYLET_PID, and show no mark of their own once renamed). `poll_s`: how often
    the reaper notes what carries the mark while the run lives (None: only when it ends)."""
    if not _is_mark(variable):
        raise ValueError(f"a run's mark is named IREE_TUNER_..._RUN, not {variable}")
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    process = None
    if sys.platform.startswith("linux"):
        process = subprocess.Popen([sys.executable, "-S", "-c", _REAPER, f"{variable}={token}", tempfile.gettempdir(),
                                    ",".join(naming), "" if poll_s is None else str(poll_s)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   start_new_session=True, env=_reaper_environment())
    return Reaper(variable, token, process)
