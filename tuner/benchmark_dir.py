"""`iree-tuner benchmark DIR`, the run step of the two-machine flow: measure a compiled manifest on this machine's
devices, rank, and write the outputs. Runtime-only: it runs where just iree-base-runtime and
numpy are installed."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from tuner.evaluation.devices import distinct_devices, measure_built
from tuner.errors import InputError
from tuner.build.manifest import MANIFEST, Manifest
from tuner.core.built import Built
from tuner.evaluation.device_calls import timing_apart
from tuner.evaluation.in_model import IN_MODEL, times_in_model
from tuner.evaluation.measure import LOCAL, Measurer, ModuleRunner, Progress, Recorder
from tuner.evaluation.passes import PassSetup, measure_pass
from tuner.ranking import Ranking, rank
from tuner.report.outputs import read_families, write_outputs
from tuner.core.results import EvaluationStats, Result
from tuner.input.parameters import on_this_machine
from tuner.run_dir import RunDirectory
from tuner.core.running import DISPATCH_BATCH
from tuner.core.settings import EvalSettings
from tuner.store import STORE, ResultStore
from tuner.versions import runtime_version



@dataclass(frozen=True)
class Measured:
    results: tuple[Result, ...]
    ranking: Ranking
    stats: EvaluationStats
    families: tuple[str, ...] = ()  # as the compile stage recorded them (Pipeline.families)


def benchmark_dir(root: Path, devices: Sequence[str] = (), settings: EvalSettings = EvalSettings(),
                  progress: Optional[Progress] = None, store_path: Optional[Path] = None,
                  strategy: str = "auto", parameters: Sequence[str] = ()) -> Measured:
    """Measure every candidate of the manifest in `root` on `devices` (default: the manifest's
    device; with `strategy` "ray", the Ray cluster's benchmark workers, the modules sent through
    its object store), reusing results stored for this runtime, device and timing (never the
    baseline's), then write best_spec.mlir, best_flags.txt and results.json. The model reads the
    external parameters the manifest records, or `parameters` (SCOPE=/absolute/FILE, parsed) in
    place of those of the same scope: the files as they lie on this machine."""
    with RunDirectory(root), timing_apart(devices):  # one run at a time; several GPUs: a process each
        return _benchmark_dir(root, devices, settings, progress, store_path, strategy, tuple(parameters))


def in_model_here(built: Sequence[Built], strategy: str, device: str, gpu_timing: str) -> bool:
    """Whether this manifest's candidates are timed by their kernels inside the model here: where
    they were compiled for that alone (`--gpu-timing model`), always (an error where CUPTI does not
    load); where their dispatch benchmarks were built too (`auto`), where `gpu_timing` and this
    machine allow (CUPTI loads, not a Ray cluster), else alone."""
    if not any(b.kernels for b in built):
        return False
    if not any(b.dispatch_vmfb is not None for b in built):
        return True
    return strategy != "ray" and times_in_model(gpu_timing, device)


@dataclass(frozen=True)
class ManifestBatch:
    """A manifest's candidates as the passes see them (tuner.evaluation.passes.Batch): the
    first pass times `todo` over `devices`; what can run is what the compile machine built; a
    stored result has no module here to build again."""

    todo: tuple[Built, ...]
    devices: tuple[str, ...]
    built: tuple[Built, ...]

    def first_pass(self, measurer: Measurer, recorder: Recorder) -> None:
        measure_built(list(self.todo), self.devices, measurer, recorder)

    def runnable(self) -> dict[str, Built]:
        return {b.result.key: b for b in self.built if b.vmfb is not None and b.result.ok}

    def rebuild(self, chosen: list[Result]) -> dict[str, Built]:
        return {}


def _runner(strategy: str, device: str, devices: Sequence[str], settings: EvalSettings, in_model: bool = False
            ) -> tuple[ModuleRunner, tuple[str, ...]]:
    """Where the manifest is timed: this machine's devices (by the candidates' kernels inside
    their model, `in_model`: see in_model_here), or the cluster's workers."""
    if in_model:
        if strategy == "ray":
            raise InputError("this manifest is timed inside the model (compiled with --gpu-timing model), which a "
                             "Ray cluster's workers do not do; compile it again without --gpu-timing model")
        chosen = distinct_devices(devices, device)
        times_in_model("model", chosen[0])  # one clear line where CUPTI does not load here
        return IN_MODEL, chosen
    if strategy != "ray":
        return LOCAL, distinct_devices(devices, device)
    from tuner.cluster.workers import cluster_devices

    runner = cluster_devices(settings, device, devices)
    return runner, runner.devices


def _benchmark_dir(root: Path, devices: Sequence[str], settings: EvalSettings, progress: Optional[Progress],
                   store_path: Optional[Path], strategy: str, parameters: tuple[str, ...]) -> Measured:
    manifest = Manifest.read(root)
    try:
        families = read_families(manifest.meta.get("families"))
    except ValueError as e:
        raise InputError(f"{root / MANIFEST}: {e}") from None
    if parameters or manifest.workload.parameters:
        here = on_this_machine(manifest.workload.parameters, parameters, f"{root / MANIFEST}'s model")
        manifest = replace(manifest, workload=replace(manifest.workload, parameters=here),
                           meta={**manifest.meta, "parameters": list(here)})
    owner = RunDirectory.owner(root)
    if owner and manifest.meta.get("input_digest") and owner.get("input_digest") != manifest.meta["input_digest"]:
        raise InputError(f"{root / MANIFEST} is of another input than the run this directory holds "
                         f"({owner.get('input', '?')}); compile again with `iree-tuner tune INPUT --compile-only "
                         f"--output {root}`")
    baseline = next((b for b in manifest.built if b.result.is_baseline), None)
    if baseline is None:
        raise InputError(f"{root / MANIFEST}: no baseline candidate in it")
    in_model = in_model_here(manifest.built, strategy, (devices or (manifest.device,))[0], settings.gpu_timing)
    if not in_model:  # timed alone: each candidate's dispatch benchmark, where it has one
        manifest = replace(manifest, built=tuple(replace(b, kernels=()) if b.dispatch_vmfb is not None else b
                                                 for b in manifest.built))
    runner, devices = _runner(strategy, manifest.device, devices, settings, in_model)
    conditions = (runner.identity(devices[0]),
                  runner.timing_identity(devices[0], baseline.dispatch_benchmark is not None, DISPATCH_BATCH))
    with ResultStore(store_path or root / STORE, manifest.meta.get("compiler", "unknown"), runtime_version()) as store:
        stored = store.reusable([b.result.key for b in manifest.built if not b.result.is_baseline], *conditions)
        ids = {b.result.key: b.result.candidate_id for b in manifest.built}
        # Measured before in this store, or failed to build on the compile machine: not timed again.
        reused = [replace(stored.get(b.result.key, b.result), candidate_id=ids[b.result.key]) for b in manifest.built
                  if b.result.key in stored or b.reused]
        done_keys = {r.key for r in reused}
        todo = [b for b in manifest.built if b.result.key not in done_keys]
        module_run = settings.module_run(devices[0], manifest.workload, manifest.inputs(root))
        results, stats = measure_pass(
            "benchmark-only", len(todo), reused, ManifestBatch(tuple(todo), tuple(devices), manifest.built),
            PassSetup(Measurer(module_run, settings.baseline_every, runner), settings, store, devices, progress))
    ranking = rank(results)
    chosen = next((b for b in manifest.built if ranking.best and b.result.key == ranking.best.key), baseline)
    best_spec_path = root / "best_spec.mlir"
    write_outputs(
        root, ranking, results,
        spec=chosen.spec.read_text() if chosen.spec else "",
        flags=chosen.rebuild_flags(best_spec_path),
        meta={**manifest.meta, "devices": list(devices), "evaluation": stats.to_json()},
    )
    return Measured(tuple(results), ranking, stats, families)
