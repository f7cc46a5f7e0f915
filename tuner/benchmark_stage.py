"""The benchmark stage: measure a compiled manifest, rank, and write the outputs. Runtime-only:
it runs where just iree-base-runtime and numpy are installed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from tuner.manifest import Manifest
from tuner.measure import Progress, measure_all
from tuner.ranking import Ranking, rank
from tuner.report import write_outputs
from tuner.results import Result
from tuner.runner import RunSettings
from tuner.settings import EvalSettings
from tuner.store import ResultStore

STORE = "results.jsonl"


@dataclass(frozen=True)
class Measured:
    results: tuple[Result, ...]
    ranking: Ranking


def benchmark_dir(root: Path, device: Optional[str] = None, settings: EvalSettings = EvalSettings(),
                  progress: Optional[Progress] = None) -> Measured:
    """Measure every candidate of the manifest in `root` (results already stored there are
    reused, except the baseline's), then write best_spec.mlir, best_flags.txt, results.json."""
    manifest = Manifest.read(root)
    store = ResultStore(root / STORE)
    stored = store.load()
    reuse = {b.result.key: stored[b.result.key] for b in manifest.built
             if not b.result.is_baseline and b.result.key in stored}
    todo = [b for b in manifest.built if b.result.key not in reuse]
    run_settings = RunSettings(device=device or manifest.device, entry=manifest.workload.entry,
                               inputs=manifest.inputs(root), repetitions=settings.repetitions,
                               min_time_s=settings.min_time_s, timeout_s=settings.run_timeout_s)
    measured = measure_all(todo, run_settings, settings, store, progress)
    ids = {b.result.key: b.result.candidate_id for b in manifest.built}
    reused = [replace(r, candidate_id=ids[r.key]) for r in reuse.values()]
    results = sorted(measured + reused, key=lambda r: r.candidate_id)
    ranking = rank(results)
    best = next((b for b in manifest.built if ranking.best and b.result.key == ranking.best.key), None)
    best_spec_path = root / "best_spec.mlir"
    write_outputs(
        root, ranking, results,
        best_spec=best.spec.read_text() if best and best.spec else None,
        best_flags=best.rebuild_flags(best_spec_path) if best else [],
        meta={**manifest.meta, "device": run_settings.device},
    )
    return Measured(tuple(results), ranking)

