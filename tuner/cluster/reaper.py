"""What is left of a local Ray cluster after the run that started it, however the run ended.

Ray ties its head processes (GCS, raylet, monitors) to the driver that started them, so they die
with it even under SIGKILL; the raylet's agents (`ray::DashboardAgent`, `ray::RuntimeEnvAgent`)
are not tied to anything: after `kill -9` of a tune run they stayed up to a minute, their parent
gone, trying to report the raylet's death to a GCS that was gone too. The workers' directories
(`temp_dir`: the program and weights a compile task writes, a benchmark worker's files) stayed in
/tmp after every run, successful ones too.

Before the run starts its cluster it marks its environment with a token of its own
(`IREE_TUNER_RAY_RUN`), which every process of the cluster inherits (the raylet, its agents, the
workers and the tools they start), and starts a reaper (tuner.core.reaper): when the run ends, or
its cluster is shut down (`reap_now`), every process still carrying the token is killed and the
temporary directories named after it are removed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

from tuner.core.reaper import Reaper, start_reaper

MARK_ENV = "IREE_TUNER_RAY_RUN"

_reaper: Optional[Reaper] = None


def reap_after_exit() -> None:
    """Mark this process's environment and start the reaper for what inherits the mark (once
    per process): call it before starting the cluster."""
    global _reaper
    if _reaper is not None and _reaper.alive:
        return
    _reaper = start_reaper(MARK_ENV, naming=("RAY_RAYLET_PID",), poll_s=0.25)
    os.environ[MARK_ENV] = _reaper.token  # this run's, not a parent run's


def note_head(ray) -> None:
    """Tell the reaper the local cluster's raylet (Ray's agents name it in RAY_RAYLET_PID): read
    from Ray's own node record, where this Ray keeps one (nothing is noted where it does not)."""
    try:
        pids = [p.process.pid for p in ray._private.worker._global_node.all_processes.get("raylet", [])]
    except AttributeError:
        return
    for pid in pids:
        if _reaper is not None:
            _reaper.note(pid)


def reap_now(timeout_s: float = 10.0) -> None:
    """After the cluster is shut down: have the reaper kill what is left, and wait for it."""
    global _reaper
    reaper, _reaper = _reaper, None
    if reaper is not None:
        reaper.reap_now(timeout_s)


def temp_dir(kind: str) -> Path:
    """A directory of a worker's own in the node's temporary directory: named after the run's
    token where the worker carries one (a local cluster's reaper removes it), else a plain one
    (a node of a cluster the run joined; the worker removes what it can)."""
    token = os.environ.get(MARK_ENV)
    return Path(tempfile.mkdtemp(prefix=f"iree-tuner-{kind}-{token}-" if token else f"iree-tuner-{kind}-"))
