"""What discovery found in a program (tuner.discovery.program reads it): its dispatches, those it
skipped and why, and the function that runs each."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from pipelines import Dispatch
from tuner.discovery.other_kinds import OtherKind
from tuner.discovery.workload import Workload
from tuner.errors import InputError


@dataclass(frozen=True)
class Program:
    """What discovery found in a program: its root ops as dispatches (largest first), the ones
    that cannot be tuned with why, and for each dispatch the public function that runs it (a
    Workload) or why that function cannot be run."""

    dispatches: tuple[Dispatch, ...]
    skipped: tuple[tuple[str, str], ...]  # (dispatch name, why)
    entries: dict[str, "Workload | str"]
    runs: dict[str, int]  # dispatch name -> how many times one call of its entry function runs it
    # The dispatches no pipeline reads, by kind (softmax, normalization, ...) and shape.
    other_kinds: dict[str, OtherKind] = field(default_factory=dict)
    # An ONNX model's symbolic input dimensions fixed at import ("x[0]: N -> 2";
    # tuner.input.onnx_dims): the program takes only those sizes.
    fixed_dims: tuple[str, ...] = ()
    # What the import's repair changed (tuner.input.models.repaired_import), each said by the run.
    repaired: tuple[str, ...] = ()

    @property
    def in_place_copies(self) -> tuple[str, ...]:
        """The dispatches that write into a slice of a buffer they do not return (OtherKind.in_place)."""
        return tuple(name for name, other in self.other_kinds.items() if other.in_place)

    def fixed_text(self) -> str:
        """What the run says of `fixed_dims` ("" where none was fixed)."""
        return (f"symbolic dimensions fixed at import (--dynamic-size): {', '.join(self.fixed_dims)}; the tuned "
                "program takes only these sizes") if self.fixed_dims else ""

    def repaired_text(self) -> str:
        """What the run says of `repaired` ("" where the import needed no repair)."""
        return (f"repaired at import (IREE 3.13 does not compile these as exported; the result is the same): "
                f"{'; '.join(self.repaired)}") if self.repaired else ""

    def for_running(self, parameters: tuple[str, ...], dynamic_size: Optional[int] = None) -> "Program":
        """The program with every entry's workload reading the model's external parameters,
        and with `dynamic_size` (else the default) for each dynamic dimension of its arguments."""
        entries = {name: replace(w.sized(dynamic_size) if dynamic_size else w, parameters=parameters)
                   if isinstance(w, Workload) else w for name, w in self.entries.items()}
        return replace(self, entries=entries)

    def workload(self, dispatch: Dispatch, input_path: Path) -> Workload:
        """The function to run and time for `dispatch`: the one that runs it, never another."""
        entry = self.entries.get(dispatch.name)
        if entry is None:
            raise InputError(f"{input_path}: no public function runs {dispatch.name}")
        if isinstance(entry, str):
            raise InputError(f"{input_path}: {dispatch.name} is run by {entry}")
        return entry
