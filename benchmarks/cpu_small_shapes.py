"""Skinny and small matmuls on llvm-cpu: what IREE 3.13 offers against numpy, side by side.

    python benchmarks/cpu_small_shapes.py [--rounds 6] [--out bench-small]

For each shape, built with plain iree-compile and timed in interleaved rounds with numpy (the
order alternating): the default; data tiling alone (`--iree-opt-data-tiling`: the mmt4d
microkernel, the compiler's default on x86) and with generated code instead; each of those run on the runtime's `local-sync` device (the calling thread alone,
no task system) as well as on `local-task` (a worker pool, what the tuner times with). Weights
are model parameters (.irpa) unless the row says the B operand is a call argument (then data
tiling packs it on every call). A tuned result for the same shapes comes from
`benchmarks/cpu_data_tiled.py` (held-out layers) and `iree-tuner tune`. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cpu_data_tiled import layer_mlir, time_numpy, write_weights  # noqa: E402
from benchmarks.cpu_matmul import mlir_for  # noqa: E402
from tuner.evaluation.runtime_tools import ModuleRun, benchmark  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.tools import find_tool, run_tool  # noqa: E402

# (name, M, N, K, B is a call argument): a decode-sized layer, a DeepBench-inference-like
# skinny GEMM with B an activation (KxN), and two small layers where a call's fixed cost counts.
SHAPES = [
    ("skinny 16x8192x2048, weight", 16, 8192, 2048, False),
    ("skinny 32x4096x2048, B an argument (KxN)", 32, 4096, 2048, True),
    ("small 64x768x768, weight", 64, 768, 768, False),
    ("tiny 8x256x256, weight", 8, 256, 256, False),
]
BUILDS = {"default": (), "data tiling": ("--iree-opt-data-tiling",),
          "data tiling, no ukernel": ("--iree-opt-data-tiling", "--iree-llvmcpu-enable-ukernels=none")}


def module_name(label: str) -> str:
    return label.replace(" ", "_").replace(",", "") + ".vmfb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("bench-small"))
    args = parser.parse_args()
    target = parse_target("llvm-cpu")
    rng = np.random.default_rng(0)
    rows = []
    for name, m, n, k, argument in SHAPES:
        work = args.out.resolve() / f"{m}x{n}x{k}{'_arg' if argument else ''}"
        work.mkdir(parents=True, exist_ok=True)
        src = work / "layer.mlir"
        x = rng.standard_normal((m, k)).astype(np.float32)
        np.save(work / "x.npy", x)
        runtime: tuple[str, ...] = ()
        if argument:
            src.write_text(mlir_for(0, m, n, k, False))
            b = rng.standard_normal((k, n)).astype(np.float32)
            np.save(work / "b.npy", b)
            inputs = (work / "x.npy", work / "b.npy")
            numpy_fn = lambda x=x, b=b: x @ b  # noqa: E731
        else:
            src.write_text(layer_mlir(m, n, k, "f32"))
            w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
            write_weights(work / "weights.irpa", {"w": w})
            runtime = (f"--parameters=model={work / 'weights.irpa'}",)
            inputs = (work / "x.npy",)
            numpy_fn = lambda x=x, wt=w.T: x @ wt  # noqa: E731
        for label, flags in BUILDS.items():
            run = run_tool([find_tool("iree-compile"), str(src), *target.compile_flags, *flags, "-o",
                            str(work / module_name(label))], 600)
            if not run.ok:
                raise SystemExit(f"{name}: {label} did not build: {run.first_error()}")
        samples: dict[str, list[float]] = {}
        variants = [(label, device) for label in BUILDS for device in ("local-task", "local-sync")]
        for r in range(args.rounds):
            for label, device in (variants if r % 2 == 0 else variants[::-1]):
                settings = ModuleRun(device=device, entry="main", inputs=inputs, repetitions=3, min_time_s=0.2,
                                     runtime_flags=runtime)
                timing, run = benchmark(work / module_name(label), settings)
                if timing is None:
                    raise SystemExit(f"{name}: {label} on {device} did not run: {run.first_error()}")
                samples.setdefault(f"{label} ({device})", []).append(statistics.median(timing.times_ms))
            samples.setdefault("numpy", []).append(statistics.median(time_numpy(numpy_fn, 50)))
        med = {key: statistics.median(v) for key, v in samples.items()}
        rows.append((name, med))
        print(name, {key: round(v, 4) for key, v in med.items()}, flush=True)
    keys = list(rows[0][1])
    print()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores; {args.rounds} interleaved rounds; medians in ms; "
          "in parentheses: numpy's time over it (above 1: IREE faster).")
    print()
    print("| shape (f32) | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for name, med in rows:
        cells = [f"{med[key]:.3f}" + ("" if key == "numpy" else f" ({med['numpy'] / med[key]:.2f})") for key in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
