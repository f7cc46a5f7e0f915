"""The reduction and all-parallel dispatches (softmax, LayerNorm's reductions, transposes,
elementwise work) of a model on the CPU: each tuned alone, then the model rebuilt with each
winner, side by side with the default.

    python benchmarks/cpu_reductions.py [--model onnx-models/bert_base_layer.onnx] [--candidates 12]
        [--rounds 10] [--out bench-reductions]

1. The model is imported (iree-import-onnx) and compiled once with IREE's dispatch benchmarks
   dumped (`--iree-hal-dump-executable-benchmarks-to`): each dispatch alone, as the compiler
   configured it.
2. Each softmax / normalization / reduction / transpose / elementwise dispatch (as `iree-tuner
   dispatches` names them) is
   tuned from its dumped benchmark with `iree-tuner tune` (a subprocess, as a user runs it; the
   dispatch alone is timed, in batches). Claimed: results.json's winner; independent: the
   benchmark file built by plain iree-compile, default and `@best_flags.txt`, interleaved rounds.
3. The whole model built with plain iree-compile: the default, and with each winner's spec
   (matched by structure in the model's own dispatch, which is checked: the model's configured
   executables must carry the winner's lowering_config), interleaved rounds.

Prints Markdown tables for BENCHMARKS.md. The model's shapes were never used to fit a preference
or a default of these pipelines.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.side_by_side import claimed, interleaved  # noqa: E402
from tuner.evaluation.device_identity import cpu_identity  # noqa: E402
from tuner.evaluation.runtime_tools import ModuleRun  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.tools import find_tool, run_tool  # noqa: E402

KINDS = ("softmax", "normalization", "reduction", "transpose", "elementwise")


def _compile(source: Path, flags: list[str], out: Path, extra: tuple[str, ...] = ()) -> Path:
    built = run_tool([find_tool("iree-compile"), str(source), *flags, *extra, "-o", str(out)], 900)
    if not built.ok:
        raise SystemExit(f"iree-compile {source} failed: {built.stderr[-2000:]}")
    return out


def _tuner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], cwd=REPO, capture_output=True, text=True)


def _ratio(times: dict[str, list[float]], base: str, other: str) -> tuple[float, float, float]:
    ratios = [b / o for b, o in zip(times[base], times[other])]
    return statistics.median(ratios), min(ratios), max(ratios)


def _model_inputs(program: Path, out: Path) -> tuple[str, tuple[Path, ...]]:
    """The model's entry function and seeded inputs for it, as the tuner would make them."""
    from iree.compiler import ir

    from tuner.discovery.program import discover_program

    found = discover_program(program, parse_target("llvm-cpu"), ir.Context())
    workload = next(w for w in found.entries.values() if not isinstance(w, str))
    return workload.entry, tuple(workload.write_inputs(out / "model-inputs"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "onnx-models" / "bert_base_layer.onnx")
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench-reductions"))
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    flags = list(parse_target("llvm-cpu").compile_flags)
    program = out / "model.mlir"
    if not program.is_file():
        subprocess.run([find_tool("iree-import-onnx"), str(args.model), "-o", str(program)], check=True)
    bench = out / "bench"
    if not bench.is_dir():
        _compile(program, flags, out / "model-default.vmfb", (f"--iree-hal-dump-executable-benchmarks-to={bench}",))
    listed = _tuner("dispatches", str(program), "--json", "--profile", "--output", str(out / "profile"))
    if listed.returncode:
        raise SystemExit(listed.stderr)
    reductions = [d for d in json.loads(listed.stdout)["dispatches"] if d["kind"] in KINDS and d["pipeline"]]

    rows, winners = [], []
    for d in reductions:
        # The dispatch's executable is named by its function's name up to its ordinal.
        executable = re.match(r"(.*dispatch_\d+)_", d["name"])
        files = sorted(bench.glob(f"module_{executable[1]}_*benchmark.mlir")) if executable else []
        if not files:
            rows.append(f"| {d['kind']} {d['shape']} | no dumped benchmark found | | |")
            continue
        run_dir = out / executable[1].split("$")[-1]  # by dispatch: a rerun reuses each one's tuning
        if not (run_dir / "results.json").is_file():
            tuned = _tuner("tune", str(files[0]), "--num-candidates", str(args.candidates), "--output", str(run_dir))
            (run_dir.parent / f"{run_dir.name}.log").write_text(tuned.stdout + tuned.stderr)
            if tuned.returncode:
                rows.append(f"| {d['kind']} {d['shape']} | tune exited {tuned.returncode} ({run_dir.name}.log) | | |")
                continue
        results = json.loads((run_dir / "results.json").read_text())
        # The tuner's copy of the dumped benchmark, its baked config removed (compiled as dumped,
        # the compiler keeps the baked config and ignores a spec): what best_flags.txt rebuilds.
        source = Path(results["input"])
        modules = {"default": _compile(source, flags, run_dir / "independent-default.vmfb"),
                   "choice": _compile(source, [f"@{run_dir / 'best_flags.txt'}"], run_dir / "independent-choice.vmfb")}
        times = interleaved(modules, ModuleRun("local-task", results["entry"], ()), args.rounds, results["entry"])
        med, lo, hi = _ratio(times, "default", "choice")
        best = next((c for c in results["candidates"] if c["candidate_id"] == results["best"]), None)
        rows.append(f"| {d['kind']} {d['shape']} ({100 * (d['share'] or 0):.1f}% of the model) | "
                    f"{best['label'] if best else 'default kept'} | {claimed(results):.2f}x | "
                    f"{med:.2f}x ({lo:.2f}-{hi:.2f}) |")
        if best:
            winners.append((run_dir.name, d, run_dir, best))

    model_modules = {"default": out / "model-default.vmfb"}
    checks = []
    for tag, d, run_dir, best in winners:
        vmfb = run_dir / "model-with-winner.vmfb"
        configs = run_dir / "model-configs"
        _compile(program, [f"@{run_dir / 'best_flags.txt'}"], vmfb, (f"--iree-hal-dump-executable-configurations-to={configs}",))
        info = best["compilation_info"] or ""
        lowering = info[info.index("lowering_config = ") + len("lowering_config = "):info.index(", translation_info")]
        carried = any(lowering in p.read_text() for p in configs.glob("*.mlir"))
        checks.append(f"{tag}: the model's {d['kind']} dispatch carries the winner's config: {carried}")
        if carried:
            model_modules[tag] = vmfb
    inputs = _model_inputs(program, out)
    times = interleaved(model_modules, ModuleRun("local-task", inputs[0], inputs[1]), args.rounds)

    print(f"CPU: {cpu_identity()} ({platform.machine()}); {args.model.name}; {args.candidates} candidates; "
          f"{args.rounds} interleaved rounds\n")
    print("| dispatch | winner | claimed | independent (plain iree-compile, dispatch alone) |")
    print("|---|---|---|---|")
    print("\n".join(rows))
    print()
    print("\n".join(checks))
    print("\n| model built with | median ms | vs default |\n|---|---|---|")
    for tag in model_modules:
        med, lo, hi = _ratio(times, "default", tag)
        print(f"| {tag} | {statistics.median(times[tag]):.2f} | {med:.3f}x ({lo:.3f}-{hi:.3f}) |")


if __name__ == "__main__":
    main()
