"""Held-out linear layers of real models on llvm-cpu: tuned (data tiling and its mmt4d's outer tiles
searched together with the contraction's own tiles) against the data-tiling flag alone, the
default and numpy, side by side in interleaved rounds of one run.

    python benchmarks/cpu_data_tiled.py [--candidates 16] [--rounds 6] [--out bench-dt] [--only NAME,...]

Each layer is `x @ W^T` with W a model weight in a parameter archive (.irpa, random values), as
iree-turbine and `iree-import-onnx --externalize-params` export them: under data tiling the
compiler packs W once, when the module loads, as it would in the model, rather than on every call
(a weight passed as a call argument is packed each call; a 16x8192x2048 layer took 20.7 ms that way
against 3.3 ms with the weight a parameter). IREE's builds run on the input the tuner generated.
numpy runs `x @ W.T` on the same data in f32 (OpenBLAS; it has no bf16 matmul: for a bf16 layer
it stands as the f32 reference). Prints a Markdown table for BENCHMARKS.md; each ratio is the
median of the per-round ratios.
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
from tuner.evaluation.runtime_tools import ModuleRun, benchmark  # noqa: E402
from tuner.core.settings import EvalSettings, RunOptions, SearchSettings  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.tools import find_tool, run_tool  # noqa: E402

# (name, tokens M, out features N, in features K, weight type): layers no file here uses. The
# models' sizes: GPT-2 medium (d 1024, MLP 4096), Qwen2-0.5B (d 896, MLP 4864), Llama-3.2-1B
# (d 2048, MLP 8192).
LAYERS = [
    ("GPT-2 medium MLP up, 512 tokens", 512, 4096, 1024, "f32"),
    ("Qwen2-0.5B MLP up, 32 tokens (skinny)", 32, 4864, 896, "f32"),
    ("Llama-3.2-1B MLP gate, 128 tokens, bf16", 128, 8192, 2048, "bf16"),
]
DATA_TILING_FLAG = "--iree-opt-data-tiling"


def layer_mlir(m: int, n: int, k: int, t: str) -> str:
    acc = "f32"
    return f"""util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<{n}x{k}x{t}>
func.func @main(%x: tensor<{m}x{k}x{t}>) -> tensor<{m}x{n}x{acc}> {{
  %w = util.global.load @w : tensor<{n}x{k}x{t}>
  %z = arith.constant 0.0 : {acc}
  %e = tensor.empty() : tensor<{m}x{n}x{acc}>
  %f = linalg.fill ins(%z : {acc}) outs(%e : tensor<{m}x{n}x{acc}>) -> tensor<{m}x{n}x{acc}>
  %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                                      affine_map<(m, n, k) -> (m, n)>]
         ins(%x, %w : tensor<{m}x{k}x{t}>, tensor<{n}x{k}x{t}>) outs(%f : tensor<{m}x{n}x{acc}>) -> tensor<{m}x{n}x{acc}>
  return %r : tensor<{m}x{n}x{acc}>
}}
"""


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """f32 values rounded to bf16, as the uint16 bit patterns IREE reads for bf16."""
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def write_weights(path: Path, weights: dict[str, np.ndarray]) -> None:
    """A parameter archive (.irpa) holding each array under its name."""
    from iree.runtime import ParameterIndex

    index = ParameterIndex()
    for name, w in weights.items():
        index.add_buffer(name, w.tobytes())
    index.create_archive_file(str(path))


def time_numpy(fn, reps: int) -> list[float]:
    fn()
    out = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1e3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=Path("bench-dt"))
    parser.add_argument("--only", default=None, help="only layers whose name contains one of these (comma-separated)")
    args = parser.parse_args()
    target = parse_target("llvm-cpu")
    iree_compile = find_tool("iree-compile")
    rng = np.random.default_rng(0)
    rows = []
    for name, m, n, k, t in LAYERS:
        if args.only and not any(part and part in name for part in args.only.split(",")):
            continue
        work = args.out.resolve() / name.split(",")[0].replace(" ", "_").replace(".", "_")
        work.mkdir(parents=True, exist_ok=True)
        src, irpa = work / "layer.mlir", work / "weights.irpa"
        src.write_text(layer_mlir(m, n, k, t))
        w32 = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(np.float32)
        x32 = rng.standard_normal((m, k)).astype(np.float32)
        w = to_bf16_bits(w32) if t == "bf16" else w32
        if not irpa.exists():
            write_weights(irpa, {"w": w})
        parameters = (f"model={irpa}",)
        t0 = time.perf_counter()
        tuning = api.tune(src, target, work / "tuning", search=SearchSettings(budget=args.candidates),
                          run=RunOptions(EvalSettings(repetitions=3), parameters=parameters))
        tune_s = time.perf_counter() - t0
        best = tuning.ranking.best
        builds = {"default": list(target.compile_flags), "flag alone": [*target.compile_flags, DATA_TILING_FLAG],
                  "tuned": [f"@{work / 'tuning' / 'best_flags.txt'}"]}
        for label, flags in builds.items():
            run = run_tool([iree_compile, str(src), *flags, "-o", str(work / f"{label.replace(' ', '_')}.vmfb")], 900)
            if not run.ok:
                raise SystemExit(f"{name}: {label} build failed: {run.first_error()}")
        inputs = tuple(sorted((work / "tuning" / "candidates" / "inputs").glob("input*"),  # the tuner's own
                              key=lambda p: int(p.name[len("input"):].split(".")[0])))
        settings = ModuleRun(device=target.device, entry="main", inputs=inputs, repetitions=3, min_time_s=0.2,
                             runtime_flags=(f"--parameters=model={irpa}",))
        samples: dict[str, list[float]] = {label: [] for label in [*builds, "numpy"]}
        wt = w32.T
        numpy_fn = lambda: x32 @ wt  # noqa: E731
        for r in range(args.rounds):  # interleaved, the order alternating round to round
            for label in (list(builds) if r % 2 == 0 else list(builds)[::-1]):
                timing, run = benchmark(work / f"{label.replace(' ', '_')}.vmfb", settings)
                if timing is None:
                    raise SystemExit(f"{name}: benchmarking {label} failed: {run.first_error()}")
                samples[label].append(statistics.median(timing.times_ms))
            samples["numpy"].append(statistics.median(time_numpy(numpy_fn, 10)))
        med = {key: statistics.median(v) for key, v in samples.items()}

        def ratio(a: str, b: str) -> tuple[float, float, float]:
            per = [x / y for x, y in zip(samples[a], samples[b])]
            return statistics.median(per), min(per), max(per)

        rows.append((name, t, med, ratio("flag alone", "tuned"), ratio("default", "tuned"), ratio("numpy", "tuned"),
                     best.label if best else "-", tune_s, len(tuning.candidates)))
        print(f"{name}: default {med['default']:.2f}, flag alone {med['flag alone']:.2f}, tuned {med['tuned']:.2f}, "
              f"numpy {med['numpy']:.2f} ms; winner {best.label if best else '-'}", flush=True)
    print()
    print(f"Machine: {platform.machine()}, {os.cpu_count()} cores ({tuning.dispatch.target.arch.strip()}); "
          f"{args.candidates} candidates per layer; {args.rounds} interleaved rounds; medians (ms), per-round "
          "ratio medians with their min-max.")
    print()
    print("| layer | default | flag alone | tuned | numpy (f32) | tuned vs flag alone | tuned vs default | numpy / tuned | winner | tuning |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, t, med, vs_flag, vs_default, vs_numpy, label, tune_s, count in rows:
        def fmt(r):
            return f"**{r[0]:.2f}x** ({r[1]:.2f}-{r[2]:.2f})"
        print(f"| {name} ({t}) | {med['default']:.2f} | {med['flag alone']:.2f} | {med['tuned']:.2f} | {med['numpy']:.2f} "
              f"| {fmt(vs_flag)} | {fmt(vs_default)} | {vs_numpy[0]:.2f}x | {label} | {tune_s:.0f} s, {count} candidates |")


if __name__ == "__main__":
    main()
