"""A runner that replays an earlier run's timings instead of running anything (KernelTuner's
simulation runner; issue 61's example of adding a runner: this class and one line in
tuner.evaluation.runners.RUNNERS).

Each candidate is "timed" at the repetitions its config (its key) was timed at in the store
given (`--runner replay:STORE`), whatever device that was; one the store holds as failed fails
again with the recorded error, and one it does not hold fails as not recorded. No module is run:
outputs are not compared (the recorded run compared them, and a wrong one is stored as failed).
Builds still happen (the read-back checks each config took effect), so a replay shows what the
search, the ranking and the confirmation decide from the same figures, on a machine without the
device: another search or budget against a recorded run, or a bug in a decision found again."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from tuner.core.built import Built
from tuner.core.running import ModuleRun, Timing
from tuner.store import recorded_results
from tuner.tools import ToolRun


class ReplayRunner:
    local = False  # nothing runs here: never timed inside a model

    def __init__(self, store: Path) -> None:
        self.store = Path(store)
        self.recorded = recorded_results(self.store)

    def identity(self, device: str) -> str:
        # the conditions its results are stored under: never mixed with a device's own
        return f"replay of {self.store.resolve()}"

    def timing_identity(self, device: str, dispatch_only: bool, batch: int) -> str:
        return "replayed"

    def benchmark(self, b: Built, settings: ModuleRun) -> tuple[Optional[Timing], ToolRun]:
        recorded = self.recorded.get(b.result.key)
        if recorded is None:
            return None, self._run(1, f"error: no result of this config in {self.store}")
        if not recorded.ok or not recorded.times_ms:
            return None, self._run(1, f"error: as recorded in {self.store}: {recorded.status.value}"
                                      f"{': ' + recorded.error if recorded.error else ''}")
        return Timing(tuple(recorded.times_ms)), self._run(0)

    def output(self, b: Built, settings: ModuleRun) -> tuple[ToolRun, Optional[np.ndarray]]:
        return self._run(0), None

    def _run(self, returncode: int, stderr: str = "") -> ToolRun:
        return ToolRun(("replay", str(self.store)), returncode, "", stderr, 0.0)
