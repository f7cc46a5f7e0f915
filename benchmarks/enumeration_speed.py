"""How fast the valid space of a dispatch's problem is enumerated: the whole space by
constraints.fast_enumerate (each constraint compiled once, backtracking over the knob domains)
against the incremental solver enumeration (one Z3 call per solution, preference tiers).

    python benchmarks/enumeration_speed.py [--solver-limit 200]

One core (a single Python thread). Prints a Markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from iree.compiler import ir  # noqa: E402

from constraints import enumerate_solutions  # noqa: E402
from constraints.fast_enumerate import enumerate_space  # noqa: E402
from pipelines import pipeline_for  # noqa: E402
from tuner.discovery.program import discover  # noqa: E402
from tuner.targets import parse_target  # noqa: E402

CASES = [("matmul_4096x4096x4096_f16f16f32.mlir", "cuda:sm_80", None),
         ("matmul_4096x4096x4096_f16f16f32.mlir", "rocm:gfx942", None),
         ("matmul_4096x4096x4096_f16f16f32.mlir", "rocm:gfx942", "llvmgpu_vector_distribute"),
         ("matmul_1024x1024x1024_f32.mlir", "llvm-cpu", None),
         ("conv_2d_nhwc_hwcf_4x58x58x64_3x3x64_f32.mlir", "llvm-cpu", None),
         ("attention_8x1024x1024x64_f16.mlir", "cuda:sm_80", None)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--solver-limit", type=int, default=200, help="Solutions the solver enumeration is timed on.")
    args = parser.parse_args()
    print("| dispatch | target | pipeline | valid configs | whole space, fast | configs/s | solver, first "
          f"{args.solver_limit} | configs/s |")
    print("|---|---|---|---|---|---|---|---|")
    for sample, target, name in CASES:
        dispatch = discover(REPO / "sample_dispatches" / sample, parse_target(target), ir.Context())[0]
        pipeline = pipeline_for(dispatch, name)
        problem = pipeline.build_problem(dispatch)
        start = time.perf_counter()
        n = sum(1 for _ in enumerate_space(problem))
        fast = time.perf_counter() - start
        start = time.perf_counter()
        m = sum(1 for _ in enumerate_solutions(problem, args.solver_limit))
        slow = time.perf_counter() - start
        print(f"| {sample[:-5]} | {target} | {pipeline.name} | {n} | {fast:.3f} s | {n / fast:,.0f} | "
              f"{slow:.1f} s | {m / slow:,.0f} |")


if __name__ == "__main__":
    main()
