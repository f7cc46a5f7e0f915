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
a marked one, and sweeps again for a few seconds (an agent the raylet was starting as the run
ended appears after the first sweep)."""

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
import glob, os, shutil, signal, sys, time
mark, temp = sys.argv[1].encode(), sys.argv[2]
sys.stdin.buffer.read()  # returns when the run that started this has ended

def sweep():
    # Each process that carries the mark, and each one below such a process: a process that
    # renames itself (setproctitle: Ray's agents) can overwrite its environment's memory, from
    # which /proc reads it, and then shows no mark of its own
    parent, marked = {}, set()
    for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\\0"):
                    marked.add(int(pid))
        except (OSError, ValueError, IndexError):
            pass
    for pid in parent:
        above, steps = pid, 0
        while above in parent and above not in marked and steps < 64:
            above, steps = parent[above], steps + 1
        if above in marked:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

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


def start_reaper(variable: str) -> Reaper:
    """`variable` is the mark's name, IREE_TUNER_..._RUN. A new token for `variable` and a reaper for what will carry it (none off Linux: a Reaper
    whose process is None still names temporary directories, which the run removes itself)."""
    if not _is_mark(variable):
        raise ValueError(f"a run's mark is named IREE_TUNER_..._RUN, not {variable}")
    token = f"{os.getpid()}-{secrets.token_hex(8)}"
    process = None
    if sys.platform.startswith("linux"):
        process = subprocess.Popen([sys.executable, "-S", "-c", _REAPER, f"{variable}={token}", tempfile.gettempdir()],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                   start_new_session=True, env=_reaper_environment())
    return Reaper(variable, token, process)
