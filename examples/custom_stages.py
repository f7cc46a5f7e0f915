"""A client that defines its own stages of model tuning with the tuner's stage interface.

It differs from the built-in `tune-model` in two ways a client may want:
- its own model benchmark command: the model is timed by wall clock around `iree-run-module`
  runs (what an application that calls the model once per request sees), not by
  `iree-benchmark-module`;
- its own stage list: no model-wide flags, only the single largest dispatch tuned, and a stage
  of its own that writes a one-line summary file for a dashboard.

    python examples/custom_stages.py MODEL.mlir --output custom-tuning [--budget 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from tuner.evaluation.runtime_tools import ModuleRun, Timing
from tuner.core.settings import EvalSettings, Listeners, RunOptions
from tuner.stages import DispatchStage, MergeStage, ModelOptions, ModelState, StageEnv, tune_model
from tuner.tools import find_tool
from tuner.core.running import input_flag


@dataclass
class WallClockBenchmark:
    """Times `runs` separate `iree-run-module` calls of the entry by wall clock, `repetitions`
    times; each repetition's figure is the median call."""

    runs: int = 3

    def __call__(self, vmfb: Path, settings: ModuleRun) -> Optional[Timing]:
        cmd = [find_tool("iree-run-module"), f"--module={vmfb}", f"--device={settings.device}",
               f"--function={settings.entry}", *(f"--input={input_flag(p)}" for p in settings.inputs),
               *(["--output="] * settings.outputs)]
        medians = []
        for _ in range(max(1, settings.repetitions)):
            calls = []
            for _ in range(self.runs):
                start = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, timeout=settings.timeout_s)
                if done.returncode != 0:
                    return None
                calls.append((time.perf_counter() - start) * 1e3)
            medians.append(statistics.median(calls))
        return Timing(tuple(medians))


@dataclass
class SummaryStage:
    """A stage of this client's own: writes DIR/summary.json from what the others found."""

    name: str = "summary"

    def run(self, state: ModelState, env: StageEnv) -> ModelState:
        summary = {"model": str(env.model), "kept": [p.dispatch.name for p in state.kept],
                   "speedup": state.figure.speedup if state.figure else None, "verdict": state.verdict}
        (env.output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
        return state.note(f"summary written to {env.output_dir / 'summary.json'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--output", type=Path, default=Path("custom-tuning"))
    parser.add_argument("--budget", type=int, default=8, help="evaluations of the largest dispatch")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3, help="iree-run-module calls per timing repetition")
    args = parser.parse_args()
    tuning = tune_model(args.model, "llvm-cpu", args.output,
                        run=RunOptions(EvalSettings(repetitions=2, min_time_s=0.05, confirm_rounds=2, confirm_top=2)),
                        model=ModelOptions(rounds=args.rounds, timer=WallClockBenchmark(args.runs)), listen=Listeners(say=print),
                        stages=[DispatchStage(args.budget, top=1), MergeStage(), SummaryStage()])
    for o in tuning.state.dispatches:
        print(f"{o.name}: {o.status}")
    print(tuning.state.verdict)


if __name__ == "__main__":
    main()
