"""A GPU's in-process timings in a process of its own, one a device, where a run times on several
GPUs of the host at once (issue 62).

Why a process and not a thread: CUPTI hands its records to a Python callback, which takes the
GIL, while it holds a lock of its own, and IREE's runtime holds the GIL while it loads a module,
in which the driver, under CUPTI, takes that lock. Two devices' threads in one process deadlock:
on the H200 x2 (2026-11-30) the flush closing device 0's trace waited for the GIL while device 1's
module load held it, and a Llama layer's flag stage hung until it was killed. In a process of its
own each device has one thread that touches CUDA, its own GIL and its own CUPTI.

A request is a picklable callable (tuner.evaluation.in_model's KernelCalls, ModelCalls); the
process runs it and sends back its result, or its exception to be raised here. A process that ends
(a device fault, a crash) is an error for the request it held (RuntimeError, which a timing takes
for a failed run) and the next request starts a new one. The process goes when this one does:
its requests come through a pipe whose end it reads (EOF: it exits), and the kernel ends it too
(PR_SET_PDEATHSIG) should this process be killed while it waits on a stuck call.

Runtime-only (the standard library here; the process imports what its requests need)."""

from __future__ import annotations

import atexit
import collections
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Callable, Optional, TypeVar

T = TypeVar("T")
STOP_WAIT_S = 5.0  # at exit, how long a process may take to finish its call before it is killed
_TAIL_LINES = 20  # of its stderr, kept for the message when it ends


class WorkerProcess:
    """The process that runs one device's requests, in turn. Started at the first request."""

    def __init__(self, device: str) -> None:
        self.device = device
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._send = self._receive = None
        self._tail: "collections.deque[str]" = collections.deque(maxlen=_TAIL_LINES)

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> None:
        self._close_pipes()  # an ended process's
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        root = str(Path(__file__).resolve().parents[2])  # where `tuner` is importable from
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tuner.evaluation.device_worker", str(to_child), str(from_child)],
            pass_fds=(to_child, from_child), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, text=True, errors="replace", env=env)
        os.close(to_child)
        os.close(from_child)
        self._send, self._receive = os.fdopen(from_parent, "wb"), os.fdopen(to_parent, "rb")
        self._tail.clear()
        threading.Thread(target=self._keep_tail, args=(self._proc,), daemon=True,
                         name=f"worker-stderr-{self.device}").start()

    def _keep_tail(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self._tail.append(line.rstrip())

    def run(self, request: Callable[[], T]) -> T:
        """`request()` run in the device's process: its result, or its exception raised here."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            try:
                pickle.dump(request, self._send)
                self._send.flush()
                ok, value = pickle.load(self._receive)
            except (EOFError, OSError, pickle.UnpicklingError):
                raise RuntimeError(self._ended()) from None
        if not ok:
            raise value
        return value

    def _ended(self) -> str:
        """Why the process gave no answer (it is left for the next request to replace)."""
        code = _wait_or_kill(self._proc)
        last = " | ".join(line for line in list(self._tail)[-3:] if line)
        return f"the timing process of {self.device} ended (exit code {code})" + (f": {last}" if last else "")

    def _close_pipes(self) -> None:
        for end in (self._send, self._receive):
            try:
                if end is not None:
                    end.close()
            except OSError:
                pass
        self._send = self._receive = None

    def stop(self) -> None:
        """End the process: its pipe closed (it exits after the call it is in), killed past STOP_WAIT_S."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._close_pipes()
        _wait_or_kill(proc)


def _wait_or_kill(proc: subprocess.Popen) -> int:
    """The process's exit code, once it has ended: killed past STOP_WAIT_S."""
    try:
        return proc.wait(STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


_WORKERS: dict[str, WorkerProcess] = {}
_WORKERS_LOCK = threading.Lock()


def worker(device: str) -> WorkerProcess:
    """The one process of `device`'s requests in this run."""
    with _WORKERS_LOCK:
        if device not in _WORKERS:
            _WORKERS[device] = WorkerProcess(device)
        return _WORKERS[device]


@atexit.register
def stop_all() -> None:
    with _WORKERS_LOCK:
        workers = list(_WORKERS.values())
        _WORKERS.clear()
    for w in workers:
        w.stop()


def _die_with_parent() -> None:
    """Linux: the kernel kills this process when its parent goes (a parent killed while this one
    waits on a stuck call would otherwise leave it holding the GPU)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def serve(read_fd: int, write_fd: int) -> None:
    """The process's loop: each request run in turn and answered, until the pipe closes. Ctrl-C
    reaches the whole process group: the run decides, and this process ends when it closes the pipe."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _die_with_parent()
    with os.fdopen(read_fd, "rb") as requests, os.fdopen(write_fd, "wb") as answers:
        while True:
            try:
                request = pickle.load(requests)
            except EOFError:
                return
            try:
                answer = (True, request())
            except Exception as e:  # the parent's to raise
                answer = (False, e)
            try:
                data = pickle.dumps(answer)
            except Exception as e:  # an answer that does not pickle: its words
                ok, value = answer
                why = f"an answer that does not pickle: {e}" if ok else f"{type(value).__name__}: {value}"
                data = pickle.dumps((False, RuntimeError(why)))
            answers.write(data)
            answers.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
