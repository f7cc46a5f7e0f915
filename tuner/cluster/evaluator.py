"""The Ray evaluator: candidates compiled by tasks on the cluster's compile nodes, timed by one
benchmark worker per device, every result stored by the driver the moment it arrives.

The driver keeps everything that decides a figure (the Measurer: numerics against the baseline,
the baseline's timeline per device, re-timing, the confirmation rounds; the ranking; the store),
so a cluster run gives the same statuses and winner as a local one. The workers only run what
they are sent (`RayRunner`). A worker that dies is a lost device: what it held is measured by the
others (tuner.evaluation.devices.DevicePool); a compile task whose worker dies is retried by Ray.
The workers and RayRunner live in tuner.cluster.workers (runtime-only).
"""

from __future__ import annotations

import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import Optional, Sequence, cast

from iree.compiler import ir

from tuner.specs.candidates import Candidate
from tuner.cluster.compile_task import RemoteBuild, compile_on_node, localize
from tuner.cluster.connect import COMPILE_RESOURCE, compile_slots
from tuner.cluster.workers import RayRunner, cluster_devices
from tuner.build.compile import built_candidate, candidate_flags
from tuner.evaluation.evaluator import Overlapped
from tuner.core.built import Built, Progress
from tuner.evaluation.measure import Measurer, Recorder
from tuner.core.results import Status
from tuner.core.settings import EvalSettings
from tuner.store import ResultStore
from tuner.targets import Target
from tuner.discovery.workload import Workload


class RayEvaluator(Overlapped):
    """Compile tasks on the cluster feed its benchmark workers (one per device) as they land:
    Overlapped's schedule, with builds and devices on the cluster."""

    name = "ray"

    def __init__(self, input_path: Path, target: Target, workload: Workload, workdir: Path, store: ResultStore,
                 settings: EvalSettings = EvalSettings(), devices: Sequence[str] = (),
                 progress: Optional[Progress] = None, ctx: Optional[ir.Context] = None,
                 given_inputs: Optional[Path] = None, host_reference: Optional[Path] = None) -> None:
        runner = cluster_devices(settings, target.device, devices)
        self.ray = runner.ray
        compile_slots(self.ray)
        cpu = target.device.startswith("local")
        super().__init__(input_path, target, workload, workdir, store, settings, runner.devices, progress, ctx,
                         given_inputs, runner, host_reference)
        self.cluster: RayRunner = runner
        self.program = runner.file(input_path.resolve())
        self.pin = settings.benchmark_cores if cpu else None
        self._task = self.ray.remote(compile_on_node).options(num_cpus=0, resources={COMPILE_RESOURCE: 1},
                                                               num_returns=3, max_retries=3)

    def _submit(self, c: Candidate) -> tuple:
        """Start `c`'s compile task; its spec is written here too (best_spec.mlir if it wins)."""
        cdir = self.workdir / f"{c.id:04d}"
        shutil.rmtree(cdir, ignore_errors=True)  # an earlier local build there is not this one
        cdir.mkdir(parents=True)
        (cdir / "spec.mlir").write_text(c.spec)
        entry = self.workload.entry if self.workload.dispatch_benchmark else None
        return tuple(self._task.remote(c, self.program, self.target, self.settings.compile_timeout_s, entry, self.pin))

    def _landed(self, c: Candidate, refs: tuple) -> Built:
        """The finished compile task's build, as if made in this run's directory; a task that
        failed on the cluster is a failed compile (a failing candidate is data)."""
        cdir = self.workdir / f"{c.id:04d}"
        meta, module, dispatch = refs
        try:
            remote = cast(RemoteBuild, self.ray.get(meta))
        except self.ray.exceptions.RayError as e:
            failed = c.result(candidate_flags(c, self.target, cdir / "spec.mlir"), Status.COMPILE_FAILED,
                              error=f"compile task failed on the cluster: {str(e).splitlines()[0]}")
            built = built_candidate(c, self.target, cdir, failed, None)
        else:
            built = localize(remote, cdir, self.input_path)
            if built.vmfb is not None and built.result.ok:
                self.cluster.register(built.vmfb, module)
            if built.dispatch_vmfb is not None and built.dispatch_vmfb != built.vmfb and built.result.ok:
                self.cluster.register(built.dispatch_vmfb, dispatch)
        self.built[built.result.key] = built
        return built

    def _build(self, c: Candidate) -> Built:
        return self._landed(c, self._submit(c))

    def _run(self, todo: list[Candidate], measurer: Measurer, recorder: Recorder) -> None:
        submitted: dict[int, tuple] = {}

        def start(c: Candidate) -> Future:
            submitted[c.id] = self._submit(c)
            return submitted[c.id][0].future()

        try:
            self._feed(todo, measurer, recorder, start, lambda c, _: self._landed(c, submitted[c.id]))
        finally:
            for refs in submitted.values():
                try:
                    self.ray.cancel(refs[0])
                except Exception:  # finished already
                    pass
