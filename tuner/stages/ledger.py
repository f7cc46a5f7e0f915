"""Where a tune-model run's time goes: seconds and counts by kind of work (whole-model builds,
model timings with their numerics, the host's reference result, the searches of dispatches, the
discovery of what a choice forms), each stage's part said when it ends and kept in results.json.
Issue 62 asks for the time per stage and the number of whole-model builds and timings; on the
H200 the flag stage's 139-308 s (its share 92-128 s) could not be split from the run's output.

A kind's seconds are its own: work of another kind inside it (the host reference made inside a
comparison) is counted there and not twice. Threads (a Ray cluster's dispatches tuned at once)
each keep their own nesting; their seconds add up, so a stage's kinds can sum past its wall time."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

# The kinds of work, in the order they are said.
BUILDS, TIMINGS, HOST, SEARCHES, DISCOVERY = "builds", "timings", "host reference", "searches", "discovery"
REWRITES = "rewrites"  # a program rewritten (tuner.rewrite), its external kernels compiled by Triton with it
KINDS = (BUILDS, TIMINGS, HOST, SEARCHES, DISCOVERY, REWRITES)
# How each is said: (count, seconds) -> words.
_WORDS = {BUILDS: "{n} whole-model build(s) {s:.0f} s", TIMINGS: "{n} model timing(s) {s:.0f} s",
          HOST: "host reference {s:.0f} s", SEARCHES: "{n} dispatch search(es) {s:.0f} s",
          DISCOVERY: "{n} discovery {s:.0f} s", REWRITES: "{n} program rewrite(s) {s:.0f} s"}

Part = dict[str, tuple[int, float]]  # kind -> (count, seconds)


@dataclass
class Ledger:
    """Seconds and counts by kind of work over a run (`timed`), and a stage's part of them
    (`mark`, then `since`)."""

    seconds: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _local: threading.local = field(default_factory=threading.local, repr=False)

    @property
    def _inner(self) -> list[float]:
        """This thread's open `timed` blocks, each with the seconds of those inside it."""
        if not hasattr(self._local, "inner"):
            self._local.inner = []
        return self._local.inner

    @contextmanager
    def timed(self, kind: str, count: int = 1) -> Iterator[None]:
        """Count `count` of `kind` and the seconds of the block, less any timed inside it."""
        start = time.monotonic()
        self._inner.append(0.0)
        try:
            yield
        finally:
            inner, elapsed = self._inner.pop(), time.monotonic() - start
            with self._lock:
                self.seconds[kind] = self.seconds.get(kind, 0.0) + elapsed - inner
                self.counts[kind] = self.counts.get(kind, 0) + count
            if self._inner:
                self._inner[-1] += elapsed

    def mark(self) -> tuple[dict[str, float], dict[str, int]]:
        with self._lock:
            return dict(self.seconds), dict(self.counts)

    def since(self, mark: tuple[dict[str, float], dict[str, int]]) -> Part:
        """What was counted since `mark`, by kind (the kinds with none left out)."""
        seconds, counts = mark
        return {k: (self.counts[k] - counts.get(k, 0), round(self.seconds[k] - seconds.get(k, 0.0), 1))
                for k in KINDS if self.counts.get(k, 0) > counts.get(k, 0)}


def part_text(part: Part, total_s: float) -> str:
    """A stage's part in words, with what no kind holds ("the rest"): empty where nothing was counted."""
    if not part:
        return ""
    words = [_WORDS[k].format(n=n, s=s) for k, (n, s) in part.items()]
    rest = total_s - sum(s for _, s in part.values())
    return "; ".join([*words, f"the rest {max(rest, 0.0):.0f} s"])
