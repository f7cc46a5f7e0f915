"""The result store: every result appended to a JSON-lines file as it arrives, so a killed run resumes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tuner.results import Result


class ResultStore:
    """Append-only; the last record for a key wins. A torn last line (a kill mid-write) is skipped."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> dict[str, Result]:
        found: dict[str, Result] = {}
        if not self.path.exists():
            return found
        for line in self.path.read_text().splitlines():
            try:
                result = Result.from_json(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                continue
            found[result.key] = result
        return found

    def append(self, result: Result) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps(result.to_json()) + "\n")
            f.flush()
            os.fsync(f.fileno())
