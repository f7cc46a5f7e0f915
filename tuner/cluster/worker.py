"""The benchmark worker: a Ray actor owning one device, which runs the modules it is sent with
IREE's runtime tools. Runtime-only (no compiler, no z3), like tuner.evaluation.runtime_tools.

Files (modules, inputs) arrive as `FileRef`s: a name and the object holding the bytes, fetched
from Ray's object store the first time the worker needs them and kept in its own temporary
directory. On a CPU device the worker pins itself, and the runtime's task system, to the node's
last `cores` CPUs; compile tasks on that node keep off them (`compile_cores`)."""

from __future__ import annotations

import os
import shutil
import socket
from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np

from tuner.evaluation.device_identity import device_identity, timing_identity
from tuner.core.running import DispatchBenchmark, ModuleRun, Timing
from tuner.cluster.reaper import temp_dir
from tuner.evaluation.runtime_tools import benchmark, read_output, run_once
from tuner.tools import ToolRun

# (name, [object ref]): the ref is boxed in a list so that Ray hands it over unresolved, and the
# worker fetches the bytes only if it does not hold the file yet.
FileRef = tuple[str, list]


def benchmark_cores(cores: int) -> tuple[int, ...]:
    """The CPUs a CPU benchmark worker times on: the node's last `cores` (0: half of them, at
    least one)."""
    total = os.cpu_count() or 1
    count = min(total, cores if cores > 0 else max(1, total // 2))
    return tuple(range(total - count, total))


def compile_cores(cores: int) -> tuple[int, ...]:
    """The CPUs compiles use on a node whose benchmark worker holds `benchmark_cores(cores)`:
    the others, or all of them where none would be left."""
    taken = set(benchmark_cores(cores))
    rest = tuple(c for c in range(os.cpu_count() or 1) if c not in taken)
    return rest or tuple(range(os.cpu_count() or 1))


class BenchmarkWorker:
    """One device of the cluster. `device` is the runtime device on the worker's node ("cuda":
    the GPU Ray gave this actor; "local-task": the node's CPU, on `cores` pinned CPUs)."""

    def __init__(self, device: str, cores: int = 0) -> None:
        self.device = device
        self.cores = benchmark_cores(cores) if device.startswith("local") else ()
        if self.cores:
            os.sched_setaffinity(0, self.cores)  # the tools it starts inherit it
        self.flags = (f"--task_topology_cpu_ids={','.join(map(str, self.cores))}",) \
            if self.cores and device.startswith("local-task") else ()
        self.root = temp_dir("worker")
        self.files: dict[str, Path] = {}

    def describe(self) -> dict:
        """Who this worker is: the device identity (compared across workers), host and process."""
        return {"identity": device_identity(self.device), "host": socket.gethostname(), "pid": os.getpid(),
                "device": self.device, "cores": list(self.cores)}

    def timing_identity(self, dispatch_only: bool, batch: int) -> str:
        return timing_identity(self.device, dispatch_only, batch, self.cores)

    def benchmark(self, module: Optional[FileRef], dispatch: Optional[tuple[FileRef, str, int]],
                  settings: ModuleRun, inputs: list[FileRef]) -> tuple[Optional[Timing], ToolRun]:
        local = self._settings(settings, inputs)
        bench = DispatchBenchmark(self._file(dispatch[0]), dispatch[1], dispatch[2]) if dispatch else None
        return benchmark(self._file(module) if module else Path(), local, bench)

    def output(self, module: FileRef, settings: ModuleRun, inputs: list[FileRef]
               ) -> tuple[ToolRun, Optional[np.ndarray]]:
        local = self._settings(settings, inputs)
        path = self._file(module)
        out = path.parent / "output.npy"
        run = run_once(path, local, out)
        return run, (read_output(out, local) if run.ok else None)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    def _settings(self, settings: ModuleRun, inputs: list[FileRef]) -> ModuleRun:
        return replace(settings, device=self.device, inputs=tuple(self._file(f) for f in inputs),
                       runtime_flags=(*settings.runtime_flags, *self.flags))

    def _file(self, ref: FileRef) -> Path:
        name, (obj,) = ref
        if name not in self.files:
            import ray

            path = self.root / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(ray.get(obj))
            self.files[name] = path
        return self.files[name]
