"""Every rewrite the flag stage offers on cuda, on exports it has not seen: what each finds, whether
it raised (ParsedProgram.failures), whether the model is still right with it, and whether the
joined kernel options compile for cuda. A CPU check of the rewrites on new families before a GPU
session (issue 58: results are checked on exports the code was not written against).

For each DIR (benchmarks/torch_exports.py's layout: model.onnx, input*.npy, torch_output0.npy),
the export is imported once, each rewrite that is no external kernel (those make sm_90a PTX, which
no CPU runs) is applied, built for llvm-cpu and run on the export's own inputs, its result
compared with torch's and with the original program's llvm-cpu result; each joined kernel option
(the flag stage's three forms: the kernels, with join-sibling-linears first, with the feeders
first) is written and compiled for cuda, and the names of its kernels checked as PTX identifiers.

    python benchmarks/rewrite_sweep.py DIR... [--work /tmp/rewrite-sweep] [--jobs 2] [--kernels-only]

Needs Triton for the kernel options (`pip install triton`; without it they are skipped, and said so).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.external.abi import PTX_IDENTIFIER  # noqa: E402
from tuner.input.models import program_source  # noqa: E402
from tuner.rewrite import (CHAIN_CONCATS, EXTERNAL, F32_REDUCTIONS, FEEDERS, JOIN_SIBLING_LINEARS,  # noqa: E402
                           combined, makes_kernels, rewrites_for)
from tuner.rewrite.parsed import ParsedProgram  # noqa: E402
from tuner.targets import parse_target  # noqa: E402


def _error(out: np.ndarray, ref: np.ndarray) -> float:
    if out.shape != ref.shape or not np.all(np.isfinite(out)):
        return float("inf")
    return float(np.abs(out - ref).max()) / max(float(np.abs(ref).max()), 1e-30)


def _run_cpu(program: Path, inputs: list[Path], entry: str, out: Path, cpu) -> np.ndarray:
    vmfb = out.with_suffix(".vmfb")
    subprocess.run(["iree-compile", str(program), *cpu.compile_flags, "-o", str(vmfb)], check=True,
                   capture_output=True, text=True)
    subprocess.run(["iree-run-module", f"--module={vmfb}", f"--function={entry}", f"--device={cpu.device}",
                    *(f"--input=@{p}" for p in inputs), f"--output=@{out.with_suffix('.npy')}"], check=True,
                   capture_output=True, text=True)
    return np.load(out.with_suffix(".npy")).astype(np.float32)


def _why(error: subprocess.CalledProcessError) -> str:
    lines = [line for line in (error.stderr or "").splitlines() if "error" in line.lower()] or [str(error)]
    return lines[0][:200]


def sweep(folder: Path, work: Path, jobs: int, kernels_only: bool = False) -> list[str]:
    """One line for each rewrite and kernel option on the export in `folder` (`kernels_only`:
    the kernel options alone, for real sizes, whose llvm-cpu builds take minutes each)."""
    cuda, cpu = parse_target("cuda"), parse_target("llvm-cpu")
    work.mkdir(parents=True, exist_ok=True)
    program = program_source(folder / "model.onnx", work / "import", cuda)
    entry = re.search(r"func\.func @(\w+)\(", program.read_text()[:20000]).group(1)
    inputs = sorted(folder.glob("input*.npy"))
    torch_out = np.load(folder / "torch_output0.npy").astype(np.float32)
    parsed = ParsedProgram(program)
    lines, builds = [], {}
    for rewrite in (r for r in rewrites_for(cuda) if not makes_kernels(r) and not kernels_only):
        changed = parsed.write(rewrite, work / f"{rewrite.name}.mlir")
        if rewrite.name in parsed.failures:
            lines.append(f"{rewrite.name}: RAISED {parsed.failures[rewrite.name]}")
        elif changed:
            builds[rewrite.name] = (work / f"{rewrite.name}.mlir", len(changed))
    if not kernels_only:
        builds["(original)"] = (program, 0)

    def run(item):
        name, (path, _) = item
        try:
            return name, _run_cpu(path, inputs, entry, work / f"{name}-cpu", cpu), ""
        except subprocess.CalledProcessError as e:
            return name, None, _why(e)

    with ThreadPoolExecutor(jobs) as pool:
        results = {name: (out, why) for name, out, why in pool.map(run, builds.items())}
    original, _ = results.get("(original)", (None, ""))
    for name, (path, count) in builds.items():
        out, why = results[name]
        if out is None:
            lines.append(f"{name}: FAILED on llvm-cpu ({why})")
            continue
        against = f", {_error(out, original):.1e} off the original's" if name != "(original)" and original is not None else ""
        lines.append(f"{name}: {count} rewritten; llvm-cpu {_error(out, torch_out):.1e} off torch's{against}")
    if find_spec("triton") is None:
        return lines + ["kernel options: not built (Triton is not installed)"]
    exact = [F32_REDUCTIONS, CHAIN_CONCATS]
    for label, rewrites in (("kernels", [*exact, *EXTERNAL]), ("joined", [*exact, JOIN_SIBLING_LINEARS, *EXTERNAL]),
                            ("fed", [*exact, *FEEDERS, *EXTERNAL])):
        path = work / f"{label}.mlir"
        changed = parsed.write(combined(rewrites), path)
        raised = [f"{n} RAISED ({why})" for n, why in parsed.failures.items() if n in {r.name for r in rewrites}]
        if not changed:
            lines.append(f"{label}: nothing to rewrite" + (f"; {'; '.join(raised)}" if raised else ""))
            continue
        text = path.read_text()
        kernels = sorted(set(re.findall(r'hal\.dispatch\.extern "([^"]+)"', text)))
        bad = [k for k in kernels if not PTX_IDENTIFIER.fullmatch(k)]
        build = subprocess.run(["iree-compile", str(path), *cuda.compile_flags, "-o", str(work / f"{label}.vmfb")],
                               capture_output=True, text=True)
        lines.append(f"{label}: {len(changed)} rewritten, {len(kernels)} kernels "
                     f"({', '.join(sorted({k.split('_')[0] for k in kernels}))}); cuda compile "
                     + ("ok" if build.returncode == 0 else f"FAILED ({_why(subprocess.CalledProcessError(1, '', '', build.stderr))})")
                     + (f"; bad kernel names {bad}" if bad else "") + (f"; {'; '.join(raised)}" if raised else ""))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("exports", type=Path, nargs="+")
    parser.add_argument("--work", type=Path, default=Path("/tmp/rewrite-sweep"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--kernels-only", action="store_true",
                        help="only the joined kernel options, compiled for cuda (real sizes)")
    args = parser.parse_args()
    for folder in args.exports:
        try:
            lines = sweep(folder, args.work / folder.name, args.jobs, args.kernels_only)
        except Exception as error:  # one export's failure is reported, the others still swept
            lines = [f"FAILED {type(error).__name__}: {str(error)[:300]}"]
        for line in lines:
            print(f"{folder.name} {line}", flush=True)


if __name__ == "__main__":
    main()
