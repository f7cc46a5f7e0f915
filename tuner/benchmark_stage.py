"""The benchmark stage of the two-machine flow: measure a compiled manifest on this machine's
devices, rank, and write the outputs. Runtime-only: it runs where just iree-base-runtime and
numpy are installed."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from tuner.devices import distinct_devices, measure_built
from tuner.manifest import Manifest
from tuner.measure import Measurer, Progress, Recorder, confirm
from tuner.ranking import Ranking, rank
from tuner.report import write_outputs
from tuner.results import EvaluationStats, Result
from tuner.runner import RunSettings
from tuner.settings import EvalSettings
from tuner.store import ResultStore
from tuner.tools import kill_running_tools
from tuner.versions import runtime_version

STORE = "results.sqlite"


@dataclass(frozen=True)
class Measured:
    results: tuple[Result, ...]
    ranking: Ranking
    stats: EvaluationStats


def benchmark_dir(root: Path, devices: Sequence[str] = (), settings: EvalSettings = EvalSettings(),
                  progress: Optional[Progress] = None, store_path: Optional[Path] = None) -> Measured:
    """Measure every candidate of the manifest in `root` on `devices` (default: the manifest's
    device), reusing results stored for this runtime (never the baseline's), then write
    best_spec.mlir, best_flags.txt and results.json."""
    manifest = Manifest.read(root)
    devices = distinct_devices(devices, manifest.device)
    with ResultStore(store_path or root / STORE, manifest.meta.get("compiler", "unknown"), runtime_version()) as store:
        stored = store.reusable([b.result.key for b in manifest.built if not b.result.is_baseline])
        # Measured before: in this store, or on the compile machine (the manifest carries its result).
        done = [stored.get(b.result.key, b.result) for b in manifest.built if b.result.key in stored or b.reused]
        done_keys = {r.key for r in done}
        ids = {b.result.key: b.result.candidate_id for b in manifest.built}
        reused = [replace(r, candidate_id=ids[r.key]) for r in done]
        todo = [b for b in manifest.built if b.result.key not in done_keys]
        run_settings = RunSettings(device=devices[0], entry=manifest.workload.entry, inputs=manifest.inputs(root),
                                   repetitions=settings.repetitions, min_time_s=settings.min_time_s,
                                   timeout_s=settings.run_timeout_s)
        recorder = Recorder(store, len(todo), progress)
        start = time.perf_counter()
        try:
            measure_built(todo, devices, Measurer(run_settings), recorder)
        except BaseException:
            kill_running_tools()  # no benchmark left running behind an interrupted run
            raise
        wall = time.perf_counter() - start
        start = time.perf_counter()
        runnable = {b.result.key: b for b in todo if b.vmfb is not None}
        results = sorted(confirm(recorder.results + reused, runnable, run_settings, settings, store, progress),
                         key=lambda r: r.candidate_id)
        stats = EvaluationStats.of("benchmark-only", recorder.results, len(reused), wall,
                                   time.perf_counter() - start, devices)
    ranking = rank(results)
    best = next((b for b in manifest.built if ranking.best and b.result.key == ranking.best.key), None)
    best_spec_path = root / "best_spec.mlir"
    write_outputs(
        root, ranking, results,
        best_spec=best.spec.read_text() if best and best.spec else None,
        best_flags=best.rebuild_flags(best_spec_path) if best else [],
        meta={**manifest.meta, "devices": list(devices), "evaluation": stats.to_json()},
    )
    return Measured(tuple(results), ranking, stats)

