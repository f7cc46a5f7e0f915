"""The driver's side of the cluster's benchmark workers: starting one per device (refusing a mix
of devices), and `RayRunner`, through which the driver's Measurer has them run modules.
Runtime-only (no compiler, no z3), so `benchmark DIR --strategy ray` runs where only
iree-base-runtime is installed."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from tuner.cluster.connect import before_shutdown, connect
from tuner.cluster.worker import BenchmarkWorker, FileRef
from tuner.errors import InputError
from tuner.core.built import Built
from tuner.core.running import ModuleRun, Timing
from tuner.evaluation.measure import DeviceLost
from tuner.tools import ToolRun

# Workers started in this process, by (device, cores): every evaluator of the run shares them
# (tune-model evaluates many dispatches), and they go when the cluster connection does.
_workers: dict[tuple[str, int], "RayRunner"] = {}
_workers_lock = threading.Lock()


class RayRunner:
    """The Measurer's way to the cluster's benchmark workers (tuner.evaluation.measure.ModuleRunner). A
    device is a worker's label; a module or input file is sent to a worker once, from the object
    store (where a compile task left it, or where this driver put a file it holds)."""

    local = False  # the workers' devices, wherever they are: never timed in the driver's model

    def __init__(self, ray, workers: dict[str, object], described: dict[str, dict]) -> None:
        self.ray = ray
        self.workers = workers
        self.described = described
        self.devices = tuple(workers)
        self._registered: dict[str, FileRef] = {}  # by path: builds the cluster made
        self._files: dict[tuple, FileRef] = {}  # by (path, mtime, size): files this driver put
        self._timing_ids: dict[tuple, str] = {}
        self._lock = threading.Lock()
        self.dead: set[str] = set()  # workers lost in this process: the next evaluation starts afresh

    def register(self, path: Path, ref) -> None:
        """`path` (where the driver would keep the file) stands for the object `ref`."""
        with self._lock:
            self._registered[str(path)] = self._named(path, ref)

    def file(self, path: Path) -> FileRef:
        """The file at `path` as a FileRef: read and put in the object store once for as long as
        the file is unchanged (a later round may rebuild candidates/NNNN/ in place); where no such
        file is here, the build registered for it (a cluster build has no local copy)."""
        with self._lock:
            if not Path(path).exists() and str(path) in self._registered:
                return self._registered[str(path)]
            stat = Path(path).stat()
            key = (str(path), stat.st_mtime_ns, stat.st_size)
            if key not in self._files:
                self._files[key] = self._named(path, self.ray.put(Path(path).read_bytes()))
            return self._files[key]

    @staticmethod
    def _named(path: Path, ref) -> FileRef:
        # Unique per object (the whole id: objects one task or driver makes share its prefix);
        # ends like the driver's path (candidates/NNNN/candidate.vmfb), as a worker's tools see it.
        return f"{ref.hex()}/{Path(path).parent.name}/{Path(path).name}", [ref]

    def identity(self, device: str) -> str:
        return self.described[device]["identity"]

    def timing_identity(self, device: str, dispatch_only: bool, batch: int) -> str:
        key = (device, dispatch_only, batch)
        if key not in self._timing_ids:
            self._timing_ids[key] = self._call(device, "timing_identity", dispatch_only, batch)
        return self._timing_ids[key]

    def benchmark(self, b: Built, settings: ModuleRun) -> tuple[Optional[Timing], ToolRun]:
        bench = b.dispatch_benchmark
        dispatch = (self.file(bench.vmfb), bench.function, bench.batch) if bench else None
        module = None if bench else self.file(b.vmfb)
        return self._call(settings.device, "benchmark", module, dispatch, settings, self._inputs(settings),
                          timeout=settings.timeout_s)

    def output(self, b: Built, settings: ModuleRun) -> tuple[ToolRun, Optional[np.ndarray]]:
        return self._call(settings.device, "output", self.file(b.vmfb), settings, self._inputs(settings),
                          timeout=settings.timeout_s)

    def _inputs(self, settings: ModuleRun) -> list[FileRef]:
        return [self.file(p) for p in settings.inputs]

    def _call(self, device: str, method: str, *args, timeout: float = 60.0):
        """Call a worker and wait; a worker that died or stopped answering is a lost device (its
        tools time out on their own well before the wait does)."""
        ray = self.ray
        worker = self.workers[device]
        try:
            return ray.get(getattr(worker, method).remote(*args), timeout=2 * timeout + 60)
        except ray.exceptions.GetTimeoutError:
            ray.kill(worker)
            self.dead.add(device)
            raise DeviceLost(device, f"benchmark worker did not answer in {2 * timeout + 60:.0f} s") from None
        except ray.exceptions.RayActorError as e:
            self.dead.add(device)
            raise DeviceLost(device, f"benchmark worker died: {str(e).splitlines()[0]}") from None

    def close(self) -> None:
        for worker in self.workers.values():
            try:
                self.ray.kill(worker)
            except Exception:  # already gone
                pass


def cluster_runner(ray, device: str, cores: int) -> RayRunner:
    """This process's benchmark workers for `device`, started at the first call (and again once
    one of them was lost): one per GPU of the cluster, or on a CPU device one per node, pinned to
    `cores` CPUs (see tuner.cluster.worker). Workers on devices of different names are refused."""
    with _workers_lock:
        runner = _workers.get((device, cores))
        if runner is not None and not runner.dead:
            return runner
        if runner is not None:
            runner.close()
        runner = _start_workers(ray, device, cores)
        _workers[(device, cores)] = runner
        return runner


def cluster_devices(settings, device: str, devices: Sequence[str] = ()) -> RayRunner:
    """The cluster's benchmark workers for `device`, connected to as `settings` say
    (`ray_address`, `compile_workers` for a local cluster, `benchmark_cores`); named devices
    (--device) do not go with them."""
    if devices:
        raise InputError("--device does not go with --strategy ray: the cluster's benchmark workers are the devices")
    return cluster_runner(connect(settings.ray_address, settings.compile_workers), device, settings.benchmark_cores)


def forget_workers() -> None:
    """Stop every benchmark worker this process started (the connection is about to go)."""
    with _workers_lock:
        for runner in _workers.values():
            runner.close()
        _workers.clear()


before_shutdown(forget_workers)


def _start_workers(ray, device: str, cores: int) -> RayRunner:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(BenchmarkWorker)
    if device.startswith("local"):
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        handles = [remote.options(num_cpus=0, max_restarts=0,
                                  scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                   .remote(device, cores) for n in nodes]
    else:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        if gpus < 1:
            raise InputError(f"--strategy ray on {device}: the Ray cluster has no GPU")
        handles = [remote.options(num_cpus=0, num_gpus=1, max_restarts=0).remote(device) for _ in range(gpus)]
    try:
        described = ray.get([h.describe.remote() for h in handles], timeout=300)
    except ray.exceptions.GetTimeoutError:
        for h in handles:
            ray.kill(h)
        raise InputError(f"the Ray cluster did not start its {len(handles)} benchmark workers in 300 s") from None
    try:
        refuse_mixed(described)
    except InputError:
        for h in handles:
            ray.kill(h)
        raise
    labels = [f"{d['device']}@{d['host']}/{i}" for i, d in enumerate(described)]
    return RayRunner(ray, dict(zip(labels, handles)), dict(zip(labels, described)))


def refuse_mixed(described: list[dict]) -> None:
    """Timings from workers on devices of different names are never compared: one error line."""
    identities = sorted({d["identity"] for d in described})
    if len(identities) > 1:
        raise InputError(f"the Ray cluster's benchmark workers are on different devices ({'; '.join(identities)}); "
                         f"their timings cannot be compared: use a cluster of one kind of device")
