"""Check GPU tunings independently of the tuner: build the default and each tuning's choice with
plain `iree-compile INPUT @DIR/best_flags.txt` (here, where the compiler is), then on the GPU
machine time the whole modules with iree-benchmark-module and torch.matmul (cuBLAS, CUDA events)
in rotating interleaved rounds, so every ratio is taken side by side.

    # here: one flags file per entry (a tuning's best_flags.txt, or any file of iree-compile flags)
    python benchmarks/gpu_independent.py compile --target cuda:sm_80 --out DIR INPUT.mlir \\
        model=RUN1/best_flags.txt preference=RUN2/best_flags.txt
    # there (runtime wheel + torch):
    python3 benchmarks/gpu_independent.py measure DIR [--rounds 10]

The input must be a single f16 matmul (A MxK, B KxN, or B stored NxK: A @ B^T) for the cuBLAS
column. Prints a Markdown
table: each module's median ms, the median of its per-round ratios to the default (and the
rounds it was faster in), and its share of cuBLAS's speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def compile_step(args: argparse.Namespace) -> None:
    from tuner.build.manifest import Manifest
    from tuner.targets import parse_target
    from tuner.tools import find_tool, run_tool

    args.out.mkdir(parents=True, exist_ok=True)
    target = parse_target(args.target)
    if not args.entries:
        raise SystemExit("name at least one LABEL=DIR/best_flags.txt")
    entries = [("default", list(target.compile_flags))]
    for item in args.entries:
        label, _, flags_file = item.partition("=")
        if not flags_file or not Path(flags_file).is_file():
            raise SystemExit(f"{item}: expected LABEL=FLAGS_FILE with an existing file")
        entries.append((label, [f"@{flags_file}"]))
    for label, flags in entries:
        built = run_tool([find_tool("iree-compile"), str(args.input), *flags, "-o", str(args.out / f"{label}.vmfb")], 600)
        if not built.ok:
            raise SystemExit(f"plain iree-compile of {label} failed: {built.stderr[-2000:]}")
        print(f"built {label}", flush=True)
    # The inputs the tuner timed: from the manifest of the first tuning's directory.
    workload = Manifest.read(Path(args.entries[0].partition("=")[2]).parent).workload
    (args.out / "plan.json").write_text(json.dumps({
        "input": str(args.input), "target": args.target, "labels": [label for label, _ in entries],
        "flags": dict(entries), "workload": workload.to_json()}, indent=1))


def torch_matmul(inputs: tuple[Path, ...]):
    """cuBLAS through torch on the same inputs; B stored NxK is multiplied transposed."""
    import numpy as np
    import torch

    a, b = (torch.from_numpy(np.load(p)).cuda() for p in inputs)
    if a.shape[1] != b.shape[0]:
        b = b.t()  # a strided view: cuBLAS takes the transpose as an operand flag, no copy
    return lambda: torch.matmul(a, b)


def measure_step(args: argparse.Namespace) -> None:
    from benchmarks.gpu_common import time_cuda
    from tuner.evaluation.runtime_tools import ModuleRun, benchmark
    from tuner.discovery.workload import Workload

    plan = json.loads((args.dir / "plan.json").read_text())
    workload = Workload.from_json(plan["workload"])
    inputs = tuple(workload.write_inputs(args.dir / "inputs"))
    settings = ModuleRun(device="cuda", entry=workload.entry, inputs=inputs, repetitions=3, min_time_s=0.2)
    torch_fn = torch_matmul(inputs)
    order = [*plan["labels"], "cuBLAS"]
    samples: dict[str, list[float]] = {label: [] for label in order}
    for round_ in range(args.rounds):
        # Rotate who goes first: whatever runs first after a pause can see lower clocks.
        for label in order[round_ % len(order):] + order[: round_ % len(order)]:
            if label == "cuBLAS":
                samples[label].append(statistics.median(time_cuda(torch_fn, 20)))
                continue
            timing, run = benchmark(args.dir / f"{label}.vmfb", settings)
            if timing is None:
                raise SystemExit(f"timing {label} failed: {run.first_error()}")
            samples[label].append(timing.median_ms)
    default, cublas = samples["default"], statistics.median(samples["cuBLAS"])
    print(f"\n{Path(plan['input']).name}, {plan['target']}, {args.rounds} rotating interleaved rounds\n")
    print("| module | median ms | vs default (median of per-round ratios) | rounds faster | share of cuBLAS |")
    print("|---|---|---|---|---|")
    for label in order:
        ms = statistics.median(samples[label])
        ratios = [d / t for d, t in zip(default, samples[label])]
        faster = "-" if label == "default" else f"{sum(r > 1 for r in ratios)}/{len(ratios)}"
        print(f"| {label} | {ms:.3f} | {statistics.median(ratios):.2f}x | {faster} | {cublas / ms:.0%} |")
    print(json.dumps({"samples_ms": samples}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    c = steps.add_parser("compile")
    c.add_argument("input", type=Path)
    c.add_argument("entries", nargs="*", help="LABEL=FLAGS_FILE")
    c.add_argument("--target", default="cuda:sm_80")
    c.add_argument("--out", type=Path, required=True)
    m = steps.add_parser("measure")
    m.add_argument("dir", type=Path)
    m.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    (compile_step if args.step == "compile" else measure_step)(args)


if __name__ == "__main__":
    main()
