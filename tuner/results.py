"""Scored results: what happened to each candidate, as plain data that survives a restart."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any, Optional


class Status(str, enum.Enum):
    OK = "ok"
    COMPILE_FAILED = "compile_failed"
    COMPILE_TIMEOUT = "compile_timeout"
    CONFIG_NOT_APPLIED = "config_not_applied"
    RUN_FAILED = "run_failed"
    RUN_TIMEOUT = "run_timeout"
    WRONG_NUMERICS = "wrong_numerics"
    # Compiled to the very executable another candidate did: measured once, under that one.
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class Result:
    """One candidate's outcome. A failure is data: a status and an error, no time."""

    candidate_id: int
    key: str
    label: str
    is_baseline: bool
    knobs: dict[str, Any]
    flags: list[str]
    status: Status
    times_ms: list[float] = field(default_factory=list)
    median_ms: Optional[float] = None
    spread_pct: Optional[float] = None
    relative_error: Optional[float] = None
    compile_s: Optional[float] = None
    binary_hash: str = ""  # sha256 of the compiled executables, to spot configs that change nothing
    error: str = ""
    stderr: str = ""
    command: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Result":
        data = dict(data)
        data["status"] = Status(data["status"])
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
