"""Targets the user can name on the command line, and the flags and device each one means."""

from __future__ import annotations

from dataclasses import dataclass

from tuner.errors import TargetError


@dataclass(frozen=True)
class Target:
    """A compile target and the runtime device that runs it."""

    name: str  # as the user wrote it, e.g. "llvm-cpu"
    compile_flags: tuple[str, ...]
    device: str  # the runtime's --device
    # How a tuning spec reaches the compiler on this target (see DESIGN.md: it differs by target).
    spec_flag: str = "--iree-codegen-tuning-spec-path"

    def spec_flags(self, spec_path: str) -> tuple[str, ...]:
        return (f"{self.spec_flag}={spec_path}",)

    def __str__(self) -> str:
        return self.name


_CPU = Target(
    name="llvm-cpu",
    compile_flags=(
        "--iree-hal-target-device=local",
        "--iree-hal-local-target-device-backends=llvm-cpu",
        "--iree-llvmcpu-target-cpu=host",
    ),
    device="local-task",
)

KNOWN = {"llvm-cpu": _CPU, "cpu": _CPU}


def parse_target(text: str) -> Target:
    """A Target from its command-line name; one clear error for anything else."""
    target = KNOWN.get(text.strip().lower())
    if target is None:
        raise TargetError(f"unknown target {text!r}; known targets: {', '.join(sorted(set(KNOWN) - {'cpu'}))}")
    return target
