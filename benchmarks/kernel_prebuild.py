"""What compiling the external kernels of a joined option costs, one after another as the rewrite
meets them against side by side first (tuner.rewrite.extern_call.prebuild, what the flag stage
and the kernel-tiles stage do since it came): each way in a fresh process with an empty Triton
cache (nothing compiled before), alternating, `--rounds` times each. Needs Triton (no GPU).

    python benchmarks/kernel_prebuild.py PROGRAM.mlir [--rewrites f32-reductions,external-hopper-gemm,...] [--rounds 2]

PROGRAM.mlir: an import (DIR/imported/model.mlir of a tune-model run)."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from tuner.rewrite import combined, named_rewrites
from tuner.rewrite.parsed import ParsedProgram
known = named_rewrites()
parsed = ParsedProgram(Path({program!r}))
parsed.changes(combined([]))  # parsed before the clock starts
start = time.perf_counter()
changed = parsed.changes(combined([known[n] for n in {names!r}]), prebuild={prebuild!r})
print(len(changed), time.perf_counter() - start)
"""


def run(program: Path, names: list[str], prebuild: bool) -> tuple[int, float]:
    with tempfile.TemporaryDirectory() as cache:
        code = CHILD.format(root=str(ROOT), program=str(program), names=names, prebuild=prebuild)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "TRITON_CACHE_DIR": cache}, check=True)
    sites, seconds = done.stdout.split()[-2:]
    return int(sites), float(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", type=Path)
    parser.add_argument("--rewrites", default="f32-reductions,pointwise-conv-as-matmul,external-hopper-gemm,"
                                              "external-hopper-conv")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    names = args.rewrites.split(",")
    times: dict[bool, list[float]] = {False: [], True: []}
    sites = set()
    for _ in range(args.rounds):
        for prebuild in (False, True):
            found, seconds = run(args.program, names, prebuild)
            sites.add(found)
            times[prebuild].append(seconds)
    print(f"{args.program}: {'+'.join(names)}, {'/'.join(map(str, sorted(sites)))} sites rewritten, "
          f"{os.cpu_count()} cores")
    for prebuild, label in ((False, "one after another"), (True, "side by side first")):
        print(f"  {label}: {statistics.median(times[prebuild]):.1f} s (median of {args.rounds})")


if __name__ == "__main__":
    main()
