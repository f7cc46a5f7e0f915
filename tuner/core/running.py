"""What a run of a compiled module is given and gives back, as plain data: its settings, its
timing, a dispatch-only benchmark module, and the runtime flags of a model's parameters. The
runner (tuner.evaluation.runtime_tools) runs modules with these; everything else only carries them."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional


@dataclass(frozen=True)
class Timing:
    """Per-repetition wall times of one candidate, in milliseconds."""

    times_ms: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.times_ms)

    @property
    def spread_pct(self) -> float:
        """Interquartile range over the median, in percent: how much repetitions of the same
        thing disagree, robust to a single outlier."""
        if len(self.times_ms) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.times_ms, n=4, method="inclusive")
        return 100.0 * (q3 - q1) / self.median_ms


@dataclass(frozen=True)
class ModuleRun:
    """How the runtime tools (iree-run-module, iree-benchmark-module, the in-process runner) run
    one module: the device, the entry and its inputs, the repetitions and their minimum time, the
    result the numerics check compares. Not a run of the tuner (that is RunOptions)."""

    device: str
    entry: str
    inputs: tuple[Path, ...]  # files written by Workload.write_inputs
    repetitions: int = 5
    min_time_s: float = 0.1
    timeout_s: float = 120.0
    outputs: int = 1  # how many results the entry returns
    checked: Optional[int] = 0  # the result the numerics check compares (None: none can be)
    checked_type: str = "f32"  # its element type
    # More runtime flags for both tools, e.g. `--task_topology_cpu_ids=` where a cluster's CPU
    # benchmark worker times on cores that compiles do not use (tuner.cluster).
    runtime_flags: tuple[str, ...] = ()
    # The devices a comparison of several whole-model builds deals them over, each timing its
    # share against the reference (tuner.stages.model_timing.compare); () or one: `device` alone.
    spread_over: tuple[str, ...] = ()


DISPATCH_BATCH = 50


@dataclass(frozen=True)
class DispatchBenchmark:
    """A dispatch-only benchmark module (from --iree-hal-dump-executable-benchmarks-to): its
    function records `batch` dispatches of the kernel into one command buffer on preallocated
    buffers, so launch, synchronization and result allocation are amortized away."""

    vmfb: Path
    function: str
    batch: int = DISPATCH_BATCH


def runtime_flags(parameters: Iterable[str]) -> tuple[str, ...]:
    """The runtime tools' flags for a model's parameters (`SCOPE=FILE` each; iree-run-module,
    iree-benchmark-module: the module reads its parameters through them)."""
    return tuple(f"--parameters={p}" for p in parameters)


def input_flag(path: Path) -> str:
    """The `--input=` value for an input file written by `Workload.write_inputs`."""
    if path.suffix == ".scalar":
        return path.read_text().strip()
    if path.suffix == ".bin":
        return f"{path.name.split('.', 1)[1][: -len('.bin')]}=@{path.resolve()}"
    return f"@{path.resolve()}"
