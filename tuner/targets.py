"""Targets the user can name on the command line, and the flags and device each one means."""

from __future__ import annotations

from dataclasses import dataclass, replace

from tuner.errors import TargetError


@dataclass(frozen=True)
class Target:
    """A compile target and the runtime device that runs it."""

    name: str  # as the user wrote it, e.g. "llvm-cpu"
    compile_flags: tuple[str, ...]
    device: str  # the runtime's --device
    # How a tuning spec reaches the compiler on this target. IREE 3.13 loads codegen tuning
    # specs (entry @__kernel_config) on llvm-cpu and rocm but not on cuda, where the same
    # matcher/annotation pair works as a preprocessing transform spec (entry @__transform_main).
    spec_flag: str = "--iree-codegen-tuning-spec-path"
    spec_entry: str = "__kernel_config"
    # Time the tuned dispatch alone (a dispatch benchmark module) rather than the whole entry
    # function. On GPUs a call's wall time carries ~0.3 ms of launch, sync and result
    # allocation (4096^3 f16 on the H100: 1.24 ms per call, 0.95 ms of kernel). Not on the
    # CPU, where data tiling adds dispatches that a dispatch-only time would leave out.
    time_dispatch_only: bool = False
    # How to schedule compiles against timing when the user does not say (see tuner.evaluation.evaluator).
    # The CPU times on the cores the compiles run on: overlapping them cost the 2-core machine
    # its right winner (BENCHMARKS.md), so the CPU evaluates one candidate at a time.
    default_strategy: str = "overlapped"
    # Where specs are preprocessing specs: the flag that loads the same file's codegen-stage entry
    # (@__kernel_config), for configs that must go in where the compiler configures a dispatch's
    # ops (reductions: tuner.specs.fused). "{spec}" stands for the file. cuda does not load
    # codegen tuning specs in 3.13, but runs the same entry as a transform library.
    codegen_spec_flag: str = ""
    spec_suffix: str = ""  # what follows the spec's path in `spec_flag` (e.g. "@__kernel_config")
    # (Dispatch, Config) pairs every build for this target carries in its spec besides its own
    # configs: dispatches the compiler's own configs cannot compile, repaired (tuner.stages.repair).
    pinned: tuple = ()

    def spec_flags(self, spec_path: str, codegen: bool = False) -> tuple[str, ...]:
        """The flags that hand the compiler a spec file; `codegen`: the spec also has configs
        for the codegen stage (tuner.specs.transform.uses_codegen_stage)."""
        flags = (f"{self.spec_flag}={spec_path}{self.spec_suffix}",)
        if codegen and self.codegen_spec_flag:
            flags += (self.codegen_spec_flag.format(spec=spec_path),)
        return flags

    def at_codegen_stage(self) -> "Target":
        """This target with every config handed in at the codegen stage, where its spec is
        otherwise a preprocessing spec: for a program that is already an executable (an IREE
        dispatch benchmark), which no preprocessing spec reaches (every candidate of one dumped
        for gfx942 compiled with the compiler's own config)."""
        if not self.codegen_spec_flag:
            return self
        flag, _, suffix = self.codegen_spec_flag.partition("={spec}")
        return replace(self, spec_flag=flag, spec_suffix=suffix, spec_entry="__kernel_config", codegen_spec_flag="")

    def is_spec_flag(self, flag: str) -> bool:
        """Whether `flag` is one of the flags that hand the compiler a spec file."""
        prefixes = [self.spec_flag + "="]
        if self.codegen_spec_flag:
            prefixes.append(self.codegen_spec_flag.split("{spec}")[0])
        return flag.startswith(tuple(prefixes))

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
    default_strategy="sequential",
)

KNOWN = {"llvm-cpu": _CPU, "cpu": _CPU}
# sm_80 is the newest NVIDIA arch IREE 3.13 has a GPU target for ("sm_90" fails with "missing GPU
# target"); its PTX also runs on Hopper.
CUDA_ARCHS = ("sm_60", "sm_61", "sm_70", "sm_75", "sm_80", "sm_86", "sm_87", "sm_89")
DEFAULT_CUDA_ARCH = "sm_80"


def _gpu(name: str, compile_flags: tuple[str, ...], device: str, codegen_spec_flag: str) -> Target:
    """A GPU target: specs as preprocessing transform specs, the tuned dispatch timed alone."""
    return Target(name=name, compile_flags=compile_flags, device=device,
                  spec_flag="--iree-preprocessing-transform-spec-filename", spec_entry="__transform_main",
                  time_dispatch_only=True, codegen_spec_flag=codegen_spec_flag)


def cuda(arch: str = DEFAULT_CUDA_ARCH) -> Target:
    return _gpu(f"cuda:{arch}", ("--iree-hal-target-device=cuda", f"--iree-cuda-target={arch}"), "cuda",
                "--iree-codegen-transform-dialect-library={spec}@__kernel_config")


# The gfx archs IREE 3.13 has a GPU target for (each compiled a matmul to TileAndFuse here;
# gfx900, gfx906, gfx940, gfx941 and gfx1030 fail with "missing GPU target").
ROCM_ARCHS = ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1101", "gfx1103", "gfx1150", "gfx1200", "gfx1201")
DEFAULT_ROCM_ARCH = "gfx942"


def rocm(arch: str = DEFAULT_ROCM_ARCH) -> Target:
    """AMD GPUs through HIP. No AMD GPU is here: ROCm candidates are generated, compiled and
    verified here, and measured where one is (`--compile-only`, then `benchmark DIR`).

    Specs go in as preprocessing transform specs, as on cuda: codegen tuning specs do load on
    rocm and configure contractions and convolutions, but an attention config given that way
    was not applied (the compiler's own config and decomposition were read back), while the
    same matcher and annotations applied as a preprocessing spec were."""
    return _gpu(f"rocm:{arch}", ("--iree-hal-target-device=hip", f"--iree-rocm-target={arch}"), "hip",
                "--iree-codegen-tuning-spec-path={spec}")


def parse_target(text: str) -> Target:
    """A Target from its command-line name ("llvm-cpu", "cuda", "cuda:sm_80", "rocm:gfx942");
    one clear error for anything else."""
    name = text.strip().lower()
    if name in KNOWN:
        return KNOWN[name]
    if name == "cuda" or name.startswith("cuda:"):
        arch = name.partition(":")[2] or DEFAULT_CUDA_ARCH
        if arch not in CUDA_ARCHS:
            raise TargetError(f"unknown cuda arch {arch!r}; IREE 3.13 knows {', '.join(CUDA_ARCHS)}")
        return cuda(arch)
    if name in ("rocm", "hip") or name.startswith(("rocm:", "hip:")):
        arch = name.partition(":")[2] or DEFAULT_ROCM_ARCH
        if arch not in ROCM_ARCHS:
            raise TargetError(f"unknown rocm arch {arch!r}; IREE 3.13 knows {', '.join(ROCM_ARCHS)}")
        return rocm(arch)
    raise TargetError(f"unknown target {text!r}; known targets: llvm-cpu, cuda[:{'|'.join(CUDA_ARCHS)}], "
                      f"rocm[:{'|'.join(ROCM_ARCHS)}]")


# The runtime drivers that run each kind of target's executables (a device is named DRIVER,
# DRIVER://N or DRIVER:N, as IREE's tools take it).
_DRIVERS = {"local": ("local-task", "local-sync"), "cuda": ("cuda",), "hip": ("hip",)}


def check_devices(target: Target, devices: tuple[str, ...] | list[str]) -> None:
    """Refuse, before anything is compiled, a device that cannot run the target's modules
    (`--device cuda` with the llvm-cpu target compiled the model, then failed on libcuda)."""
    drivers = next((d for d in _DRIVERS.values() if target.device.split(":")[0] in d), (target.device,))
    for device in devices:
        if device.split(":")[0] not in drivers:
            raise TargetError(f"--device {device} does not run {target.name} modules: name a "
                              f"{' or '.join(drivers)} device, or a --target that {device} runs")
