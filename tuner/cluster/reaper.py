"""What is left of a local Ray cluster after the run that started it, however the run ended.

Ray ties its head processes (GCS, raylet, monitors) to the driver that started them, so they die
with it even under SIGKILL; the raylet's agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`)
are not tied to anything: after `kill -9` of a tune run they stayed up to a minute, their parent
gone, trying to report the raylet's death to a GCS that was gone too.

Before the run starts its cluster it marks its environment with a token of its own
(`IREE_TUNER_RAY_RUN`), which every process of the cluster inherits (the raylet, its agents, the
workers and the tools they start), and starts a reaper: a process holding the read end of a pipe
whose write end only the run holds. When the run ends (its exit, a signal, SIGKILL: also in the
middle of `ray.init`) the pipe closes, and the reaper kills every process still carrying the
token, then exits. It lives in a session of its own, so a Ctrl-C to the run's terminal does not
end it first."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from typing import Optional

MARK_ENV = "IREE_TUNER_RAY_RUN"

# The reaper's program (Linux's /proc; elsewhere it finds nothing to kill).
_REAPER = """
import os, signal, sys
mark = sys.argv[1].encode()
sys.stdin.buffer.read()  # returns when the run that started this has ended
for pid in os.listdir("/proc") if os.path.isdir("/proc") else ():
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            if mark in f.read().split(b"\\0"):
                os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
"""

_reaper: Optional[subprocess.Popen] = None


def reap_after_exit() -> None:
    """Mark this process's environment and start the reaper for what inherits the mark (once
    per process): call it before starting the cluster."""
    global _reaper
    if _reaper is not None and _reaper.poll() is None:
        return
    token = os.environ[MARK_ENV] = f"{os.getpid()}-{secrets.token_hex(8)}"  # this run's, not a parent run's
    _reaper = subprocess.Popen([sys.executable, "-c", _REAPER, f"{MARK_ENV}={token}"], stdin=subprocess.PIPE,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def reap_now(timeout_s: float = 10.0) -> None:
    """After the cluster is shut down: have the reaper kill what is left, and wait for it."""
    global _reaper
    reaper, _reaper = _reaper, None
    if reaper is None:
        return
    try:
        reaper.stdin.close()
        reaper.wait(timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired):
        reaper.kill()
