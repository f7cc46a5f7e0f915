"""The benchmark stage of the two-machine flow: measure a compiled manifest on this machine's
devices, rank, and write the outputs. Runtime-only: it runs where just iree-base-runtime and
numpy are installed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from tuner.devices import distinct_devices, measure_built
from tuner.manifest import Manifest
from tuner.measure import Measurer, Progress, measure_pass
from tuner.ranking import Ranking, rank
from tuner.report import write_outputs
from tuner.results import EvaluationStats, Result
from tuner.settings import EvalSettings
from tuner.store import ResultStore
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
        run_settings = settings.run_settings(devices[0], manifest.workload.entry, manifest.inputs(root))
        results, stats = measure_pass(
            "benchmark-only", len(todo), reused,
            lambda recorder: measure_built(todo, devices, Measurer(run_settings), recorder),
            lambda: {b.result.key: b for b in todo if b.vmfb is not None},
            run_settings, settings, store, devices, progress)
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

