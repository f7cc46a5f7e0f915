"""Does a `tune-model` result hold when measured again, independently of the tuner?

    python benchmarks/model_check.py DIR [--rounds 8] [--repetitions 5]
    python benchmarks/model_check.py DIR --build-only        # two machines: build here,
    python benchmarks/model_check.py DIR --time-only         # time where the device is (runtime only)
    python benchmarks/model_check.py DIR --flags-alone=--iree-opt-data-tiling   # a third build: those flags alone
    python benchmarks/model_check.py DIR --choices-alone   # a third build: the model-wide choices, default configs

Reads DIR/results.json (the model, the program the tuned model is built from (the model, or its
rewrite) and its entry) and DIR/model_flags.txt, builds the default (the model as given, with the
target flags alone) and the tuned model (`iree-compile PROGRAM @DIR/model_flags.txt`)
with plain iree-compile, and times the two with iree-benchmark-module in interleaved rounds,
alternating which goes first. Prints the tuner's claim next to the independent figure (the
median of the per-round ratios default / tuned) and the machine. `--flags-alone FLAGS` builds
the model with the target flags and FLAGS (one string, split on spaces; e.g. the data-tiling
flag a user would otherwise use) as a third build in the same rounds, and prints tuned against it.
`--choices-alone` builds the tuned program with model_flags.txt less its spec (the rewrites and
flags the tuner kept, every dispatch with the compiler's default config): what the tuned configs
add on top of them. Where the default's result is wrong (IREE 3.13's ResNet-50 on CUDA), that is
the fair baseline for the configs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.evaluation.device_identity import device_identity  # noqa: E402
from tuner.evaluation.runtime_tools import ModuleRun, benchmark  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.tools import find_tool, run_tool  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--device", default=None)
    parser.add_argument("--build-only", action="store_true", help="Build DIR/check/{default,tuned}.vmfb and stop.")
    parser.add_argument("--time-only", action="store_true", help="Time the builds DIR/check holds.")
    parser.add_argument("--flags-alone", default=None, help="A third build: the target flags and these (one string).")
    parser.add_argument("--choices-alone", action="store_true",
                        help="A third build: the tuned program and flags without the spec (default configs).")
    args = parser.parse_args()
    data = json.loads((args.dir / "results.json").read_text())
    program, target = Path(data["input"]), parse_target(data["target"])
    model = Path(data.get("model", data["input"]))  # before a rewrite the tuner chose
    work = args.dir / "check"
    work.mkdir(exist_ok=True)
    builds = {"default": (model, [*target.compile_flags]),
              "tuned": (program, [f"@{(args.dir / 'model_flags.txt').resolve()}"])}
    if args.flags_alone:
        builds["flags-alone"] = (model, [*target.compile_flags, *args.flags_alone.split()])
    if args.choices_alone:
        lines = (args.dir / "model_flags.txt").read_text().splitlines()
        (work / "choices_flags.txt").write_text("".join(f"{line}\n" for line in lines if "model_spec.mlir" not in line))
        builds["choices-alone"] = (program, [f"@{(work / 'choices_flags.txt').resolve()}"])
    for name, (source, flags) in builds.items():
        if args.time_only:
            break
        run = run_tool([find_tool("iree-compile"), str(source), *flags, "-o", str(work / f"{name}.vmfb")], 1200)
        if not run.ok:
            sys.exit(f"{name} did not build: {run.first_error()}")
    if args.build_only:
        print(f"built {work}/default.vmfb and tuned.vmfb; time them with --time-only where the device is")
        return
    # The model's entry and inputs, as the tuner wrote them (DIR/model-inputs).
    inputs = tuple(sorted((args.dir / "model-inputs").glob("input*"),
                          key=lambda p: int(p.name[len("input"):].split(".")[0])))
    # A model with external parameters reads them as the tuner's runs did (results.json names them).
    parameters = tuple(f"--parameters={p}" for p in data.get("parameters", []))
    settings = ModuleRun(args.device or target.device, data["entry"], inputs, args.repetitions, 0.2, 600,
                         runtime_flags=parameters)
    times: dict[str, list[float]] = {name: [] for name in builds}
    for r in range(args.rounds):
        for name in (list(builds) if r % 2 == 0 else list(builds)[::-1]):
            timing, run = benchmark(work / f"{name}.vmfb", settings)
            if timing is None:
                sys.exit(f"{name} did not run: {run.first_error()}")
            times[name].append(timing.median_ms)
    ratios = [d / t for d, t in zip(times["default"], times["tuned"])]
    figure = data.get("figure") or {}
    print(f"machine: {device_identity(settings.device)}")
    print(f"| model | tuner's claim | independent: default ms | tuned ms | default / tuned (median of {args.rounds} "
          f"interleaved rounds) | rounds faster |")
    print("|---|---|---|---|---|---|")
    claim = f"{figure['speedup']:.2f}x" if figure else "1.00x (default kept)"
    print(f"| {program.stem} | {claim} | {statistics.median(times['default']):.3f} | "
          f"{statistics.median(times['tuned']):.3f} | **{statistics.median(ratios):.2f}x** | "
          f"{sum(r > 1 for r in ratios)}/{len(ratios)} |")
    for name, what in (("flags-alone", f"`{args.flags_alone}` alone"),
                       ("choices-alone", "the kept rewrites and flags with default configs")):
        if name not in builds:
            continue
        alone = [a / t for a, t in zip(times[name], times["tuned"])]
        print(f"\n{what}: {statistics.median(times[name]):.3f} ms; tuned against it: "
              f"**{statistics.median(alone):.2f}x** (median of {args.rounds} interleaved rounds, "
              f"{min(alone):.2f}-{max(alone):.2f}), faster in {sum(r > 1 for r in alone)}/{len(alone)} rounds")


if __name__ == "__main__":
    main()
