"""What finding the applying rewrites costs on a real export's program: each offered rewrite
parsed, applied and written (as the flag stage did up to ef0d4d4), against the program parsed
once and each rewrite applied to a copy, nothing written (tuner.rewrite.parsed.ParsedProgram).
Both find the same changes; interleaved, `--rounds` times.

    python benchmarks/rewrite_finding.py PROGRAM.mlir [--target cuda] [--rounds 2]

PROGRAM.mlir: an import (iree-import-onnx's output, DIR/imported/model.mlir of a tune-model run).
The external kernels' rewrites are left out (they compile Triton kernels, once a process)."""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuner.rewrite import EXTERNAL, rewrite_program, rewrites_for  # noqa: E402
from tuner.rewrite.parsed import ParsedProgram  # noqa: E402
from tuner.targets import parse_target  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("program", type=Path)
    parser.add_argument("--target", default="cuda")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    rewrites = [r for r in rewrites_for(parse_target(args.target)) if r not in EXTERNAL]
    size = args.program.stat().st_size / 1e6
    times: dict[str, list[float]] = {"written": [], "copies": []}
    with tempfile.TemporaryDirectory() as scratch:
        for _ in range(args.rounds):
            start = time.perf_counter()
            written = [bool(rewrite_program(args.program, r, Path(scratch) / f"{r.name}.mlir")) for r in rewrites]
            times["written"].append(time.perf_counter() - start)
            start = time.perf_counter()
            parsed = ParsedProgram(args.program)
            copies = [bool(parsed.changes(r)) for r in rewrites]
            times["copies"].append(time.perf_counter() - start)
            del parsed
            assert written == copies, (written, copies)
    applying = [r.name for r, found in zip(rewrites, copies) if found]
    print(f"{args.program} ({size:.0f} MB), {len(rewrites)} rewrites of {args.target}, {len(applying)} apply "
          f"({', '.join(applying)})")
    for name, label in (("written", "each parsed, applied and written"), ("copies", "parsed once, applied to copies")):
        print(f"  {label}: {statistics.median(times[name]):.1f} s (median of {args.rounds})")


if __name__ == "__main__":
    main()
