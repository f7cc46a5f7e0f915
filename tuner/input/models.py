"""Model files as the user brings them, turned into the MLIR program iree-compile takes: MLIR
(linalg or torch dialect) as it is, an ONNX model through IREE's own importer (`iree-import-onnx`,
which needs the `onnx` package: `pip install -e '.[onnx]'`), an IREE dispatch benchmark file
without the configs baked into it (tuner.input.dispatch_benchmarks)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from tuner.input.dispatch_benchmarks import unconfigured_copy
from tuner.input.onnx_dims import fix_symbolic_dims
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
    return imported_program(path, workdir, target, timeout_s)[0]


def imported_program(path: Path, workdir: Path, target: Target, timeout_s: float = 600.0,
                     static_size: Optional[int] = None) -> tuple[Path, tuple[str, ...]]:
    """`program_source`, and for an ONNX model whose inputs have symbolic dimensions, with
    `static_size`: the import of a copy with each fixed at that size (tuner.input.onnx_dims;
    `workdir/imported/NAME.static.onnx`), with what was fixed ("x[0]: N -> 2")."""
    if path.suffix.lower() != ".onnx":
        return unconfigured_copy(path, workdir / IMPORTED, target) or path, ()
    if not path.is_file():
        raise unreadable_input(path)
    out = workdir / IMPORTED / (path.stem + ".mlir")
    real_directory(out.parent)
    static, fixed = out.with_suffix(".static.onnx"), ()
    if static_size is not None:
        try:
            fixed = tuple(fix_symbolic_dims(path, static_size, static))
        except ImportError:
            raise InputError(f"{path}: importing ONNX needs the onnx package: pip install -e '.[onnx]'") from None
        except Exception:  # noqa: BLE001 - a file onnx cannot read: the importer says why below
            pass
    source = static if fixed else path
    run = run_tool([find_tool("iree-import-onnx"), str(source), "--data-dir", str(path.parent), "-o", str(fresh(out))],
                   timeout_s)
    if not run.ok:
        if "No module named 'onnx'" in run.stderr:
            raise InputError(f"{path}: importing ONNX needs the onnx package: pip install -e '.[onnx]'")
        raise InputError(f"{path}: iree-import-onnx could not import it: {run.first_error()}")
    return out, fixed
