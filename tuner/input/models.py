"""Model files as the user brings them, turned into the MLIR program iree-compile takes: MLIR
(linalg or torch dialect) as it is, an ONNX model through IREE's own importer (`iree-import-onnx`,
which needs the `onnx` package: `pip install -e '.[onnx]'`), an IREE dispatch benchmark file
without the configs baked into it (tuner.input.dispatch_benchmarks)."""

from __future__ import annotations

from pathlib import Path

from tuner.input.dispatch_benchmarks import unconfigured_copy
from tuner.errors import InputError, unreadable_input
from tuner.run_dir import fresh, real_directory
from tuner.targets import Target
from tuner.tools import find_tool, run_tool

IMPORTED = "imported"


def program_source(path: Path, workdir: Path, target: Target, timeout_s: float = 600.0) -> Path:
    """`path` itself for MLIR; for an `.onnx` model, its import as `workdir/imported/NAME.mlir`;
    for a dispatch benchmark dumped for `target`, its copy without baked configs as
    `workdir/imported/NAME` (written there, nowhere else). One clear line when the model cannot
    be imported or the benchmark was dumped for another target."""
    if path.suffix.lower() != ".onnx":
        return unconfigured_copy(path, workdir / IMPORTED, target) or path
    if not path.is_file():
        raise unreadable_input(path)
    out = workdir / IMPORTED / (path.stem + ".mlir")
    real_directory(out.parent)
    run = run_tool([find_tool("iree-import-onnx"), str(path), "-o", str(fresh(out))], timeout_s)
    if not run.ok:
        if "No module named 'onnx'" in run.stderr:
            raise InputError(f"{path}: importing ONNX needs the onnx package: pip install -e '.[onnx]'")
        raise InputError(f"{path}: iree-import-onnx could not import it: {run.first_error()}")
    return out
