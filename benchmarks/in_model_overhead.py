"""What a call costs the in-process timing (tuner.evaluation.in_model) beyond its kernels, on a CUDA
machine: the wall time per call of a module's entry with its result copied to the host after every
call and only after the last, each without and with CUPTI's kernel records on, beside the kernels'
own time per call. BENCHMARKS.md ("Models as exporters write them") has the figures.

    python3 benchmarks/in_model_overhead.py MODULE.vmfb ENTRY INPUT.npy... [--calls 200]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tuner.evaluation import cupti
from tuner.evaluation.device_calls import on_device_thread
from tuner.evaluation.in_model import LoadedModule
from tuner.evaluation.runtime_tools import ModuleRun


def _loop(module: LoadedModule, calls: int, read_every: bool) -> float:
    """Wall ms per call of `calls` calls back to back."""
    start = time.perf_counter()
    for i in range(calls):
        module.call(read=read_every or i == calls - 1)
    return (time.perf_counter() - start) * 1e3 / calls


def measure(vmfb: Path, entry: str, inputs: tuple[Path, ...], calls: int) -> list[tuple[str, float]]:
    module = LoadedModule(vmfb, ModuleRun("cuda", entry, inputs))
    for _ in range(5):
        module.call()
    rows = []
    for read_every in (True, False):
        what = "result read after every call" if read_every else "result read after the last call"
        rows.append((f"{what}, no kernel records", _loop(module, calls, read_every)))
        tracer = cupti.tracer()
        with tracer.trace() as records:
            wall = _loop(module, calls, read_every)
        kernels = sum(r.end_ns - r.start_ns for r in records) / 1e6 / calls
        rows.append((f"{what}, CUPTI kernel records on", wall))
        rows.append(("  its kernels' time per call", kernels))
    start = time.perf_counter()
    tracer = cupti.tracer()
    for _ in range(20):
        with tracer.trace():
            module.call()
    rows.append(("one traced call, tracing turned on and off around it", (time.perf_counter() - start) * 1e3 / 20))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("vmfb", type=Path)
    parser.add_argument("entry")
    parser.add_argument("inputs", type=Path, nargs="+")
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    rows = on_device_thread("cuda", lambda: measure(args.vmfb, args.entry, tuple(args.inputs), args.calls))
    for what, ms in rows:
        print(f"{what:<60} {ms:8.4f} ms")


if __name__ == "__main__":
    main()
