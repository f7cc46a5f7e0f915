"""The compile task: build one candidate and verify its config took effect, on whichever node Ray
runs it (one with the `iree_compile` resource), in a temporary directory of that node. What comes
back is the verified `Built` (paths as the node had them) and the bytes of the module(s) to time,
as separate objects, so the modules go from the compile node to the benchmark worker through the
object store without passing through the driver."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from tuner.specs.candidates import Candidate
from tuner.cluster.worker import FileRef, compile_cores
from tuner.core.built import Built
from tuner.cluster.reaper import temp_dir
from tuner.targets import Target

_root: Optional[Path] = None
_sources: dict[str, Path] = {}
_ctx = None


@dataclass(frozen=True)
class RemoteBuild:
    """A candidate built on a cluster node: its Built as the node had it, and where."""

    built: Built
    directory: str  # the candidate's directory on that node
    source: str  # the program's file on that node


def _workdir() -> Path:
    global _root
    if _root is None:
        _root = temp_dir("compile")
    return _root


def _source(source: FileRef) -> Path:
    """The program's file on this node: written once per worker process from the object store."""
    import ray

    name, (obj,) = source
    if name not in _sources:
        path = _workdir() / "programs" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(ray.get(obj))
        _sources[name] = path
    return _sources[name]


def compile_on_node(c: Candidate, source: FileRef, target: Target, timeout_s: float,
                    benchmark_entry: Optional[str], pin_cores: Optional[int]
                    ) -> tuple[RemoteBuild, Optional[bytes], Optional[bytes]]:
    """Compile and verify `c` here; (the build, the module's bytes, the dispatch module's bytes).
    `pin_cores`: where a CPU benchmark worker times on this node, its core count (see
    tuner.cluster.worker.benchmark_cores); compiles keep off those cores. None: no pinning."""
    global _ctx
    from iree.compiler import ir

    from tuner.build.compile import compile_candidate, verify_build

    if pin_cores is not None:
        os.sched_setaffinity(0, compile_cores(pin_cores))
    if _ctx is None:
        _ctx = ir.Context()
    path = _source(source)
    workdir = _workdir() / "candidates" / c.key[:16]
    job = compile_candidate(c, path, target, workdir, timeout_s, benchmark_entry)
    try:
        built = verify_build(job, target, _ctx)
        module = built.vmfb.read_bytes() if built.vmfb and built.result.ok else None
        dispatch = built.dispatch_vmfb.read_bytes() \
            if built.dispatch_vmfb and built.dispatch_vmfb != built.vmfb and built.result.ok else None
    finally:
        shutil.rmtree(job.directory, ignore_errors=True)  # what matters travels back as bytes
    return RemoteBuild(built, str(job.directory), str(path)), module, dispatch


def localize(remote: RemoteBuild, directory: Path, source: Path) -> Built:
    """The build as if it had been made in the driver's `directory` from the program in `source`:
    paths and the flags and command that name them rewritten (what rebuilds it here, e.g.
    best_flags.txt)."""
    b = remote.built

    def here(text: str) -> str:
        return text.replace(remote.directory, str(directory)).replace(remote.source, str(source.resolve()))

    def moved(path: Optional[Path]) -> Optional[Path]:
        return directory / Path(path).relative_to(remote.directory) if path else None

    result = replace(b.result, flags=[here(f) for f in b.result.flags],
                     command=[here(a) for a in b.result.command] if b.result.command else b.result.command)
    return replace(b, result=result, vmfb=moved(b.vmfb), spec=moved(b.spec), dispatch_vmfb=moved(b.dispatch_vmfb),
                   base_flags=tuple(here(f) for f in b.base_flags))
