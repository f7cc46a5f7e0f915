"""Benchmark workers: one thread per device, all taking work from one queue. Every measurement
runs in tool processes of its own (iree-run-module, iree-benchmark-module, with timeouts), so a
crash or a hang there becomes a result, never the end of the run. Runtime-only."""

from __future__ import annotations

import queue
import threading
from dataclasses import replace
from typing import Optional, Sequence, cast

from tuner.errors import InputError, ToolError
from tuner.core.settings import RunOptions
from tuner.evaluation.device_identity import host_devices
from tuner.evaluation.measure import Built, DeviceLost, Measurer, Recorder
from tuner.core.results import Result, Status
from tuner.tools import ToolsStopped

MEASURED = "measured"
LOST = "lost"  # a device went away; what it held was queued again for the others


def distinct_devices(devices: Sequence[str], default: str) -> tuple[str, ...]:
    """The devices to time on (`default` when none are named); each may appear once."""
    devices = tuple(devices) or (default,)
    if len(set(devices)) != len(devices):
        raise InputError(f"devices must be distinct: {', '.join(devices)}")
    return devices


def on_every_gpu(run: RunOptions, device: str) -> RunOptions:
    """The run timing on every GPU of this host (issue 62: a host of several GPUs timed on one)
    where no device is named or the one named is a GPU driver without an index (`--device
    cuda`, as the README and the issue's users type it: every GPU the runtime finds here, each
    `cuda://N`; `cuda://1` names that one alone), and the run times here: not with compile_only
    (the device is another machine) nor on a Ray cluster (whose workers hold their own devices).
    On 2026-11-30 the H200 x4 runs named `--device cuda` and timed on one GPU of four."""
    if len(run.devices) > 1 or run.compile_only or run.strategy == "ray":
        return run
    every = host_devices(run.devices[0] if run.devices else device)
    return replace(run, devices=every) if len(every) > 1 else run


def distinct_gpus(devices: Sequence[str]) -> list[str]:
    """Each GPU among `devices` once, in order; a local driver's devices left out (they are the
    host's cores, which timings side by side would share)."""
    return [d for d in dict.fromkeys(devices) if not d.startswith("local")]


class DevicePool:
    """Measures submitted candidates on any free device and puts `(MEASURED, result)` on
    `events`. The baseline is measured before anything else starts, because every other output
    is checked against its; candidates submitted earlier wait for it. A device that is lost
    (DeviceLost) puts back what it was measuring for another and stops; `(LOST, device)` says so."""

    def __init__(self, devices: Sequence[str], measurer: Measurer, events: "queue.Queue[tuple[str, object]]") -> None:
        if not devices:
            raise ValueError("a device pool needs at least one device")
        self.devices = tuple(devices)
        self._measurer = measurer
        self._events = events
        self._work: "queue.Queue[Optional[Built]]" = queue.Queue()
        self._lock = threading.Lock()
        self._held: list[Built] = []
        self._baseline_done = False
        self.alive = set(self.devices)
        self._threads = [threading.Thread(target=self._worker, args=(d,), name=f"bench-{i}-{d}", daemon=True)
                         for i, d in enumerate(self.devices)]
        for t in self._threads:
            t.start()

    def submit(self, b: Built) -> None:
        with self._lock:
            if b.result.is_baseline or self._baseline_done:
                self._work.put(b)
            else:
                self._held.append(b)

    def _release(self) -> None:
        with self._lock:
            self._baseline_done = True
            held, self._held = self._held, []
        for b in held:
            self._work.put(b)

    def _worker(self, device: str) -> None:
        while True:
            b = self._work.get()
            if b is None:
                return
            try:
                result = self._measurer.measure(b, device)
            except DeviceLost as e:
                with self._lock:
                    self.alive.discard(device)
                self._work.put(b)  # another device measures it
                self._events.put((LOST, str(e)))
                return
            except ToolsStopped:  # the run was interrupted: nothing more is measured
                return
            except Exception as e:  # a bug here must not hang the run waiting for this result
                result = replace(b.result, status=Status.RUN_FAILED, device=device,
                                 error=f"benchmark worker error: {type(e).__name__}: {e}")
            if b.result.is_baseline:
                self._release()
            self._events.put((MEASURED, result))

    def lost(self, why: str) -> None:
        """Called where a LOST event arrives: the run goes on while any device is left."""
        with self._lock:
            left = len(self.alive)
        if not left:
            raise ToolError(f"every benchmark device was lost; the last: {why}", [], "")

    def close(self) -> None:
        """Stop the workers once they are idle; anything not yet measured is dropped."""
        with self._lock:
            self._held = []
        while True:
            try:
                self._work.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._work.put(None)


def measure_built(built: Sequence[Built], devices: Sequence[str], measurer: Measurer, recorder: Recorder) -> None:
    """Measure every built candidate on the devices, baseline first, recording each result as it
    arrives (in this thread); those that did not build are recorded as they are."""
    events: "queue.Queue[tuple[str, object]]" = queue.Queue()
    pool = DevicePool(devices, measurer, events)
    try:
        waiting = 0
        for b in sorted(built, key=lambda b: (not b.result.is_baseline, b.result.candidate_id)):
            if b.result.ok:
                pool.submit(b)
                waiting += 1
            else:
                recorder.add(b.result)
        while waiting:
            kind, payload = events.get()
            if kind == LOST:
                pool.lost(cast(str, payload))
                continue
            recorder.add(cast(Result, payload))
            waiting -= 1
    finally:
        pool.close()
