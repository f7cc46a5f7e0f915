"""A compiled candidate ready to measure (`Built`): the build step's product, which the run step
times and a manifest carries from the machine that compiled it to the one that measures it; the
progress callback both steps report through."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from tuner.core.results import Result
from tuner.core.running import DispatchBenchmark
from tuner.errors import InputError

# phase ("compile", "benchmark", "confirm"), done, total
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Built:
    """A compiled (or failed) candidate, ready to measure: plain data that can be written into a
    manifest on one machine and measured on another."""

    result: Result  # status so far: OK means it compiled and its config was read back
    vmfb: Optional[Path]
    out_type: str  # element type of the result, for the numerics tolerance
    spec: Optional[Path]  # the candidate's tuning spec file (an empty spec for flag-only configs)
    # The flags that pass the spec to iree-compile ("{spec}" standing for its path); none: no spec.
    spec_flags: tuple[str, ...]
    base_flags: tuple[str, ...]  # every other flag that builds it
    # Where the target times dispatches alone (GPUs): the dispatch benchmark module to time.
    dispatch_vmfb: Optional[Path] = None
    dispatch_function: Optional[str] = None
    reused: bool = False  # `result` was measured before (in a result store): nothing to build or run
    # Where the target times the dispatch inside the model (tuner.evaluation.in_model): the kernels
    # (dispatch or executable names) whose time per call in `vmfb` is the candidate's time.
    kernels: tuple[str, ...] = ()

    @property
    def dispatch_benchmark(self) -> Optional[DispatchBenchmark]:
        if self.dispatch_vmfb is None or self.dispatch_function is None or self.kernels:
            return None
        return DispatchBenchmark(self.dispatch_vmfb, self.dispatch_function)

    def rebuild_flags(self, spec_path: Path) -> list[str]:
        """iree-compile flags that rebuild this candidate with its spec at `spec_path`."""
        # "{spec}" is the one placeholder (replaced as text: a manifest's flags are no format strings).
        extra = [f.replace("{spec}", str(spec_path.resolve())) for f in self.spec_flags] if self.spec else []
        return [*self.base_flags, *extra]

    def to_json(self, root: Path) -> dict:
        rel = lambda p: str(p.relative_to(root)) if p else None  # noqa: E731
        return {"result": self.result.to_json(), "vmfb": rel(self.vmfb), "out_type": self.out_type,
                "spec": rel(self.spec), "spec_flags": list(self.spec_flags), "base_flags": list(self.base_flags),
                "dispatch_vmfb": rel(self.dispatch_vmfb), "dispatch_function": self.dispatch_function,
                "reused": self.reused, "kernels": list(self.kernels)}

    @classmethod
    def from_json(cls, data: dict, root: Path) -> "Built":
        path = lambda p: inside(root, p) if p else None  # noqa: E731
        return cls(Result.from_json(data["result"]), path(data["vmfb"]), data["out_type"], path(data["spec"]),
                   _spec_flags(data), tuple(data["base_flags"]), path(data.get("dispatch_vmfb")),
                   data.get("dispatch_function"), data.get("reused", False), tuple(data.get("kernels", ())))


def _spec_flags(data: dict) -> tuple[str, ...]:
    """A manifest entry's spec flags (manifests written before there could be two name one)."""
    if "spec_flags" in data:
        return tuple(data["spec_flags"])
    return (f"{data['spec_flag']}={{spec}}",) if data.get("spec_flag") else ()


def inside(root: Path, relative: str) -> Path:
    """`root / relative` for a path a manifest names, which must stay inside `root`: the benchmark
    stage opens nothing outside the directory it was given."""
    if not isinstance(relative, str):
        raise InputError(f"{root}: a manifest path must be a string, not {relative!r}")
    path = Path(relative)
    if path.is_absolute() or ".." in path.parts:
        raise InputError(f"{root}: the manifest names {relative!r}, outside the directory; refusing to open it")
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise InputError(f"{root}: the manifest's {relative!r} leads outside the directory; refusing to open it")
    return root / path
