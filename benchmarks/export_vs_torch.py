"""Real exports on one GPU, IREE beside torch: each export of benchmarks/torch_exports.py built by
plain iree-compile as IREE imports it (the default) and with each model rewrite of the tuner that
applies to it (alone, then all of them together), every build's output checked against torch
eager's, and all builds timed in interleaved rounds by CUPTI kernel time per call inside the
module's own call (gpu_model_kernels.py), printed beside torch eager's and torch.compile's kernel
time of the same module on the same GPU (torch.json, written by torch_exports.py --time).

    python benchmarks/export_vs_torch.py DIR/NAME [DIR/NAME ...] [--target cuda:sm_80] [--jobs 8]
        [--rounds 6] [--calls 20] [--compile-only] [--json OUT.json] [--tuned [NAME=]DIR ...]

`--tuned DIR` (one model): a `tune-model` run's result as a further build, plain iree-compile of
the program it names (results.json's `input`) with @DIR/model_flags.txt, checked and timed in the
same rounds; the tuner's claim (results.json's figure) is printed beside it. Given again as
NAME=DIR, each run's result is a build of that name (two runs of the same model side by side: one
GPU's and several GPUs', gpu_tune_minutes.sh).

DIR/NAME holds model.onnx, input*.npy, torch_output0.npy and torch.json. The builds are the
compiler's default configs (no tuning): what the rewrites change in the program alone. Needs the
tuner's packages (iree-base-compiler, z3-solver); torch and CUDA for the timing (not with
--compile-only, which builds and stops: a CPU check of this script).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from tuner.input.models import program_source  # noqa: E402
from pipelines.model_flags import FLAG_NAMES  # noqa: E402
from tuner.rewrite import combined, named_rewrites, rewrite_program, rewrites_for  # noqa: E402

FLAG_BY_NAME = {name: flag for flag, name in FLAG_NAMES.items()}
from tuner.targets import parse_target  # noqa: E402
from torch_exports import SENSITIVE  # noqa: E402
from tuner.tools import find_tool  # noqa: E402


def variants(model: Path, work: Path, target, only: Optional[set[str]] = None) -> dict[str, tuple[Path, list[str]]]:
    """The default program and one per rewrite of the target's kind that changes it, then all of
    those together (`only`: just those named; a name "a+b" is rewrites a and b one after the
    other, any of tuner.rewrite.named_rewrites(target)): name -> (program, what changed)."""
    imported = program_source(model, work, target)
    found = {"default": (imported, [])}
    known = named_rewrites(target)
    for name in sorted(n for n in (only or ()) if "+" in n or (n in known and known[n] not in rewrites_for(target))):
        parts = name.split("+")
        if all(p in known for p in parts):
            out = work / f"{name}.mlir"
            changed = rewrite_program(imported, combined([known[p] for p in parts]), out)
            if changed:
                found[name] = (out, changed)
    taken = []
    for rewrite in rewrites_for(target):  # as the flag stage offers them
        if only is not None and rewrite.name not in only and "rewrites" not in only:
            continue
        out = work / f"{rewrite.name}.mlir"
        changed = rewrite_program(imported, rewrite, out)
        if changed:
            found[rewrite.name] = (out, changed)
            taken.append(rewrite)
    if len(taken) > 1:
        every = combined(taken)
        out = work / "rewrites.mlir"
        found["rewrites"] = (out, rewrite_program(imported, every, out))
    return found


def build(program: Path, flags: list[str], vmfb: Path) -> tuple[bool, str, float]:
    start = time.perf_counter()
    run = subprocess.run([find_tool("iree-compile"), str(program), *flags, "-o", str(vmfb)],
                         capture_output=True, text=True)
    error = next((line for line in run.stderr.splitlines() if "error" in line), run.stderr[-300:])
    return run.returncode == 0, error, time.perf_counter() - start


def check(vmfb: Path, inputs: list[Path], reference: np.ndarray, function: str) -> tuple[bool, float, str]:
    """Load on the GPU, run once: (loaded, relative error of the first output against torch's)."""
    import iree.runtime as rt

    try:
        config = rt.Config("cuda")
        ctx = rt.SystemContext(config=config)
        ctx.add_vm_module(rt.VmModule.mmap(ctx.instance, str(vmfb)))
        fn = ctx.modules.module[function]
        out = fn(*[rt.asdevicearray(config.device, np.load(p)) for p in inputs])
        first = (out[0] if isinstance(out, (tuple, list)) else out).to_host().astype(np.float32)
    except Exception as error:  # a module the driver refuses at load is a result, not a stop
        return False, float("nan"), str(error).splitlines()[0][:300]
    scale = float(np.abs(reference).max()) or 1.0
    return True, float(np.abs(first - reference).max()) / scale, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--target", default="cuda:sm_80")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 4)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--only", help="comma-separated builds to make (default, a rewrite's name, rewrites, "
                        "a+b for rewrites one after the other, an experiment's name; NAME@FLAG: NAME built with the "
                        "model flag FLAG as pipelines.model_flags.FLAG_NAMES names it); default: every one")
    parser.add_argument("--top", type=int, default=0, help="print each build's N costliest dispatches")
    parser.add_argument("--compile-only", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tuned", action="append", default=[],
                        help="[NAME=]DIR: a tune-model run's directory (one model): its result built too, as NAME "
                        "(default: tuned); may be given again")
    args = parser.parse_args()
    if args.tuned and len(args.models) != 1:
        parser.error("--tuned takes one model")
    target = parse_target(args.target)
    report = {}
    for folder in args.models:
        work = folder / "iree"
        only = set(args.only.split(",")) if args.only else None
        # "NAME@FLAG@FLAG": the build NAME with model flags named as pipelines.model_flags.FLAG_NAMES does
        found = variants(folder / "model.onnx", work, target, only and {n.split("@")[0] for n in only})
        flags = {name: list(target.compile_flags) for name in found}
        for name in sorted(n for n in only or () if "@" in n and n.split("@")[0] in found):
            base, *named = name.split("@")
            found[name], flags[name] = found[base], [*flags[base], *(FLAG_BY_NAME[f] for f in named)]
        if only:
            found = {name: built for name, built in found.items() if name in only}
            flags = {name: flags[name] for name in found}
        claims = {}
        for given in args.tuned:  # the tuner's result, as a user rebuilds it
            name, _, path = given.rpartition("=")
            name, tuned = name or "tuned", Path(path)
            result = json.loads((tuned / "results.json").read_text())
            found[name] = (Path(result["input"]), [f"rewrites: {', '.join(result.get('rewrites') or []) or 'none'}"])
            flags[name] = [f"@{(tuned / 'model_flags.txt').resolve()}"]
            claims[name] = (result.get("figure") or {}).get("speedup", 1.0)
        with ThreadPoolExecutor(args.jobs) as pool:
            built = dict(zip(found, pool.map(lambda name: build(found[name][0], flags[name], work / f"{name}.vmfb"),
                                             found)))
        record = {"claim": next(iter(claims.values()), None), "claims": claims, "variants": {name: {"changed": found[name][1], "built": ok, "error": error, "compile_s": round(s, 1)}
                               for name, (ok, error, s) in built.items()}}
        torch_json = folder / "torch.json"
        torch_figures = json.loads(torch_json.read_text()) if torch_json.exists() else {}
        record["torch"] = {k: torch_figures[k] for k in ("eager", "compile") if k in torch_figures}
        sensitivity = torch_figures.get("input_sensitivity")
        if sensitivity is not None and sensitivity < SENSITIVE:  # torch_exports.py's own threshold
            record["unchecked"] = (f"the export's output hardly depends on its input ({sensitivity:.1e}): "
                                   "a build's error against it shows little")
            print(f"{folder.name}: {record['unchecked']}", flush=True)
        report[folder.name] = record
        for name, (ok, error, s) in built.items():
            print(f"{folder.name} {name}: {'built' if ok else 'FAILED ' + error} in {s:.0f} s; {found[name][1]}", flush=True)
        if args.compile_only:
            continue
        inputs = sorted(folder.glob("input*.npy"), key=lambda p: int(p.stem[5:]))
        reference = np.load(folder / "torch_output0.npy")
        timed = []
        for name, entry in record["variants"].items():
            if entry["built"]:
                entry["loaded"], entry["rel_error"], entry["load_error"] = check(work / f"{name}.vmfb", inputs, reference,
                                                                                 "main_graph")
                print(f"{folder.name} {name}: {'loaded' if entry['loaded'] else 'REFUSED ' + entry['load_error']}, "
                      f"relative error against torch eager {entry['rel_error']:.2e}", flush=True)
                if entry["loaded"]:
                    timed.append(f"{name}={work / f'{name}.vmfb'}")
        if timed:
            out = work / "kernels.json"
            subprocess.run([sys.executable, str(Path(__file__).parent / "gpu_model_kernels.py"), "--function",
                            "main_graph", *[a for p in inputs for a in ("--input", str(p))], "--rounds", str(args.rounds),
                            "--calls", str(args.calls), "--json", str(out), "--names", *timed], check=False)
            if out.exists():
                for name, figures in json.loads(out.read_text()).items():
                    record["variants"][name].update(kernel_ms=figures["kernel_ms"], wall_ms=figures["wall_ms"],
                                                    kernel_ms_rounds=figures["kernel_ms_rounds"],
                                                    dispatch_ms=figures["dispatch_ms"])
        _summary(folder.name, record, args.top)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


def _summary(name: str, record: dict, top: int) -> None:
    """One line per build: kernel ms, against the default (median of per-round ratios), against
    torch eager and torch.compile (their medians); then its `top` costliest dispatches."""
    default = record["variants"].get("default", {}).get("kernel_ms_rounds")
    eager = record["torch"].get("eager", {}).get("kernel_ms")
    compiled = record["torch"].get("compile", {}).get("kernel_ms")
    for tuned, claim in (record.get("claims") or {}).items():
        print(f"{name} tune-model's claim for its result ({tuned}): {claim:.2f}x the default")
    if eager:
        print(f"{name} torch eager {eager:.3f} ms, torch.compile {compiled:.3f} ms (kernels per call)")
    for variant, entry in record["variants"].items():
        if "kernel_ms" not in entry:
            continue
        vs_default = statistics.median(d / v for d, v in zip(default, entry["kernel_ms_rounds"])) if default else None
        print(f"{name} {variant:<28} {entry['kernel_ms']:.3f} ms"
              + (f"  {vs_default:.2f}x the default" if vs_default else "")
              + (f"  {eager / entry['kernel_ms']:.2f}x eager" if eager else "")
              + (f"  {compiled / entry['kernel_ms']:.2f}x torch.compile" if compiled else "")
              + f"  err {entry.get('rel_error', float('nan')):.1e}" + (" (unchecked)" if record.get("unchecked") else ""),
              flush=True)
        for dispatch, ms in sorted(entry["dispatch_ms"].items(), key=lambda kv: -kv[1])[:top]:
            print(f"    {ms:8.3f} ms  {dispatch}")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    os._exit(0)  # as gpu_model_kernels.py: torch's CUPTI and IREE's CUDA runtime both loaded
