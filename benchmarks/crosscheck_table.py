"""The table in docs/pipelines.md of this tuner's constraints vs the ones IREE emits: `iree-tuner crosscheck`
over every GPU sample dispatch on cuda:sm_80 and rocm:gfx942, each (kind, target, pipeline) cell
with its space sizes and difference classes, and a few of each class compiled.

    python benchmarks/crosscheck_table.py [--limit 5000] [--seconds 120] [--compile 1] [--out DIR]

Prints two Markdown tables: the cells, and the speed of each source (the native space whole;
the compiler's first 100 and 1000 configs).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("cuda:sm_80", "rocm:gfx942")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--compile", type=int, default=1)
    parser.add_argument("--only", default="", help="comma-separated substrings of sample names")
    parser.add_argument("--out", type=Path, default=Path("crosscheck-table"))
    args = parser.parse_args()
    samples = sorted(p for p in (REPO / "sample_dispatches").glob("*.mlir") if not p.stem.endswith("_f32"))
    rows, speed = [], []
    for target in TARGETS:
        for sample in samples:
            if args.only and not any(s in sample.name for s in args.only.split(",")):
                continue
            out = args.out / target.replace(":", "_") / sample.stem
            run = subprocess.run([sys.executable, "-m", "tuner.cli", "crosscheck", str(sample), "--target", target,
                                  "--limit", str(args.limit), "--seconds", str(args.seconds), "--compile",
                                  str(args.compile), "--output", str(out), "--force"],
                                 capture_output=True, text=True, cwd=REPO)
            if run.returncode != 0:
                why = (run.stderr.strip().splitlines() or ["?"])[-1].removeprefix("error: ")
                rows.append(f"| {sample.stem} | {target} | - | - | - | - | {why} |")
                print(rows[-1], flush=True)
                continue
            for c in json.loads((out / "crosscheck.json").read_text()):
                bound = "" if c["compiler_complete"] else ">= "
                classes = "; ".join(f"{k['side']}: {k['reason']} ({k['count']}; built: {' '.join(k['compiled']) or '-'})"
                                    for k in c["classes"]) or ("not mapped" if c["both"] is None else "none")
                rows.append(f"| {sample.stem} | {target} | {c['pipeline']} | {c['native']} | {bound}{c['compiler']} | "
                            f"{'-' if c['both'] is None else c['both']} | {classes} |")
                to = c["compiler_seconds_to"]
                speed.append(f"| {sample.stem} | {target} | {c['pipeline']} | {c['native']} in {c['native_seconds']:.2f} s "
                             f"| {_s(to.get('100'))} "
                             f"| {_s(to.get('1000'))} | {bound}{c['compiler']} |")
                print(rows[-1], flush=True)
    print("\n| sample | target | pipeline | native | compiler | both | differences (configs; sampled builds) |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\n| sample | target | pipeline | native: whole space | compiler: first 100 | first 1000 | compiler configs |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(speed))


def _s(seconds) -> str:
    return "-" if seconds is None else f"{seconds:.1f} s"


if __name__ == "__main__":
    main()
