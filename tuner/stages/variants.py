"""Whole-model variants: the model built with some flags and a merged spec, and its configs read
back from the compile (compiler side; tuner.stages.model_timing times them)."""

from __future__ import annotations

import hashlib
import json
import re
from operator import attrgetter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional, Sequence

from iree.compiler import ir

from pipelines import Config, Dispatch, check_config
from tuner.discovery.read_back import read_configured
from tuner.run_dir import fresh, real_directory, remove_tree, write_file
from tuner.specs.transform import build_spec, uses_codegen_stage, with_pinned
from tuner.targets import Target
from tuner.tools import find_tool, run_tool_retrying_a_hang


BUILT_FROM = "built-from.json"  # next to a model build: the program digest, flags and spec it came from


@dataclass(frozen=True)
class SpecPart:
    """One dispatch's tuned config, as it goes into a merged spec."""

    dispatch: Dispatch
    config: Config
    label: str = ""

    @property
    def entry(self) -> tuple[Dispatch, Config]:
        """What build_spec takes."""
        return self.dispatch, self.config


@dataclass(frozen=True)
class Variant:
    """One way to build the model: extra flags, the dispatch configs merged into one spec, and
    the program file compiled (`source`; None: the model as given; else a rewrite of it,
    tuner.rewrite)."""

    name: str
    flags: tuple[str, ...] = ()
    parts: tuple[SpecPart, ...] = ()
    source: Optional[Path] = None
    # Configs without which it does not build: a dispatch the compiler's own config cannot
    # compile under these flags, given one that can (tuner.stages.repair); carried by every build
    # of the choice, tuned or not, and by the tuned model's spec.
    pinned: tuple[SpecPart, ...] = ()

    def with_part(self, part: SpecPart, name: str) -> "Variant":
        return replace(self, name=name, parts=(*self.parts, part))

    @property
    def spec_parts(self) -> tuple[SpecPart, ...]:
        """What its spec holds: the pinned configs (but where a part configures the same
        dispatch), then the parts."""
        return tuple(with_pinned(self.pinned, self.parts, attrgetter("dispatch")))


@dataclass(frozen=True)
class BuiltVariant:
    variant: Variant
    vmfb: Optional[Path]
    spec: Optional[Path]  # the merged spec file (None: no spec)
    flags: tuple[str, ...]  # every iree-compile flag that builds it
    error: str = ""  # why it did not build, or which config the compile did not carry
    failing: str = ""  # the dispatch the compiler's diagnostics name, where it did not compile

    @property
    def ok(self) -> bool:
        return self.vmfb is not None and not self.error


# The dispatch function a compiler diagnostic is about: its "see current operation" dump names it
# (`sym_name = "main_dispatch_3_..."`), as does the executable's symbol (`@main_dispatch_3`).
_DISPATCH = re.compile(r'(?:sym_name = "|@)([\w$.-]*?_dispatch_\d+[\w$.-]*)')


def failing_dispatch(stderr: str) -> Optional[str]:
    """The dispatch a compiler's diagnostics name first (the function it was lowering), or None."""
    found = _DISPATCH.search(stderr)
    return found.group(1) if found else None


def merged_spec(parts: Sequence[SpecPart], target: Target, ctx: ir.Context) -> str:
    """One spec with every part's matcher and config under the target's one entry point."""
    return str(build_spec([p.entry for p in parts], ctx, target.spec_entry))


def build_variant(model: Path, variant: Variant, target: Target, directory: Path, ctx: ir.Context,
                  timeout_s: float = 600.0) -> BuiltVariant:
    """Compile the model as `variant` into `directory`, then read every executable's config back
    and check that each part's config is carried by some root op (a spec that did not take
    effect is an error, not a silent default)."""
    variant = carried(variant, target)
    text = merged_spec(variant.spec_parts, target, ctx) if variant.spec_parts else ""
    built = compile_variant(model, variant, target, directory, text, timeout_s)
    if not built.ok:
        return built
    configured = read_configured((p.read_text() for p in sorted((directory / CONFIGS).glob("*.mlir"))), ctx)
    for part in variant.spec_parts:
        if not any(not check_config(part.config, d) for d in configured):
            return replace(built, error=f"the model compile does not carry {part.dispatch.name}'s config ({part.label})")
    return built


def carried(variant: Variant, target: Target) -> Variant:
    """The variant with the configs every build for `target` carries (Target.pinned) pinned too."""
    if not target.pinned:
        return variant
    return replace(variant, pinned=tuple(with_pinned([SpecPart(d, c, "pinned") for d, c in target.pinned],
                                                     variant.pinned, attrgetter("dispatch"))))


CONFIGS = "configs"  # next to a model build: the executables' configurations as compiled


def compile_variant(model: Path, variant: Variant, target: Target, directory: Path, spec_text: str = "",
                    timeout_s: float = 600.0) -> BuiltVariant:
    """iree-compile of the model as `variant` (its parts merged into `spec_text`) into
    `directory`, the executables' configurations dumped beside it; no MLIR context is used, so
    builds may run in threads side by side (tuner.stages.builtin.prebuild)."""
    variant = carried(variant, target)
    real_directory(directory)
    model = variant.source or model
    spec = None
    flags = [*target.compile_flags, *variant.flags]
    if variant.spec_parts:
        spec = directory / "spec.mlir"
        flags += target.spec_flags(str(spec.resolve()),
                                   codegen=uses_codegen_stage([p.config for p in variant.spec_parts]))
    configs = directory / CONFIGS
    vmfb = directory / "model.vmfb"
    # What built the module there: the same program, flags and spec are not compiled again (a
    # two-machine run comes back here once per device trip).
    recipe = _recipe(model, flags, spec_text)
    stamp = directory / BUILT_FROM
    if not _built_from(directory, recipe):
        stamp.unlink(missing_ok=True)
        if spec is not None:
            write_file(spec, spec_text)
        remove_tree(configs)
        # Run in `directory`, naming the dump and the module relative to it: the dump's path is
        # written into the module, and two builds of the same code must be the same bytes (a
        # model-wide flag that changes nothing is found so: tuner.stages.flags).
        run = run_tool_retrying_a_hang([find_tool("iree-compile"), str(model.resolve()), *flags,
                                        f"--iree-hal-dump-executable-configurations-to={configs.name}",
                                        "-o", fresh(vmfb).name], timeout_s, cwd=directory)
        if not run.ok:
            dispatch = failing_dispatch(run.stderr)
            return BuiltVariant(variant, None, spec, tuple(flags), f"iree-compile failed: {run.first_error()}"
                                + (f" (in {dispatch})" if dispatch else ""), failing=dispatch or "")
        write_file(stamp, recipe)
    return BuiltVariant(variant, vmfb, spec, tuple(flags))


def compiled_already(model: Path, variant: Variant, target: Target, directory: Path) -> bool:
    """Whether `directory` holds the variant's module (one without spec parts), as compile_variant
    would find it and not compile it again."""
    variant = carried(variant, target)
    return not variant.spec_parts and _built_from(
        directory, _recipe(variant.source or model, [*target.compile_flags, *variant.flags], ""))


def _recipe(model: Path, flags: list[str], spec_text: str) -> str:
    return json.dumps({"model": hashlib.sha256(model.read_bytes()).hexdigest(), "flags": flags, "spec": spec_text})


def _built_from(directory: Path, recipe: str) -> bool:
    stamp = directory / BUILT_FROM
    return (directory / "model.vmfb").is_file() and stamp.is_file() and stamp.read_text() == recipe


def same_module(a: BuiltVariant, b: BuiltVariant) -> bool:
    """Whether two builds wrote the same module file, byte for byte."""
    return hashlib.sha256(a.vmfb.read_bytes()).digest() == hashlib.sha256(b.vmfb.read_bytes()).digest()
