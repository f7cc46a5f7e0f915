"""Device-side kernel times of IREE modules and of torch, from one CUDA profiler (CUPTI) session.

    python benchmarks/gpu_kernel_times.py [--json] M N K NAME=MODULE.vmfb [NAME=MODULE.vmfb ...]

Runs each module's `main(f16[M,K], f16[K,N])` through the IREE runtime in this process, and
torch.matmul on the same inputs, under torch.profiler; prints the mean GPU time of each one's
kernels per call. Unlike iree-benchmark-module's wall time per call, this excludes launch,
synchronization and the allocation of the result buffer, and the read-back of the last result.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

import iree.runtime as rt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.gpu_common import kernel_us  # noqa: E402

CALLS = 20


def main() -> None:
    args = sys.argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    m, n, k = (int(x) for x in args[:3])
    modules = dict(arg.split("=", 1) for arg in args[3:])
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    config = rt.Config("cuda")
    results: dict[str, float] = {}
    for name, path in modules.items():
        ctx = rt.SystemContext(config=config)
        ctx.add_vm_module(rt.VmModule.mmap(ctx.instance, path))
        fn = ctx.modules.module["main"]
        ad, bd = rt.asdevicearray(config.device, a), rt.asdevicearray(config.device, b)
        for _ in range(5):
            fn(ad, bd).to_host()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(CALLS):
                out = fn(ad, bd)
            out.to_host()
        results[name] = kernel_us(prof) / 1000.0 / CALLS
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    for _ in range(5):
        torch.matmul(ta, tb)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(CALLS):
            torch.matmul(ta, tb)
        torch.cuda.synchronize()
    results["torch"] = kernel_us(prof) / 1000.0 / CALLS
    if as_json:
        print(json.dumps(results))
        return
    for name, ms in results.items():
        print(f"{name}: {ms:.4f} ms of GPU kernels per call")


if __name__ == "__main__":
    main()
