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
                     static_size: Optional[int] = None) -> tuple[Path, tuple[str, ...], tuple[str, ...]]:
    """`program_source`, and for an ONNX model whose inputs have symbolic dimensions, with
    `static_size`: the import of a copy with each fixed at that size (tuner.input.onnx_dims;
    `workdir/imported/NAME.static.onnx`), with what was fixed ("x[0]: N -> 2"); and what the
    import's repair changed (`repaired_import`)."""
    if path.suffix.lower() != ".onnx":
        return unconfigured_copy(path, workdir / IMPORTED, target) or path, (), ()
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
    return out, fixed, repaired_import(out)


def repaired_import(source: Path) -> tuple[str, ...]:
    """The imported program in `source` rewritten in place where it holds what IREE 3.13 cannot
    compile and an exact rewrite can (tuner.rewrite.conv_window: convolutions leaving input
    unread at a one-pixel output, as a ResNet at 32x32 pixels has); what was changed, each said
    by the run."""
    if not _mentions(source, (b'"onnx.Conv"', b'"onnx.MaxPool"', b'"onnx.AveragePool"')):
        return ()
    from tuner.rewrite import FIT_CONV_WINDOWS
    from tuner.rewrite.parsed import ParsedProgram

    fitted = source.with_suffix(".fitted.mlir")
    changed = ParsedProgram(source).write(FIT_CONV_WINDOWS, fitted)
    if changed:
        fitted.replace(source)
    return tuple(f"{FIT_CONV_WINDOWS.name}: {c}" for c in changed)


def _mentions(path: Path, words: tuple[bytes, ...], chunk: int = 1 << 24) -> bool:
    """Whether the file holds any of `words`, read a chunk at a time (a transformer's import is
    mostly its weights, hundreds of MB with no window op in it)."""
    overlap = max(len(w) for w in words) - 1
    tail = b""
    with path.open("rb") as f:
        while block := f.read(chunk):
            text = tail + block
            if any(w in text for w in words):
                return True
            tail = text[-overlap:]
    return False
