"""Why do IREE 3.13's dumped dispatch benchmarks of some models run for seconds per call on CUDA?

    python benchmarks/dumped_benchmark_cause.py BENCHMARK.mlir [BENCHMARK.mlir ...]

Each dumped benchmark module allocates one buffer, never written, and binds every operand of the
dispatch into it. This builds each module three ways: as dumped; with the buffer filled with
zeros before the dispatch; and filled with f16 1.0 (0x3C00) pairs; runs each in this process
(IREE runtime, CUDA) with batch 1 and reads the dispatch kernel's own device time from CUPTI
(tuner.evaluation.cupti), next to the wall time of the call. If the kernel is slow only on the
buffer as dumped, the figure depends on what the never-written memory holds.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.evaluation import cupti  # noqa: E402

FILLS = {"as dumped": None, "zeros": 0, "f16 ones": 0x3C003C00}
_LOAD = re.compile(r"^(\s*)(%\S+) = util\.global\.load @\S+ : !hal\.buffer$", re.M)
_SIZE = re.compile(r"hal\.allocator\.allocate<[^\n]*!hal\.buffer\{%c(\d+)\}")
_CMD = re.compile(r"(%cmd\S*) = hal\.command_buffer\.create")


def filled(text: str, pattern: int | None) -> str:
    """The benchmark with its buffer filled with `pattern` (32 bits) before the dispatch."""
    if pattern is None:
        return text
    size = int(_SIZE.search(text).group(1))
    cmd = _CMD.search(text).group(1)

    def insert(m: re.Match) -> str:
        pad, buf = m.group(1), m.group(2)
        return (f"{m.group(0)}\n{pad}%fill_at = arith.constant 0 : index\n{pad}%fill_n = arith.constant {size} : index\n"
                f"{pad}%fill_pattern = arith.constant {pattern} : i32\n"
                f"{pad}hal.command_buffer.fill_buffer<{cmd} : !hal.command_buffer> target({buf} : !hal.buffer)"
                f"[%fill_at, %fill_n] pattern(%fill_pattern : i32) flags(\"None\")\n"
                f"{pad}hal.command_buffer.execution_barrier<{cmd} : !hal.command_buffer> source(\"Dispatch|Transfer|CommandRetire\") "
                f"target(\"CommandIssue|Dispatch|Transfer\") flags(\"None\")")
    text = text.replace("categories(Dispatch)", 'categories("Transfer|Dispatch")')  # a fill is a transfer
    return _LOAD.sub(insert, text, count=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("benchmarks", nargs="+", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/dumped-cause"))
    args = parser.parse_args()
    import iree.runtime as rt

    args.work.mkdir(parents=True, exist_ok=True)
    device = rt.get_device("cuda")
    tracer = cupti.tracer()
    print("| dumped benchmark | buffer | dispatch kernel, ms (CUPTI) | call, ms (wall) |")
    print("|---|---|---|---|")
    for source in args.benchmarks:
        text = source.read_text()
        function = re.search(r"util\.func public @(\S+)\(%arg0: i32\)", text).group(1)
        for label, pattern in FILLS.items():
            variant = args.work / f"{source.stem}-{label.replace(' ', '_')}.mlir"
            variant.write_text(filled(text, pattern))
            vmfb = variant.with_suffix(".vmfb")
            built = subprocess.run(["iree-compile", str(variant), "--iree-hal-target-device=cuda",
                                    "--iree-cuda-target=sm_80", "-o", str(vmfb)], capture_output=True, text=True)
            if built.returncode:
                print(f"| {source.name} | {label} | did not compile: {built.stderr.strip().splitlines()[0]} | |")
                continue
            config = rt.Config(device=device)
            module = rt.VmModule.mmap(config.vm_instance, str(vmfb))
            ctx = rt.SystemContext(vm_modules=[module], config=config)
            fn = ctx.modules[module.name][function]
            fn(1)  # load and warm
            with tracer.trace() as records:
                start = time.perf_counter()
                fn(1)
                wall = (time.perf_counter() - start) * 1e3
            kernels = [r for r in records if "_dispatch_" in r.name]
            shown = ", ".join(f"{r.ms:.4f}" for r in kernels) or "no kernel recorded"
            print(f"| {source.name.split('_cuda')[0]} | {label} | {shown} | {wall:.3f} |", flush=True)


if __name__ == "__main__":
    main()
