"""ResNet-50's convolutions on the CPU: tuned against the default, checked independently.

    python benchmarks/cpu_convs.py [--candidates 20] [--rounds 10] [--batches 1,8] [--only 28x28] [--out bench-convs]

For each convolution (f32, NHWC, as IREE lowers a ResNet-50 stage's 3x3 convolution and the 7x7
stride-2 stem; the input padded by the caller, as an exported model pads it): `iree-tuner tune`
it as a user would (a subprocess, default settings but the budget), read the claim (results.json:
the winner's speedup from its fresh rounds, or 1.0 when the default is kept), then build the
default (the target flags alone) and the choice (`iree-compile INPUT @DIR/best_flags.txt`) with
plain iree-compile and time the two with iree-benchmark-module in interleaved rounds, alternating
which goes first: the independent figure is the median of the per-round ratios. A single-image
convolution is not tunable on llvm-cpu in IREE 3.13 (docs/support.md): the row says what `tune`
answered. These shapes were never used to fit a preference or a default of the convolution
pipeline. Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.discovery.workload import TensorSpec, Workload  # noqa: E402
from benchmarks.side_by_side import claimed, default_and_choice, interleaved  # noqa: E402
from tuner.evaluation.device_identity import cpu_identity  # noqa: E402
from tuner.evaluation.runtime_tools import ModuleRun  # noqa: E402

# (name, output H=W, input channels, output channels, filter, stride)
CONVS = [
    ("ResNet-50 stem 7x7/2", 112, 3, 64, 7, 2),
    ("ResNet-50 conv2_x 3x3", 56, 64, 64, 3, 1),
    ("ResNet-50 conv3_x 3x3", 28, 128, 128, 3, 1),
    ("ResNet-50 conv4_x 3x3", 14, 256, 256, 3, 1),
    ("ResNet-50 conv5_x 3x3", 7, 512, 512, 3, 1),
]


def conv_mlir(n: int, out: int, c: int, f: int, k: int, stride: int) -> tuple[str, tuple[TensorSpec, ...]]:
    size = (out - 1) * stride + k  # the padded input
    x, w, o = f"{n}x{size}x{size}x{c}xf32", f"{k}x{k}x{c}x{f}xf32", f"{n}x{out}x{out}x{f}xf32"
    text = f"""func.func @main(%x: tensor<{x}>, %w: tensor<{w}>) -> tensor<{o}> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{o}>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{o}>) -> tensor<{o}>
  %r = linalg.conv_2d_nhwc_hwcf {{dilations = dense<1> : tensor<2xi64>, strides = dense<{stride}> : tensor<2xi64>}} ins(%x, %w : tensor<{x}>, tensor<{w}>) outs(%f : tensor<{o}>) -> tensor<{o}>
  return %r : tensor<{o}>
}}
"""
    return text, (TensorSpec((n, size, size, c), "f32"), TensorSpec((k, k, c, f), "f32"))


def tune(path: Path, out: Path, candidates: int) -> tuple[int, dict | None, str, float]:
    """`iree-tuner tune` on `path`: (exit code, results.json or None, the last line said, seconds)."""
    if out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "tuner.cli", "tune", str(path), "--output", str(out),
                          "--num-candidates", str(candidates)], cwd=REPO, capture_output=True, text=True)
    said = (run.stdout + run.stderr).strip().splitlines()
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").is_file() else None
    return run.returncode, results, said[-1] if said else "", time.perf_counter() - start


def independent(path: Path, out: Path, inputs: tuple[TensorSpec, ...], rounds: int) -> tuple[float, float, list[float]]:
    """Default and choice built with plain iree-compile, timed interleaved: (default ms, choice ms,
    per-round ratios default/choice)."""
    modules = default_and_choice(path, out)
    files = Workload("main", inputs).write_inputs(out / "independent-inputs")
    settings = ModuleRun("local-task", "main", tuple(files), repetitions=5, min_time_s=0.1)
    times = interleaved(modules, settings, rounds)
    ratios = [d / c for d, c in zip(times["default"], times["choice"])]
    return statistics.median(times["default"]), statistics.median(times["choice"]), ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--only", default="", help="comma-separated substrings of the convolutions' names")
    parser.add_argument("--out", type=Path, default=Path("bench-convs"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"# {cpu_identity()}; {platform.machine()}; budget {args.candidates}, {args.rounds} independent rounds")
    rows = []
    for n in (int(b) for b in args.batches.split(",")):
        for name, size, c, f, k, stride in CONVS:
            if args.only and not any(s in name for s in args.only.split(",")):
                continue
            text, inputs = conv_mlir(n, size, c, f, k, stride)
            tag = f"conv_b{n}_{size}x{size}x{c}x{f}_k{k}s{stride}"
            path = args.out / f"{tag}.mlir"
            path.write_text(text)
            code, results, said, seconds = tune(path, args.out / f"tuning-{tag}", args.candidates)
            if results is None:
                why = said.split("(found: ")[-1].split(":")[0] if "(found: " in said else said
                rows.append((f"{name}, batch {n}", f"not tuned (exit {code}): {why[:120]}", "", "", "", "", seconds))
                print(f"{name}, batch {n}: not tuned (exit {code}): {said}", flush=True)
                continue
            claim = claimed(results)
            d_ms, c_ms, ratios = independent(path, args.out / f"tuning-{tag}", inputs, args.rounds)
            measured = statistics.median(ratios)
            tried = [x for x in results["candidates"] if not x.get("is_baseline") and x.get("speedup")]
            best_tried = max((x["speedup"] for x in tried), default=None)
            rows.append((f"{name}, batch {n}", str(results["best"]) if results["best"] is not None else "none (default kept)",
                         f"{claim:.2f}x", f"{d_ms:.2f}", f"{c_ms:.2f}",
                         f"{measured:.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"
                         + (f"; best confirmed candidate {best_tried:.2f}x" if best_tried else ""), seconds))
            print(f"{name}, batch {n}: claimed {claim:.2f}x, independent {measured:.2f}x", flush=True)
    print()
    print("| convolution | winner | claimed | default ms | choice ms | independent (min-max of rounds) | tuning s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(str(x) for x in row[:-1]) + f" | {row[-1]:.0f} |")


if __name__ == "__main__":
    main()
