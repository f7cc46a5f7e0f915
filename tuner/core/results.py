"""Scored results: what happened to each candidate, as plain data that survives a restart."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

from tuner.core.comparison import Paired


class Status(str, enum.Enum):
    OK = "ok"
    COMPILE_FAILED = "compile_failed"
    COMPILE_TIMEOUT = "compile_timeout"
    # The compile was killed by a signal (the out-of-memory killer's SIGKILL, a crash) or hit an
    # I/O or memory error (a full disk): not a fact about the config, tried again by later runs.
    COMPILE_INTERRUPTED = "compile_interrupted"
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
    key: str  # digest of what was compiled: dispatch (and its input), target, config, flags
    label: str
    is_baseline: bool
    knobs: dict[str, Any]
    flags: list[str]  # every iree-compile flag that built it
    status: Status
    times_ms: list[float] = field(default_factory=list)
    median_ms: Optional[float] = None
    spread_pct: Optional[float] = None
    relative_error: Optional[float] = None
    compile_s: Optional[float] = None
    benchmark_s: Optional[float] = None  # time the device spent on it (numerics run + timing)
    device: str = ""  # the runtime device that measured it
    # Under what conditions it was timed (part of the store's key: a time taken on another
    # device, or timed another way, is never reused): the device's identity (GPU name, CPU
    # model and ISA level) and what was timed (the whole function or the dispatch alone).
    device_id: str = ""
    timing: str = ""
    timed_at: Optional[float] = None  # wall-clock seconds when its first-pass timing ended
    # The first pass: against the baseline timing nearest to it on the same device.
    baseline_ms: Optional[float] = None
    first_pass_speedup: Optional[float] = None
    retimed: bool = False  # timed again because the baseline drifted while it was first timed
    # The confirmation: timed in interleaved rounds with the baseline, one ratio per round.
    rounds_ms: list[float] = field(default_factory=list)
    round_ratios: list[float] = field(default_factory=list)  # baseline / this, per round
    # Its rounds did not agree even after more of them (tuner.evaluation.passes.more_rounds): its
    # difference from the default is within the noise, so it cannot win.
    unsettled: bool = False
    # The winner only: baseline / this in fresh interleaved rounds timed after it was chosen. The
    # rounds that chose it are biased upward (the best of several noisy figures is the luckiest),
    # so its speedup is told from these alone.
    holdout_ratios: list[float] = field(default_factory=list)
    # The baseline only: how much slower it ran in the rounds than in the quieter part of the first
    # pass, when beyond comparison.load_threshold (the figures hold for the load of the rounds).
    load_change: Optional[float] = None
    binary_hash: str = ""  # sha256 of the compiled executables, to spot configs that change nothing
    error: str = ""
    stderr: str = ""
    command: list[str] = field(default_factory=list)
    # What the key stands for, readable: the store keeps them as columns of their own.
    dispatch: str = ""
    target: str = ""
    compilation_info: str = ""
    config_flags: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def paired(self) -> Paired:
        return Paired(tuple(self.round_ratios))

    @property
    def confirmed(self) -> bool:
        """Timed side by side with the baseline in this run's interleaved rounds."""
        return bool(self.round_ratios)

    @property
    def speedup(self) -> Optional[float]:
        """The median of the paired per-round ratios to the baseline (of the fresh rounds after
        it was chosen, where it has them); None if never confirmed."""
        if self.holdout_ratios:
            return Paired(tuple(self.holdout_ratios)).speedup
        return self.paired.speedup if self.confirmed else None

    @property
    def speedup_interval(self):
        """Where the median `speedup` is lies (comparison.Paired.interval), from the same rounds."""
        return Paired(tuple(self.speedup_ratios)).interval() if self.confirmed else None

    @property
    def speedup_ratios(self) -> list[float]:
        """The per-round ratios `speedup` is the median of (the fresh rounds where it has them)."""
        return list(self.holdout_ratios) if self.holdout_ratios else list(self.round_ratios)

    def unconfirmed(self) -> "Result":
        """This result as a later run reuses it: its first pass, none of the old run's rounds."""
        return replace(self, rounds_ms=[], round_ratios=[], unsettled=False, load_change=None, holdout_ratios=[])

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        if self.confirmed:
            data["speedup"] = self.speedup
            data["speedup_lower"] = self.paired.lower
            data["faster_rounds"] = sum(r > 1.0 for r in self.round_ratios)
            interval = self.speedup_interval
            data["speedup_interval"] = interval.to_json() if interval else None
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Result":
        """A result as `to_json` wrote it (results.json, a manifest, the store): ValueError where a
        field a person could have edited is not what this tuner writes (a time as a string)."""
        data = dict(data)
        data["status"] = Status(data["status"])
        if not _integer(data.get("candidate_id")):
            raise ValueError(f"candidate_id {data.get('candidate_id')!r} is not an integer")
        for name in _NUMBERS:
            if data.get(name) is not None and not _number(data[name]):
                raise ValueError(f"candidate {data['candidate_id']}: {name} {data[name]!r} is not a number")
        for name in _NUMBER_LISTS:
            values = data.get(name, [])
            if not isinstance(values, list) or not all(_number(v) for v in values):
                raise ValueError(f"candidate {data['candidate_id']}: {name} {values!r} is not a list of numbers")
        for name, kind in (("knobs", dict), ("flags", list), ("label", str), ("key", str)):
            if name in data and not isinstance(data[name], kind):
                raise ValueError(f"candidate {data['candidate_id']}: {name} {data[name]!r} is not a {kind.__name__}")
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


# The fields of a Result that hold a number (or None), and those that hold lists of numbers.
_NUMBERS = ("median_ms", "spread_pct", "relative_error", "compile_s", "benchmark_s", "timed_at", "baseline_ms",
            "first_pass_speedup", "load_change")
_NUMBER_LISTS = ("times_ms", "rounds_ms", "round_ratios", "holdout_ratios")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class EvaluationStats:
    """Where an evaluation's time went: wall time of the first pass over the batch (compile and
    benchmark) and of the confirmation round, and how long each device was busy measuring."""

    strategy: str
    candidates: int  # evaluated in this run (stored results reused are not counted)
    reused: int
    wall_s: float
    confirm_s: float
    compile_s: float  # summed over candidates (parallel compiles overlap)
    busy_s: dict[str, float]  # per device: time spent running and timing candidates
    # The baseline's drift during the first pass: each span where it changed beyond its noise
    # (comparison.Drift.to_json), and how many candidates were timed again because of it.
    drifts: list[dict] = field(default_factory=list)
    retimed: int = 0
    baseline_timings: int = 0  # times the baseline was timed in the first pass (every N candidates)
    baseline_ms: list = field(default_factory=list)  # each of them: (device, wall-clock time, median ms)
    # How much slower the baseline ran in the confirmation rounds than in the quieter part of the
    # first pass, when beyond comparison.load_threshold: the figures hold for a load that changed.
    load_change: Optional[float] = None
    # Devices that went away mid-run (a cluster's benchmark worker died), each with why: what
    # they held was measured on the others.
    lost_devices: list[str] = field(default_factory=list)
    # When the confirmation rounds were taken, where they are an earlier run's, reused (seconds
    # since the epoch); None where this run timed them.
    reused_confirmation: Optional[float] = None
    waited_for_quiet_s: float = 0.0  # the confirmation rounds waited this long for a load to pass

    def warnings(self) -> list[str]:
        """What a user must know before trusting the figures."""
        lost = [f"lost a benchmark device mid-run ({why}); its work was measured on the others"
                for why in self.lost_devices]
        if self.load_change is None:
            return lost
        return lost + [f"the baseline ran {100 * self.load_change:.0f}% slower in the confirmation rounds than in the quieter "
                f"part of the first pass, after waiting for the load to pass: the machine's load changed during the "
                f"run, and the speedups hold for the load of the rounds; run the same command again when the machine "
                f"is quiet (it reuses every result and confirms again)"]

    @property
    def idle_share(self) -> float:
        """The share of the first pass's wall time the benchmark devices sat idle (averaged)."""
        if not self.busy_s or self.wall_s <= 0:
            return 1.0
        return 1.0 - sum(self.busy_s.values()) / (len(self.busy_s) * self.wall_s)

    @classmethod
    def of(cls, strategy: str, measured: list[Result], reused: int, wall_s: float, confirm_s: float,
           devices: tuple[str, ...], **extra: Any) -> "EvaluationStats":
        """Stats of a pass that produced `measured` (results of this run) on `devices`."""
        return cls(strategy=strategy, candidates=len(measured), reused=reused, wall_s=wall_s, confirm_s=confirm_s,
                   compile_s=sum(r.compile_s or 0.0 for r in measured),
                   busy_s={d: sum(r.benchmark_s or 0.0 for r in measured if r.device == d) for d in devices},
                   **extra)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "idle_share": self.idle_share, "warnings": self.warnings()}

    def after(self, batches: list["EvaluationStats"], total: int) -> "EvaluationStats":
        """These stats (a search's last, confirming evaluation) with its earlier batches' first
        passes added: what the whole search evaluated, timed and saw drift. `total`: candidates
        in all (the baseline included); each call times the baseline once, and what no call
        timed was reused from the store."""
        if not batches:
            return self
        devices = {d for s in (*batches, self) for d in s.busy_s}
        timed = sum(s.candidates - 1 for s in (*batches, self))  # besides the baseline
        return replace(
            self, candidates=timed + 1, reused=max(0, total - 1 - timed),
            wall_s=self.wall_s + sum(s.wall_s for s in batches),
            compile_s=self.compile_s + sum(s.compile_s for s in batches),
            busy_s={d: sum(s.busy_s.get(d, 0.0) for s in (*batches, self)) for d in devices},
            drifts=[d for s in (*batches, self) for d in s.drifts], retimed=sum(s.retimed for s in (*batches, self)),
            baseline_timings=sum(s.baseline_timings for s in (*batches, self)),
            baseline_ms=[b for s in (*batches, self) for b in s.baseline_ms],
            lost_devices=[d for s in (*batches, self) for d in s.lost_devices])
