"""Whole-model variants: the model built with some flags and a merged spec, its configs read back
from the compile, and variants timed against a reference in interleaved rounds with the numerics
compared at the model's output.

How a variant is timed is injected (`ModelBenchmark`): the default is IREE's
`iree-benchmark-module` on the entry function; a client may bring its own command."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from iree.compiler import ir

from pipelines import Config, Dispatch, check_config
from tuner.comparison import Paired, bracketing
from tuner.discovery import read_configured
from tuner.errors import ToolError
from tuner.runner import RunSettings, Timing, benchmark, read_output, relative_error, run_once, tolerance
from tuner.spec import build_spec
from tuner.targets import Target
from tuner.tools import find_tool, run_tool
from tuner.workload import Workload


@dataclass(frozen=True)
class SpecPart:
    """One dispatch's tuned config, as it goes into a merged spec."""

    dispatch: Dispatch
    config: Config
    label: str = ""

    @property
    def entry(self) -> tuple:
        """The (dispatch, compilation_info[, decomposition_config]) build_spec takes."""
        c = self.config
        return (self.dispatch, c.compilation_info, c.decomposition_config) if c.decomposition_config \
            else (self.dispatch, c.compilation_info)


@dataclass(frozen=True)
class Variant:
    """One way to build the model: extra flags and the dispatch configs merged into one spec."""

    name: str
    flags: tuple[str, ...] = ()
    parts: tuple[SpecPart, ...] = ()

    def with_part(self, part: SpecPart, name: str) -> "Variant":
        return Variant(name, self.flags, (*self.parts, part))


@dataclass(frozen=True)
class BuiltVariant:
    variant: Variant
    vmfb: Optional[Path]
    spec: Optional[Path]  # the merged spec file (None: no spec)
    flags: tuple[str, ...]  # every iree-compile flag that builds it
    error: str = ""  # why it did not build, or which config the compile did not carry

    @property
    def ok(self) -> bool:
        return self.vmfb is not None and not self.error


def merged_spec(parts: Sequence[SpecPart], target: Target, ctx: ir.Context) -> str:
    """One spec with every part's matcher and config under the target's one entry point."""
    return str(build_spec([p.entry for p in parts], ctx, target.spec_entry))


def build_variant(model: Path, variant: Variant, target: Target, directory: Path, ctx: ir.Context,
                  timeout_s: float = 600.0) -> BuiltVariant:
    """Compile the model as `variant` into `directory`, then read every executable's config back
    and check that each part's config is carried by some root op (a spec that did not take
    effect is an error, not a silent default)."""
    directory.mkdir(parents=True, exist_ok=True)
    spec = None
    flags = [*target.compile_flags, *variant.flags]
    if variant.parts:
        spec = directory / "spec.mlir"
        spec.write_text(merged_spec(variant.parts, target, ctx))
        flags += target.spec_flags(str(spec.resolve()))
    configs = directory / "configs"
    vmfb = directory / "model.vmfb"
    run = run_tool([find_tool("iree-compile"), str(model.resolve()), *flags,
                    f"--iree-hal-dump-executable-configurations-to={configs}", "-o", str(vmfb)], timeout_s)
    if not run.ok:
        return BuiltVariant(variant, None, spec, tuple(flags), f"iree-compile failed: {run.first_error()}")
    configured = read_configured((p.read_text() for p in sorted(configs.glob("*.mlir"))), ctx)
    for part in variant.parts:
        if not any(not check_config(part.config, d) for d in configured):
            return BuiltVariant(variant, vmfb, spec, tuple(flags),
                                f"the model compile does not carry {part.dispatch.name}'s config ({part.label})")
    return BuiltVariant(variant, vmfb, spec, tuple(flags))


class ModelBenchmark(Protocol):
    """How a compiled model is timed: one timing (several repetitions) of one call."""

    def __call__(self, vmfb: Path, settings: RunSettings) -> Optional[Timing]: ...


def iree_benchmark(vmfb: Path, settings: RunSettings) -> Optional[Timing]:
    """The default: iree-benchmark-module on the entry function."""
    return benchmark(vmfb, settings)[0]


@dataclass(frozen=True)
class Comparison:
    """Variants against a reference, timed in interleaved rounds (R v1 R v2 R ...), each round's
    ratio taken against the two reference timings that bracket it."""

    reference_ms: tuple[float, ...]
    paired: dict[str, Paired]  # variant name -> ratios (reference / variant; >1: faster)
    variant_ms: dict[str, tuple[float, ...]]
    errors: dict[str, float] = field(default_factory=dict)  # numerics: relative error at the output
    failed: dict[str, str] = field(default_factory=dict)  # variant name -> why it could not be timed


def compare(reference: BuiltVariant, variants: Sequence[BuiltVariant], workload: Workload, inputs: tuple[Path, ...],
            device: str, rounds: int, directory: Path, timer: ModelBenchmark = iree_benchmark,
            repetitions: int = 3, min_time_s: float = 0.1, timeout_s: float = 300.0,
            progress: Optional[Callable[[str, int, int], None]] = None) -> Comparison:
    """Run each variant once to compare its output with the reference's (numerics), then time
    them in `rounds` interleaved rounds. A variant that fails to run or computes a different
    result is left out of the timing and named in `failed`."""
    checked = workload.checked_output
    settings = RunSettings(device, workload.entry, inputs, repetitions, min_time_s, timeout_s,
                           outputs=len(workload.outputs), checked=checked,
                           checked_type=workload.outputs[checked].element_type if checked is not None else "")
    directory.mkdir(parents=True, exist_ok=True)
    failed: dict[str, str] = {}
    errors: dict[str, float] = {}
    ref_out = None
    suffix = ".bin" if settings.checked_type == "bf16" else ".npy"
    if checked is not None:
        run = run_once(reference.vmfb, settings, directory / f"reference{suffix}")
        if not run.ok:
            raise ToolError(f"the model ({reference.variant.name}) did not run: {run.first_error()}",
                            list(run.command), run.stderr)
        ref_out = read_output(directory / f"reference{suffix}", settings)
    timed = []
    for v in variants:
        if not v.ok:
            failed[v.variant.name] = v.error or "did not build"
            continue
        if ref_out is not None:
            out = directory / f"{v.variant.name}{suffix}"
            run = run_once(v.vmfb, settings, out)
            if not run.ok:
                failed[v.variant.name] = f"did not run: {run.first_error()}"
                continue
            errors[v.variant.name] = relative_error(read_output(out, settings), ref_out)
            if errors[v.variant.name] > tolerance(settings.checked_type) * 10:
                failed[v.variant.name] = f"a different result (relative error {errors[v.variant.name]:.2g})"
                continue
        timed.append(v)
    ref_ms: list[float] = []
    var_ms: dict[str, list[float]] = {v.variant.name: [] for v in timed}
    ratios: dict[str, list[float]] = {v.variant.name: [] for v in timed}
    steps, done = rounds * (2 * len(timed) + 1), 0
    for r in range(rounds):
        order = timed[r % len(timed):] + timed[:r % len(timed)] if timed else []
        before = _time(reference, settings, timer)
        ref_ms.append(before or 0.0)
        done += 1
        for v in order:
            ms = _time(v, settings, timer)
            after = _time(reference, settings, timer)
            ref_ms.append(after or 0.0)
            done += 2
            if ms:
                var_ms[v.variant.name].append(ms)
                around = bracketing(before, after)
                if around:
                    ratios[v.variant.name].append(around / ms)
            before = after
            if progress:
                progress("model", done, steps)
    return Comparison(tuple(ref_ms), {n: Paired(tuple(r)) for n, r in ratios.items()},
                      {n: tuple(t) for n, t in var_ms.items()}, errors, failed)


def _time(v: BuiltVariant, settings: RunSettings, timer: ModelBenchmark) -> Optional[float]:
    timing = timer(v.vmfb, settings)
    time.sleep(0)  # let a Ctrl-C between timings land
    return timing.median_ms if timing is not None else None
