"""How candidates are compiled and timed: plain settings shared by both sides of the tuner."""

from __future__ import annotations

import os
from dataclasses import dataclass


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
