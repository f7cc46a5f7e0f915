"""Timing dispatches inside the model's own call: a compiled module is loaded into this process
(with several GPUs at once, the device's own: tuner.evaluation.device_calls) by the IREE
runtime, its entry called on its inputs (uploaded to the device once), and CUPTI's kernel
records of those calls say what each dispatch's kernels cost per call (GPUs; CUDA here).
A candidate's time is then its kernels' time in the whole-model module it was compiled into:
fusion, caches and neighbours included, and no dumped dispatch benchmark to build or trust.

Runtime-only (numpy, IREE's runtime, ctypes): the benchmark side may import it."""

from __future__ import annotations

import atexit
import math
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from tuner.errors import TargetError
from tuner.evaluation import cupti
from tuner.evaluation.device_calls import on_device, stop_threads
from tuner.evaluation.kernel_times import KernelTime, per_call, repetition_times
from tuner.evaluation.measure import Built, LocalRunner
from tuner.evaluation.runtime_tools import ModuleRun, Timing, benchmark
from tuner.discovery.raw_types import RAW_TYPES
from tuner.tools import ToolRun

# How GPU dispatches are timed (EvalSettings.gpu_timing): "auto" inside the model where CUPTI
# loads, else alone; "model" inside the model or an error; "alone" IREE's dumped dispatch benchmarks.
GPU_TIMINGS = ("auto", "model", "alone")
METHOD = "each dispatch's kernels inside the model's own call (CUPTI kernel records)"


def times_in_model(gpu_timing: str, device: str, dispatch_benchmark: bool = False) -> bool:
    """Whether dispatches on `device` are timed inside the model (the target's device, for a
    program that is a model rather than an IREE dispatch benchmark). TargetError where "model"
    is asked for and CUPTI does not load."""
    if gpu_timing not in GPU_TIMINGS:
        raise TargetError(f"unknown GPU timing {gpu_timing!r}; known: {', '.join(GPU_TIMINGS)}")
    if gpu_timing == "alone" or dispatch_benchmark or not device.startswith("cuda"):
        return False
    why = why_not_in_model()
    if why and gpu_timing == "model":
        raise TargetError(f"--gpu-timing model: {why}")
    return why is None


def why_not_in_model() -> Optional[str]:
    """None where CUDA dispatches can be timed inside the model here, else why not."""
    return cupti.available() or cupti.no_cuda_device()


_DEVICES: dict[str, object] = {}
_DEVICES_LOCK = threading.Lock()
def _device(device: str):
    with _DEVICES_LOCK:
        if device not in _DEVICES:
            import iree.runtime as rt

            _DEVICES[device] = rt.get_device(device)  # as the runtime tools' --device names it
        return _DEVICES[device]


class NotInProcess(ValueError):
    """Inputs of a kind this process cannot read or upload (the runtime tools can)."""


def _read_input(path: Path):
    """An input file as the runtime tools read it (tuner.discovery.workload.write_inputs):
    `.npy`, raw bits `inputN.SHAPExTYPE.bin`, or a scalar `inputN.TYPE.scalar`."""
    if path.suffix == ".npy":
        return np.load(path)
    if path.suffix == ".scalar":
        text, kind = path.read_text().strip(), path.name.split(".")[1]
        return int(text) if kind.startswith("i") or kind == "index" else float(text)
    dims = path.name.split(".")[1].split("x")
    kind = dims[-1]
    if kind not in RAW_TYPES:
        raise NotInProcess(f"{path.name}: raw inputs of {kind} are not read in-process")
    return np.fromfile(path, dtype=RAW_TYPES[kind]).reshape([int(d) for d in dims[:-1]]), kind


class LoadedModule:
    """A compiled module loaded on a device with its parameters, its entry's inputs resident."""

    def __init__(self, vmfb: Path, settings: ModuleRun) -> None:
        import iree.runtime as rt

        device = _device(settings.device)
        self.config = rt.Config(device=device)
        instance = self.config.vm_instance
        modules = []
        for parameter in (f.split("=", 1)[1] for f in settings.runtime_flags if f.startswith("--parameters=")):
            scope, _, file = parameter.partition("=")  # as tuner.input.parameters writes it
            index = rt.ParameterIndex()
            index.load(file)
            modules.append(rt.create_io_parameters_module(instance, index.create_provider(scope=scope)))
        self.module = rt.VmModule.mmap(instance, str(Path(vmfb).resolve()))
        self.context = rt.SystemContext(vm_modules=[*modules, self.module], config=self.config)
        self.function = self.context.modules[self.module.name][settings.entry]
        self.ordinal = device_ordinal(settings.device)  # its kernels' records (None: any device's)
        self.args = [self._upload(_read_input(p), device) for p in settings.inputs]

    @staticmethod
    def _upload(value, device):
        import iree.runtime as rt

        if isinstance(value, tuple):  # raw bits of a type numpy lacks
            array, kind = value
            element = {"bf16": rt.HalElementType.BFLOAT_16}.get(kind)
            if element is None:
                raise NotInProcess(f"inputs of {kind} are not uploaded in-process")
            return device.allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT, device=device,
                buffer=np.ascontiguousarray(array), element_type=element)
        if isinstance(value, np.ndarray):
            return rt.asdevicearray(device, value)
        return value

    def call(self, read: bool = True):
        """One call of the entry. Its synchronous form returns once the device has finished (it
        waits on the call's fence); with `read`, one result is also copied to the host, which
        makes sure. A timed loop reads only after its last call: a copy of the result after
        every call (4 MB for a BERT layer's) would be timed with the kernels' wall time."""
        out = self.function(*self.args)
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        if read and hasattr(first, "to_host"):
            first.to_host()
        return out


@dataclass(frozen=True)
class KernelTiming:
    """Repetitions of several calls each: per repetition, each wanted dispatch's kernel time per
    call, and the wall time per call (host, calls back to back)."""

    per_repetition: tuple[dict[str, KernelTime], ...]
    wall_ms: tuple[float, ...]
    calls: int

    def times(self, wanted: Sequence[str]) -> tuple[float, ...]:
        return tuple(repetition_times(self.per_repetition, wanted))


def time_calls(module: LoadedModule, wanted: Sequence[str], repetitions: int, min_time_s: float,
               warmup: int = 2) -> KernelTiming:
    """Call the module's entry `warmup` times, then `repetitions` times as many calls as fill
    `min_time_s`, recording kernels: each wanted dispatch's time per call in each repetition."""
    traced, walls, calls = _traced_calls(module, repetitions, min_time_s, warmup)
    return KernelTiming(tuple(per_call(records, wanted, calls) for records in traced), tuple(walls), calls)


def _traced_calls(module: LoadedModule, repetitions: int, min_time_s: float,
                  warmup: int) -> tuple[list[list[cupti.KernelRecord]], list[float], int]:
    """The kernel records of each repetition's calls, its wall time per call, and the calls in one."""
    tracer = cupti.tracer()
    start = time.perf_counter()
    for _ in range(max(1, warmup)):
        module.call()
    one = (time.perf_counter() - start) / max(1, warmup)
    calls = max(1, min(1000, math.ceil(min_time_s / max(one, 1e-6))))
    traced, walls = [], []
    for _ in range(max(1, repetitions)):
        with tracer.trace(module.ordinal) as records:
            t0 = time.perf_counter()
            for i in range(calls):
                module.call(read=i == calls - 1)
            walls.append((time.perf_counter() - t0) * 1e3 / calls)
        traced.append(records)
    return traced, walls, calls


@dataclass(frozen=True)
class KernelCalls:
    """A request for a device: `time_calls` of the wanted kernels in `vmfb`'s entry (the module
    loaded once, MODULES). Picklable: it runs where its device's calls run (`on_device`)."""

    vmfb: Path
    settings: ModuleRun
    wanted: tuple[str, ...]
    repetitions: int
    min_time_s: float

    def __call__(self) -> KernelTiming:
        return time_calls(MODULES.get(self.vmfb, self.settings), self.wanted, self.repetitions, self.min_time_s)


@dataclass(frozen=True)
class ModelCalls:
    """A request for a device: every kernel of the module's own device per call of its entry, one
    figure per repetition (the trace holds that device's kernels alone: cupti.Tracer.trace)."""

    vmfb: Path
    settings: ModuleRun

    def __call__(self) -> tuple[float, ...]:
        traced, _, calls = _traced_calls(MODULES.get(self.vmfb, self.settings), self.settings.repetitions,
                                         KERNEL_MIN_TIME_S, 2)
        return tuple(sum(r.ms for r in records) / calls for records in traced)


# Models whose inputs (by their files) this process cannot upload: time_model hands each of their
# timings to iree-benchmark-module (wall time), from the first, so that no comparison mixes the two.
TOOL_TIMED: set[tuple[Path, ...]] = set()


def device_ordinal(device: str) -> Optional[int]:
    """The CUDA ordinal of a runtime device as the tuner names it (`cuda` 0, `cuda://1` 1; None
    where it is named otherwise, by a UUID say)."""
    _, _, rest = device.partition("://")
    return int(rest) if rest.isdigit() else 0 if not rest else None


def time_model(vmfb: Path, settings: ModuleRun) -> Optional[Timing]:
    """A whole-model build's kernel time per call, one figure per repetition: the module loaded
    into this process once (MODULES), its entry called on resident inputs, every kernel of the
    device's in those calls summed (CUPTI). A tuner.stages.model_timing.ModelBenchmark for GPUs:
    iree-benchmark-module is a process that loads the model for each timing (about 7 s a choice
    of 4 rounds in the H200's flag stages, 41-56 s of them a stage), and its wall time holds the
    call's fixed cost (0.3 ms on ConvNeXt-T's 0.93 ms of kernels), which no choice changes.
    None where it could not be had (the comparison then has no figure for it). Inputs this process
    cannot upload: iree-benchmark-module's wall time, for every build with them (TOOL_TIMED)."""
    if settings.inputs not in TOOL_TIMED:
        try:
            times = on_device(settings.device, ModelCalls(vmfb, settings))
            return Timing(times) if all(times) else None
        except NotInProcess:  # every build of the model has these inputs: all timed by the tool, alike
            TOOL_TIMED.add(settings.inputs)
        except RUN_ERRORS:
            return None
    return benchmark(vmfb, settings)[0]


class ModuleCache:
    """The last few loaded modules (loading a model uploads its weights: done once per module).
    Eight: the confirmation rounds rotate through the baseline and the 4 most promising
    candidates, which must all stay loaded. And no more than `keep_bytes` of modules and their
    parameter files together (the weights each holds on the device), the newest always: a
    whole-model comparison keeps the reference and its choices loaded (in_model.time_model),
    and eight copies of a 7B model's 14 GB would not fit an H200."""

    def __init__(self, keep: int = 8, keep_bytes: int = 32 << 30) -> None:
        self.keep, self.keep_bytes = keep, keep_bytes
        self._loaded: "OrderedDict[tuple, tuple[LoadedModule, int]]" = OrderedDict()  # with its bytes
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._loaded.clear()

    def get(self, vmfb: Path, settings: ModuleRun) -> LoadedModule:
        path = Path(vmfb).resolve()
        key = (str(path), path.stat().st_mtime_ns, settings.device, settings.entry, settings.inputs,
               settings.runtime_flags)
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key][0]
        size = _weight_bytes(path, settings)
        with self._lock:  # room first: the evicted modules' device memory goes before the upload
            while self._loaded and (len(self._loaded) >= self.keep
                                    or sum(b for _, b in self._loaded.values()) + size > self.keep_bytes):
                self._loaded.popitem(last=False)
        loaded = LoadedModule(path, settings)
        with self._lock:
            self._loaded[key] = (loaded, size)
        return loaded


def _weight_bytes(vmfb: Path, settings: ModuleRun) -> int:
    """A module's file and its parameter files' sizes: about what loading it puts on the device."""
    files = [vmfb, *(Path(f.split("=", 1)[1].partition("=")[2]) for f in settings.runtime_flags
                     if f.startswith("--parameters="))]
    return sum(f.stat().st_size for f in files if f.is_file())


MODULES = ModuleCache()


@atexit.register
def _release() -> None:
    """Drop the loaded modules and devices before the interpreter goes (else the runtime's
    bindings report every live object as leaked when a run is stopped)."""
    MODULES.clear()
    # One stuck in the device keeps its device, and the process goes without waiting for it.
    if stop_threads():
        with _DEVICES_LOCK:
            _DEVICES.clear()


# What a module run in this process raises when it fails (the runtime's errors, unreadable inputs,
# CUPTI going away): a failed timing, never a crash of the run.
RUN_ERRORS = (RuntimeError, ValueError, OSError, cupti.CuptiUnavailable)


def timing_run(vmfb: Path, seconds: float, why: str = "") -> ToolRun:
    """An in-process timing in the shape of a tool run; with `why`, a failed one (a failing
    candidate is data)."""
    return ToolRun(("in-process CUPTI timing", str(vmfb)), 1 if why else 0, "", f"error: {why}" if why else "", seconds)


# Seconds of calls per repetition at most: CUPTI's kernel times of a module repeat within 1-2% from
# one round to the next (BENCHMARKS.md, issue 34: per-round ratios 1.119-1.139 over 8 rounds), so a
# repetition needs far fewer calls than a wall-clock timing does. (Not yet measured for its effect
# on a tuning's run time.)
KERNEL_MIN_TIME_S = 0.03


def time_kernels(vmfb: Path, settings: ModuleRun, kernels: Sequence[str]) -> tuple[Optional[Timing], ToolRun]:
    """The summed time per call of `kernels` inside `vmfb`'s entry, one figure per repetition."""
    start = time.perf_counter()
    min_time = min(settings.min_time_s, KERNEL_MIN_TIME_S)
    try:
        timing = on_device(settings.device, KernelCalls(vmfb, settings, tuple(kernels), settings.repetitions, min_time))
    except RUN_ERRORS as e:
        return None, timing_run(vmfb, time.perf_counter() - start, f"{type(e).__name__}: {e}")
    seconds = time.perf_counter() - start
    times = timing.times(kernels)
    if not any(times):
        return None, timing_run(vmfb, seconds, f"no kernel of {', '.join(kernels)} ran in @{settings.entry}'s call")
    return Timing(times), timing_run(vmfb, seconds)


class InModelRunner(LocalRunner):
    """Times a built candidate by its kernels inside its whole-model module (`Built.kernels`).
    Its output is read as the local runner reads it, by iree-run-module in a process of its own:
    a candidate that crashes or faults the device there is a failed run, never loaded here,
    where a fault would take the CUDA context of every later timing with it."""

    def timing_identity(self, device: str, dispatch_only: bool, batch: int) -> str:
        return f"{device.partition('://')[0]}: {METHOD}"

    def benchmark(self, b: Built, settings: ModuleRun) -> tuple[Optional[Timing], ToolRun]:
        if not b.kernels or b.vmfb is None:
            return super().benchmark(b, settings)
        return time_kernels(b.vmfb, settings, b.kernels)


IN_MODEL = InModelRunner()
