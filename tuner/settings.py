"""How candidates are compiled and timed: plain settings shared by both sides of the tuner."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tuner.runner import RunSettings


@dataclass(frozen=True)
class EvalSettings:
    compile_timeout_s: float = 300.0
    compile_workers: int = os.cpu_count() or 1
    repetitions: int = 5
    min_time_s: float = 0.1
    run_timeout_s: float = 120.0
    # Before naming a winner, the fastest few and the baseline are timed again in interleaved
    # rounds, so that one lucky or unlucky first measurement on a noisy machine does not decide.
    confirm_top: int = 4
    confirm_rounds: int = 3

    def run_settings(self, device: str, entry: str, inputs: tuple[Path, ...]) -> RunSettings:
        """How each candidate is run and timed on `device` under these settings."""
        return RunSettings(device=device, entry=entry, inputs=inputs, repetitions=self.repetitions,
                           min_time_s=self.min_time_s, timeout_s=self.run_timeout_s)
