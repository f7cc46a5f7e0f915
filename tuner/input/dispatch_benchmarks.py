"""IREE's own dispatch benchmark files (`--iree-hal-dump-executable-benchmarks-to`) as input.

Such a file holds one executable, already configured (the `lowering_config` and
`translation_info` the compiler chose when it dumped it) for the target it was dumped for, and a
public `util.func` marked `iree.reflection = {iree.benchmark = "dispatch"}` that dispatches it
`%batch` times. Compiled as it is, the compiler keeps the baked config and ignores any tuning spec
(the binary came out byte-identical with and without one). So the tuner reads it through the
bindings, checks that its target is the one asked for, and writes a copy with the baked configs
removed: the compiler configures that copy again (marking the root op for the tuner) and a spec
then tunes it like any other dispatch. It is timed as what it is: the dispatch alone, in batches."""

from __future__ import annotations

import tempfile
from pathlib import Path

from iree.compiler import ir
from iree.compiler.dialects import iree_gpu

from tuner.discovery.program import configure
from tuner.discovery.entry import is_dispatch_benchmark_function
from tuner.errors import InputError
from tuner.run_dir import real_directory, write_file
from tuner.targets import Target

BAKED = ("lowering_config", "translation_info", "compilation_info", "decomposition_config")


def _is_dispatch_benchmark(module: ir.Module) -> bool:
    return any(op.operation.name in ("util.func", "func.func") and is_dispatch_benchmark_function(op.operation)
               for op in module.body.operations)


def _variant_targets(module: ir.Module) -> list[tuple[str, str]]:
    """(backend, arch) of every executable variant: arch is the GPU arch or the CPU name."""
    found = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == "hal.executable.variant":
            found.append(_backend_and_arch(op.attributes["target"]))
            return ir.WalkResult.SKIP
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return found


def _backend_and_arch(attr: ir.Attribute) -> tuple[str, str]:
    # 3.13's bindings have no #hal.executable.target accessor: its first parameter, a quoted
    # string, is the backend, and its configuration dictionary is read back as a typed DictAttr.
    text = str(attr)
    backend = text.split('"')[1]
    config = ir.DictAttr(ir.Attribute.parse(text[text.index("{"): text.rindex("}") + 1])) if "{" in text else None
    arch = ""
    if config is not None:
        if "iree_codegen.target_info" in config:  # GPUs: #iree_gpu.target<arch = "sm_80", ...>
            arch = iree_gpu.TargetInfo.get_gpu_target_info(attr).arch
        elif "cpu" in config:
            arch = ir.StringAttr(config["cpu"]).value
    return backend, arch


def _expected(target: Target) -> tuple[str, str]:
    """The backend and arch `target` compiles for ("" arch: the host CPU, whatever it is)."""
    if target.name.startswith("cuda"):
        return "cuda", target.name.partition(":")[2]
    if target.name.startswith("rocm"):
        return "rocm", target.name.partition(":")[2]
    return "llvm-cpu", ""


def _host_cpu(target: Target) -> str:
    """The CPU name the compiler resolves `--iree-llvmcpu-target-cpu=host` to, read from a tiny
    program configured for `target`."""
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp) / "probe.mlir"
        probe.write_text("func.func @probe(%a: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<64xf32> {\n"
                         "  %0 = arith.addf %a, %b : tensor<64xf32>\n  return %0 : tensor<64xf32>\n}\n")
        text = configure(probe, target, ())
    with ir.Context():
        targets = _variant_targets(ir.Module.parse(text))
    return targets[0][1] if targets else ""


def unconfigured_copy(path: Path, out_dir: Path, target: Target) -> Path | None:
    """For a dispatch benchmark file: the copy with its baked configs removed, written to
    `out_dir/NAME`, after checking its target is `target`. None for any other
    program (it is compiled as it is). One clear line when the targets differ."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return None  # parse_input says what is wrong with it
    if "iree.benchmark" not in text:  # cheap gate: most programs are not benchmarks
        return None
    with ir.Context():
        try:
            module = ir.Module.parse(text)
        except Exception:
            return None
        if not _is_dispatch_benchmark(module):
            return None
        want_backend, want_arch = _expected(target)
        if not want_arch and want_backend == "llvm-cpu":
            want_arch = _host_cpu(target)
        for backend, arch in _variant_targets(module):
            if backend != want_backend or (want_arch and arch != want_arch):
                raise InputError(f"{path}: an IREE dispatch benchmark for {backend} {arch}, but --target {target.name} "
                                 f"compiles for {want_backend} {want_arch}; give the target it was dumped for")
        def strip(op: ir.Operation) -> ir.WalkResult:
            for name in BAKED:
                if name in op.attributes:
                    del op.attributes[name]
            return ir.WalkResult.ADVANCE

        module.operation.walk(strip)
        out = out_dir / path.name
        real_directory(out.parent)
        write_file(out, str(module))
    return out
