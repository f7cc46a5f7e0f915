"""The compile stage of the two-machine flow: every candidate built into DIR/candidates and
recorded in DIR's manifest as it lands, for `benchmark DIR` where the device is."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from tuner.build.builder import LocalBuilder, build_all
from tuner.build.compile import built_candidate, reused_result
from tuner.build.manifest import Manifest
from tuner.core.built import Built, Progress
from tuner.discovery.workload import Workload
from tuner.specs.candidates import Candidate
from tuner.store import BUILD_FAILURES, RETRIED, ResultStore

CANDIDATES = "candidates"  # DIR/candidates/NNNN: each candidate's build


def builder_for(input_path: Path, target, root: Path, ctx, settings, workload: Workload,
                in_model: bool = False, alone_too: bool = False) -> LocalBuilder:
    """The builder of a compile stage into `root`: a dispatch benchmark's function gets its
    benchmark built too, unless the device times candidates inside the model (`in_model`;
    with `alone_too` both are built, and the device side chooses)."""
    return LocalBuilder.of(input_path, target, root / CANDIDATES, ctx, settings,
                           entry=workload.entry if workload.dispatch_benchmark else None, in_model=in_model,
                           alone_too=alone_too)


def compile_to_manifest(candidates: list[Candidate], builder: LocalBuilder, workload: Workload, root: Path,
                        store: ResultStore, meta: Optional[dict] = None, progress: Optional[Progress] = None) -> Manifest:
    """Compile and verify every candidate, writing the manifest the benchmark stage reads again
    after each one (atomically), and each build failure to the store as it happens: a run killed
    at any point keeps every build it finished, and a rerun compiles only what is missing
    (candidates the manifest holds a module for, or the store a build failure; a compile that
    timed out or was interrupted is tried again). Candidates that compiled before are built again
    only if their module is gone: the benchmark stage confirms the most promising ones, stored
    results included. With `builder.in_model` the device side times each candidate by its kernels
    inside its whole-model module (`--gpu-timing model`), so no dispatch benchmark is dumped; with
    `builder.alone_too` as well (`--gpu-timing auto`) it is, and the device side times each
    candidate in the model where CUPTI loads there, else alone."""
    target = builder.target
    meta = {**(meta or {}), "compiler": store.compiler}
    previous = Manifest.read_existing(root)
    kept: dict[str, Built] = {}
    if previous is not None and previous.meta.get("input_digest") == meta.get("input_digest"):
        kept = {b.result.key: b for b in previous.built
                if not b.reused and ((not b.result.ok and b.result.status not in RETRIED)
                                     or (b.vmfb is not None and b.vmfb.is_file()))}
    failures = {k: r for k, r in store.reusable([c.key for c in candidates if not c.is_baseline]).items()
                if r.status in BUILD_FAILURES}
    entries: dict[int, Built] = {}
    for c in candidates:
        if c.key in kept:
            entries[c.id] = replace(kept[c.key], result=replace(kept[c.key].result, candidate_id=c.id, label=c.label))
        elif c.key in failures:
            result = reused_result(c, failures[c.key], target, root / CANDIDATES)
            entries[c.id] = replace(built_candidate(c, target, root / CANDIDATES / f"{c.id:04d}", result, None), reused=True)

    def write() -> Manifest:
        manifest = Manifest(workload, target.device, tuple(entries[i] for i in sorted(entries)), meta)
        manifest.write(root)
        return manifest

    def on_built(b: Built) -> None:
        entries[b.result.candidate_id] = b
        if b.result.status in BUILD_FAILURES:
            store.put(b.result)
        write()

    write()
    build_all(builder, [c for c in candidates if c.id not in entries], progress, on_built)
    return write()
