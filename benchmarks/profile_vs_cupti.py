"""Does the tuner's profile of a GPU model hold against an independent measurement?

    python benchmarks/profile_vs_cupti.py PROFILE.json KERNELS.json [--name default]

PROFILE.json: `iree-tuner dispatches MODEL --profile --json` (each dispatch's time per run, runs per
call). KERNELS.json: `benchmarks/gpu_model_kernels.py --json` on the same module (torch.profiler's
CUPTI session, nothing of the tuner's timing code), each dispatch's kernel time per call by
`dispatch_N`. Prints, per dispatch, both figures and their ratio, and how many are within 10%.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path)
    parser.add_argument("kernels", type=Path)
    parser.add_argument("--name", default="default", help="the module's name in KERNELS.json")
    args = parser.parse_args()
    listed = json.loads(args.profile.read_text())
    cupti = json.loads(args.kernels.read_text())[args.name]["dispatch_ms"]
    print(f"method: {listed['method']}")
    print("| dispatch (runs per call) | profile, ms per call | independent CUPTI, ms per call | ratio |")
    print("|---|---|---|---|")
    within, total, sums = 0, 0, [0.0, 0.0]
    for row in sorted(listed["dispatches"], key=lambda r: -(r["ms"] or 0) * r["runs"]):
        key = re.search(r"(dispatch_\d+)", row["name"]).group(1)
        mine = row["ms"] * row["runs"] if row["ms"] is not None else None
        theirs = cupti.get(key)
        if mine is None or theirs is None:
            print(f"| {row['name']} ({row['runs']}) | {row['untimed'] or '-'} | {theirs} | - |")
            continue
        total += 1
        within += abs(mine / theirs - 1) <= 0.10
        sums[0] += mine
        sums[1] += theirs
        print(f"| {key} {row['kind']} {row['shape']} ({row['runs']}) | {mine:.4f} | {theirs:.4f} | {mine / theirs:.3f} |")
    print(f"| **sum** | {sums[0]:.4f} | {sums[1]:.4f} | {sums[0] / sums[1]:.3f} |")
    print(f"{within} of {total} timed dispatches within 10% of the independent CUPTI time")


if __name__ == "__main__":
    main()
