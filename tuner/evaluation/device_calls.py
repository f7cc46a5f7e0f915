"""Where a device's in-process calls run: on the one thread of this process that uses the device
(`on_device_thread`), or, while a run times on several GPUs at once (`timing_apart`), in the
device's own process (tuner.evaluation.device_worker says why). `on_device` picks.

Runtime-only (the standard library)."""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Callable, Iterator, Optional, Sequence, TypeVar

from tuner.evaluation import device_worker

T = TypeVar("T")


class DeviceThread:
    """The one thread that runs every call on one device, a daemon: a call stuck in the device (a
    kernel that never returns) must not keep a stopped run from exiting. A ThreadPoolExecutor's
    workers are joined when the interpreter exits: SIGTERM was handled at once, and the process
    stayed until the call returned (an H100 run's `timeout -s TERM` did not end it)."""

    def __init__(self, name: str) -> None:
        self._queue: "queue.SimpleQueue[Optional[tuple[Callable[[], object], Future]]]" = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            work, future = item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(work())
                except BaseException as e:  # the caller's to raise
                    future.set_exception(e)

    def submit(self, work: Callable[[], T]) -> "Future[T]":
        future: Future = Future()
        self._queue.put((work, future))
        return future

    def stop(self, wait_s: float) -> bool:
        """Ask the thread to end after the calls queued, and wait up to `wait_s`: whether it ended."""
        self._queue.put(None)
        self._thread.join(wait_s)
        return not self._thread.is_alive()


_THREADS: dict[str, DeviceThread] = {}
_THREADS_LOCK = threading.Lock()
RELEASE_WAIT_S = 5.0  # at exit, how long a device thread may take to finish its call


def on_device_thread(device: str, work: Callable[[], T]) -> T:
    """`work()` run on the one thread that uses `device` in this process: IREE's CUDA HAL makes
    its context current on the thread that created the device, and a module loaded from another
    thread fails (CUDA_ERROR_INVALID_CONTEXT). The wait is the caller's: a signal ends it."""
    with _THREADS_LOCK:
        if device not in _THREADS:
            _THREADS[device] = DeviceThread(f"device-{device}")
        thread = _THREADS[device]
    return thread.submit(work).result()


def stop_threads() -> bool:
    """Ask every device thread to stop after its calls queued, and wait up to RELEASE_WAIT_S for
    each (all asked, not a short-cut `all`): whether every one ended (at exit, before the devices
    they used are dropped)."""
    with _THREADS_LOCK:
        threads = list(_THREADS.values())
        _THREADS.clear()
    return all([t.stop(RELEASE_WAIT_S) for t in threads])


# Whether each CUDA device's requests run in a process of its own (tuner.evaluation.device_worker),
# while a run that times on several GPUs at once is in `timing_apart`.
_APART = False


@contextmanager
def timing_apart(devices: Sequence[str]) -> Iterator[bool]:
    """While open, and where `devices` hold more than one CUDA device, each device's requests go
    to a process of its own (device_worker says why: two devices' threads in one process
    deadlock in CUPTI), ended on leaving; else they run on a thread of this process, as for one
    GPU. Yields whether they are apart."""
    global _APART
    before = _APART
    _APART = len({d for d in devices if d.startswith("cuda")}) > 1
    try:
        yield _APART
    finally:
        if _APART and not before:
            device_worker.stop_all()
        _APART = before


def on_device(device: str, request: Callable[[], T]) -> T:
    """`request()` run where `device`'s calls run: its process where devices are timed apart,
    else its thread here (`on_device_thread`)."""
    if _APART and device.startswith("cuda"):
        return device_worker.worker(device).run(request)
    return on_device_thread(device, request)
