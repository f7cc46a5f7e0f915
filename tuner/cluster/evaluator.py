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

from concurrent.futures import Future
from pathlib import Path
from typing import Callable, Optional, Sequence, cast

from iree.compiler import ir

from tuner.specs.candidates import Candidate
from tuner.cluster.compile_task import RemoteBuild, compile_on_node, localize
from tuner.cluster.connect import COMPILE_RESOURCE, compile_slots
from tuner.cluster.workers import RayRunner, cluster_devices
from tuner.build.compile import built_candidate, candidate_flags
from tuner.evaluation.evaluator import Overlapped
from tuner.core.built import Built, Progress
from tuner.core.results import Result, Status
from tuner.core.settings import EvalSettings
from tuner.store import ResultStore
from tuner.targets import Target
from tuner.discovery.workload import Workload
from tuner.run_dir import real_directory, remove_tree, write_file


class RayBuilder:
    """A Builder (tuner.build.builder) on the cluster: each candidate compiled by a task on a
    compile node (Ray retries it where its worker dies), its module put in the object store for
    the benchmark workers, its record taken as if built in this run's directory."""

    def __init__(self, runner: RayRunner, input_path: Path, target: Target, workdir: Path, timeout_s: float,
                 entry: Optional[str], pin) -> None:
        self.ray, self.cluster = runner.ray, runner
        self.input_path, self.target, self.workdir = input_path, target, workdir
        self.timeout_s, self.entry, self.pin = timeout_s, entry, pin
        self.source = runner.file(input_path.resolve())
        self._task = self.ray.remote(compile_on_node).options(num_cpus=0, resources={COMPILE_RESOURCE: 1},
                                                               num_returns=3, max_retries=3)
        self._submitted: dict[int, tuple] = {}

    def start(self, c: Candidate) -> Future:
        """Start `c`'s compile task; its spec is written here too (best_spec.mlir if it wins)."""
        cdir = self.workdir / f"{c.id:04d}"
        # An earlier local build there is not this one; nothing is removed or written through a
        # link planted in the run's directory (`DIR/candidates ->` elsewhere).
        remove_tree(cdir)
        real_directory(cdir)
        write_file(cdir / "spec.mlir", c.spec)
        refs = tuple(self._task.remote(c, self.source, self.target, self.timeout_s, self.entry, self.pin))
        self._submitted[c.id] = refs
        return refs[0].future()

    def land(self, c: Candidate, started: Future) -> Built:
        """The finished compile task's build, as if made in this run's directory; a task that
        failed on the cluster is a failed compile (a failing candidate is data)."""
        cdir = self.workdir / f"{c.id:04d}"
        meta, module, dispatch = self._submitted.pop(c.id)
        try:
            remote = cast(RemoteBuild, self.ray.get(meta))
        except self.ray.exceptions.RayError as e:
            failed = c.result(candidate_flags(c, self.target, cdir / "spec.mlir"), Status.COMPILE_FAILED,
                              error=f"compile task failed on the cluster: {str(e).splitlines()[0]}")
            return built_candidate(c, self.target, cdir, failed, None)
        built = localize(remote, cdir, self.input_path)
        if built.vmfb is not None and built.result.ok:
            self.cluster.register(built.vmfb, module)
        if built.dispatch_vmfb is not None and built.dispatch_vmfb != built.vmfb and built.result.ok:
            self.cluster.register(built.dispatch_vmfb, dispatch)
        return built

    def close(self) -> None:
        for refs in self._submitted.values():
            try:
                self.ray.cancel(refs[0])
            except Exception:  # finished already
                pass
        self._submitted.clear()


class RayEvaluator(Overlapped):
    """Overlapped's schedule with the cluster's builder (RayBuilder) and runner (its benchmark
    workers, RayRunner): compile tasks on the cluster feed its benchmark workers as they land."""

    name = "ray"

    def __init__(self, input_path: Path, target: Target, workload: Workload, workdir: Path, store: ResultStore,
                 settings: EvalSettings = EvalSettings(), devices: Sequence[str] = (),
                 progress: Optional[Progress] = None, ctx: Optional[ir.Context] = None,
                 given_inputs: Optional[Path] = None, host_reference: Optional[Path] = None,
                 on_result: Optional[Callable[[Result], None]] = None) -> None:
        runner = cluster_devices(settings, target.device, devices)
        compile_slots(runner.ray)
        pin = settings.benchmark_cores if target.device.startswith("local") else None
        entry = workload.entry if workload.dispatch_benchmark else None
        builder = RayBuilder(runner, input_path, target, workdir, settings.compile_timeout_s, entry, pin)
        super().__init__(input_path, target, workload, workdir, store, settings, runner.devices, progress, ctx,
                         given_inputs, runner, host_reference, builder, on_result)
        self.cluster: RayRunner = runner
