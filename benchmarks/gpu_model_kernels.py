"""The GPU kernels of whole IREE modules, measured independently of the tuner: CUPTI (through
torch.profiler) around calls of each module's entry function run in this process by the IREE
runtime. Kernels are named by IREE after their dispatch, so each dispatch's device time per
call comes out, and their sum is the module's kernel time per call.

    python benchmarks/gpu_model_kernels.py --function F --input x.npy [--input ...] \\
        [--rounds 6] [--calls 20] [--json OUT.json] NAME=MODULE.vmfb [NAME=MODULE.vmfb ...]

With several modules they are timed in interleaved rounds (the order rotating each round), and
the wall time per call (host, synchronized) is printed beside the kernel time. Needs torch with
CUDA and iree-base-runtime; the tuner itself never imports torch. The output's read-back to the
host after each round's calls is left out of the kernel time (and reported as readback_ms).
"""

from __future__ import annotations

import argparse
import os
import json
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.gpu_common import is_readback  # noqa: E402

_DISPATCH = re.compile(r"(dispatch_\d+)")
_NAMED = re.compile(r"(dispatch_\d+\w*)")  # with --names: dispatch_N_KIND_SHAPE, as IREE names the kernel
READBACK = "read-back"


def _load(path: Path):
    import iree.runtime as rt

    config = rt.Config("cuda")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.mmap(ctx.instance, str(path)))
    return config, ctx


def _call(fn, args):
    out = fn(*args)
    first = out[0] if isinstance(out, (tuple, list)) else out
    return first


def kernel_times(fn, args, calls: int, names: bool = False) -> tuple[dict[str, float], float]:
    """Device ms per call of each dispatch's kernels (by `dispatch_N`, or with `names` by the
    kernel's whole name from `dispatch_N` on; the read-back of the last call's output under the
    key READBACK) and wall ms per call."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        _call(fn, args).to_host()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            out = _call(fn, args)
        out.to_host()
        wall = (time.perf_counter() - t0) * 1e3 / calls
    per: dict[str, float] = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            found = (_NAMED if names else _DISPATCH).search(e.name)
            us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            key = READBACK if is_readback(e.name) else found.group(1) if found else e.name
            per[key] += us / 1e3 / calls
    return dict(per), wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="+", help="NAME=MODULE.vmfb")
    parser.add_argument("--function", required=True)
    parser.add_argument("--input", action="append", default=[], type=Path, help=".npy files, in order")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--names", action="store_true", help="key each dispatch by its kernel's whole name "
                        "(dispatch_N_KIND_SHAPE), not dispatch_N")
    args = parser.parse_args()
    import iree.runtime as rt

    loaded = {}
    for item in args.modules:
        name, path = item.split("=", 1)
        config, ctx = _load(Path(path))
        fn = ctx.modules.module[args.function]
        inputs = [rt.asdevicearray(config.device, np.load(p)) for p in args.input]
        loaded[name] = (fn, inputs, ctx)
    names = list(loaded)
    samples: dict[str, list[tuple[dict[str, float], float]]] = {n: [] for n in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, inputs, _ = loaded[name]
            samples[name].append(kernel_times(fn, inputs, args.calls, args.names))
    report = {}
    for name in names:
        kernels = defaultdict(list)
        for per, _ in samples[name]:
            for k, ms in per.items():
                kernels[k].append(ms)
        totals = [sum(ms for k, ms in per.items() if k != READBACK) for per, _ in samples[name]]
        readback = kernels.pop(READBACK, [0.0])
        report[name] = {"kernel_ms": statistics.median(totals), "wall_ms": statistics.median(w for _, w in samples[name]),
                        "dispatch_ms": {k: statistics.median(v) for k, v in sorted(kernels.items())},
                        "kernel_ms_rounds": totals, "readback_ms": statistics.median(readback)}
        print(f"{name}: {report[name]['kernel_ms']:.4f} ms of kernels per call, "
              f"{report[name]['wall_ms']:.4f} ms wall per call (median of {args.rounds} rounds x {args.calls} calls)")
        for k, ms in report[name]["dispatch_ms"].items():
            print(f"    {k:<14} {ms:.4f} ms")
    for i, ref in enumerate(names):  # each module against each one after it, as given
        for name in names[i + 1:]:
            ratios = [a / b for a, b in zip(report[ref]["kernel_ms_rounds"], report[name]["kernel_ms_rounds"])]
            print(f"{ref} / {name}: {statistics.median(ratios):.3f}x kernel time "
                  f"(per round: {', '.join(f'{x:.3f}' for x in ratios)})")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
    # Every figure is printed and written: leave without the interpreter's teardown, where torch's
    # CUPTI profiler and IREE's CUDA runtime, both loaded, freed memory twice on the H100 ("double
    # free or corruption", "free(): invalid pointer": an abort and a non-zero exit after correct output).
    sys.stdout.flush()
    os._exit(0)
