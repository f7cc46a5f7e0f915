"""Tune CPU matmuls and convolutions and time default, tuned and numpy side by side, interleaved, in one run.

    python benchmarks/cpu_matmul.py [--candidates 20] [--rounds 5] [--out bench-cpu]

For each shape: tune it (iree-tuner's Python API), compile the default (target flags only) and
the winner (best_flags.txt), then time default, tuned and numpy in interleaved rounds so that
drift on a busy machine hits all three alike. Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner import api  # noqa: E402
from tuner.core.settings import EvalSettings, RunOptions, SearchSettings  # noqa: E402
from tuner.evaluation.runtime_tools import ModuleRun, benchmark  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.tools import find_tool, run_tool  # noqa: E402

# (name, batch, M, N, K, transpose_b): the first is the shape the issue names; the rest are
# shapes from real models the tuner was not developed against.
SHAPES = [
    ("square 1024", 0, 1024, 1024, 1024, False),
    ("BERT FFN 384x3072x768", 0, 384, 3072, 768, False),
    ("linear, B^T 512x2048x768", 0, 512, 2048, 768, True),
    ("skinny 32x4096x2048", 0, 32, 4096, 2048, False),
    ("unaligned 1000x1000x1000", 0, 1000, 1000, 1000, False),
    ("batch 8x256x512x384", 8, 256, 512, 384, False),
]
# (name, images, output rows, output columns, input channels, output channels): 3x3 NHWC.
CONVS = [
    ("conv 3x3 4x56x56x64->64", 4, 56, 56, 64, 64),
]


def mlir_for(batch: int, m: int, n: int, k: int, transpose_b: bool) -> str:
    b = f"{batch}x" if batch else ""
    lhs, rhs, out = f"{b}{m}x{k}xf32", (f"{b}{n}x{k}xf32" if transpose_b else f"{b}{k}x{n}xf32"), f"{b}{m}x{n}xf32"
    op = "linalg.batch_matmul" if batch else "linalg.matmul"
    maps = ("indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, "
            "affine_map<(m, n, k) -> (m, n)>]") if transpose_b else ""
    return f"""func.func @main(%a: tensor<{lhs}>, %b: tensor<{rhs}>) -> tensor<{out}> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{out}>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{out}>) -> tensor<{out}>
  %r = {op} {maps} ins(%a, %b : tensor<{lhs}>, tensor<{rhs}>) outs(%f : tensor<{out}>) -> tensor<{out}>
  return %r : tensor<{out}>
}}
"""


def conv_mlir(n: int, h: int, w: int, c: int, f: int) -> str:
    """A 3x3 NHWC/HWCF convolution producing n x h x w x f (f32)."""
    inp, fil, out = f"{n}x{h + 2}x{w + 2}x{c}xf32", f"3x3x{c}x{f}xf32", f"{n}x{h}x{w}x{f}xf32"
    return f"""func.func @main(%a: tensor<{inp}>, %b: tensor<{fil}>) -> tensor<{out}> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{out}>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{out}>) -> tensor<{out}>
  %r = linalg.conv_2d_nhwc_hwcf {{dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}}
         ins(%a, %b : tensor<{inp}>, tensor<{fil}>) outs(%f : tensor<{out}>) -> tensor<{out}>
  return %r : tensor<{out}>
}}
"""


def numpy_matmul(transpose_b: bool):
    def make(a: np.ndarray, b: np.ndarray):
        rhs = np.swapaxes(b, -1, -2) if transpose_b else b
        return lambda: a @ rhs
    return make


def numpy_conv(a: np.ndarray, b: np.ndarray):
    """The convolution as numpy does it best: a sliding-window view contracted with the filter
    by tensordot (one BLAS matmul over the gathered windows)."""
    windows = np.lib.stride_tricks.sliding_window_view(a, (3, 3), axis=(1, 2))  # n, h, w, c, 3, 3
    return lambda: np.tensordot(windows, b, axes=([4, 5, 3], [0, 1, 2]))


def time_numpy(fn, reps: int) -> list[float]:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def cases():
    """(name, input MLIR, numpy reference maker): the matmul shapes, then the convolutions."""
    for name, batch, m, n, k, tb in SHAPES:
        yield name, mlir_for(batch, m, n, k, tb), numpy_matmul(tb)
    for name, n, h, w, c, f in CONVS:
        yield name, conv_mlir(n, h, w, c, f), numpy_conv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("bench-cpu"))
    parser.add_argument("--only", default=None, help="only shapes whose name contains one of these (comma-separated)")
    args = parser.parse_args()
    target = parse_target("llvm-cpu")
    rows = []
    for name, text, reference in cases():
        if args.only and not any(part and part in name for part in args.only.split(",")):
            continue
        work = args.out / name.replace(" ", "_").replace(",", "").replace("^", "").replace(">", "")
        work.mkdir(parents=True, exist_ok=True)
        src = work / "input.mlir"
        src.write_text(text)
        t0 = time.perf_counter()
        tuning = api.tune(src, target, work / "tuning", search=SearchSettings(budget=args.candidates), run=RunOptions(EvalSettings(repetitions=3)))
        tune_s = time.perf_counter() - t0
        best = tuning.ranking.best
        flags = [f"@{work / 'tuning' / 'best_flags.txt'}"]  # a response file (quoted paths)
        iree_compile = find_tool("iree-compile")
        for label, fl in (("default", list(target.compile_flags)), ("tuned", flags)):
            run = run_tool([iree_compile, str(src), *fl, "-o", str(work / f"{label}.vmfb")], 600)
            if not run.ok:
                raise SystemExit(f"{name}: {label} build failed: {run.first_error()}")
        inputs = tuple(sorted((work / "tuning" / "candidates" / "inputs").glob("input*.npy")))  # written by the evaluator
        numpy_fn = reference(*(np.load(p) for p in inputs))
        settings = ModuleRun(device=target.device, entry="main", inputs=inputs, repetitions=3, min_time_s=0.2)
        samples: dict[str, list[float]] = {"default": [], "tuned": [], "numpy": []}
        for _ in range(args.rounds):  # interleaved: default, tuned, numpy, default, ...
            for label in ("default", "tuned"):
                timing, run = benchmark(work / f"{label}.vmfb", settings)
                if timing is None:
                    raise SystemExit(f"{name}: benchmarking {label} failed: {run.first_error()}")
                samples[label] += timing.times_ms
            samples["numpy"] += time_numpy(numpy_fn, 10)
        med = {k: statistics.median(v) for k, v in samples.items()}
        spread = {k: 100 * (statistics.quantiles(v, n=4)[2] - statistics.quantiles(v, n=4)[0]) / med[k]
                  for k, v in samples.items()}
        rows.append((name, med, spread, best.label if best else "-", tune_s, len(tuning.candidates)))
        print(f"{name}: default {med['default']:.2f} ms, tuned {med['tuned']:.2f} ms "
              f"({med['default'] / med['tuned']:.2f}x), numpy {med['numpy']:.2f} ms; winner {best.label if best else '-'}",
              flush=True)
    print()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores ({tuning.dispatch.target.arch.strip()}); "
          f"{args.candidates} candidates per shape; {args.rounds} interleaved rounds; medians, IQR in parentheses.")
    print()
    print("| dispatch (f32) | default ms | tuned ms | numpy ms | tuned vs default | numpy vs tuned | winner | tuning time |")
    print("|---|---|---|---|---|---|---|---|")
    for name, med, spread, label, tune_s, count in rows:
        print(f"| {name} | {med['default']:.2f} (±{spread['default']:.0f}%) | {med['tuned']:.2f} (±{spread['tuned']:.0f}%) "
              f"| {med['numpy']:.2f} (±{spread['numpy']:.0f}%) | **{med['default'] / med['tuned']:.2f}x** "
              f"| {med['tuned'] / med['numpy']:.2f}x | {label} | {tune_s:.0f} s, {count} candidates |")


if __name__ == "__main__":
    main()
