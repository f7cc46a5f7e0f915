"""The external Hopper GEMM kernel tuned on large real-model matrix products against cuBLAS
(issue 59): plain iree-compile builds, CUPTI kernel time, interleaved, every output checked.

    .venv/bin/python benchmarks/gpu_gemm_vs_cublas.py compile --out DIR [--candidates 12]   # here (Triton needed)
    python3 benchmarks/gpu_gemm_vs_cublas.py measure --out DIR --rounds 5                    # on the GPU

`compile` writes, for each of SHAPES, an ONNX `MatMul(X, W)` in f16 (X [m, k], W [k, n] both
arguments, so that nothing large travels), imports it with iree-import-onnx and builds it with
IREE's default and with the MatMul as the external kernel (tuner.rewrite.external_gemm) at each
of the first `--candidates` tiles the tuner would try (tuner.external.gemm_kernel.tile_candidates:
the rule's, then the Z3 space's by its estimate; with `--refine` an earlier measure's
measured.json, the variations of the two tile shapes that ran fastest there: a second pass of
the search); each build's PTX is read back (it must hold wgmma). `measure` checks every module's output (5 runs, against torch's f32 product), then
tunes as the kernel-tiles stage does: `--select` interleaved rounds of every candidate, the
fastest by median kept; then `--rounds` fresh interleaved rounds of the default, the rule's tiles
(untuned), the kept tiles (tuned) and torch.matmul (cuBLAS), so that the figures reported are not
the selection's own (the fastest of many noisy timings is biased low). measured.json holds
every figure.

SHAPES are linear layers of real models at real token counts, M from 512 to 8192, named and never
used to choose anything in the kernel, its space or its estimate."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = {
    "llama2_7b_gate_proj_2048tok": (2048, 11008, 4096),
    "llama3_8b_down_proj_4096tok": (4096, 4096, 14336),
    "bert_large_mlp_up_16x512": (8192, 4096, 1024),
    "qwen2_7b_qkv_512tok": (512, 4608, 3584),
    "opt_6_7b_out_proj_1024tok": (1024, 4096, 4096),
    "vit_h14_mlp_down_16x257": (4112, 1280, 5120),
}
CALLS = 20


def write_matmul(path: Path, m: int, n: int, k: int) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [m, k]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT16, [k, n])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [m, n])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)


def build_counting_wgmma(program: Path, vmfb: Path, flags: list[str]) -> tuple[bool, int, str]:
    """iree-compile `program`; (built, wgmma instructions in its PTX, the error's tail)."""
    from tuner.tools import find_tool

    binaries = vmfb.with_suffix(".binaries")
    run = subprocess.run([find_tool("iree-compile"), str(program), *flags, "-o", str(vmfb),
                          f"--iree-hal-dump-executable-binaries-to={binaries}"], capture_output=True, text=True)
    wgmma = sum(p.read_text().count("wgmma.mma_async") for p in binaries.glob("*.ptx"))
    for p in binaries.glob("*"):
        p.unlink()
    binaries.rmdir()
    return run.returncode == 0, wgmma, run.stderr[-300:]


def best_shapes(measured: Path, shape: str, modules: dict, count: int = 2) -> set[tuple[int, int]]:
    """The `count` tile shapes (bm, bn) whose best tiles ran fastest in `shape`'s selection rounds
    of an earlier `measure` (its measured.json; the candidates' tiles from its record, or, in a
    record without them, from `modules`: that run's manifest entry)."""
    import statistics

    record = json.loads(measured.read_text())[shape]
    modules = {c: {"tiles": label} for c, label in record["tiles"].items()} if "tiles" in record else modules
    order = sorted(record["selection_ms"], key=lambda c: statistics.median(record["selection_ms"][c]))
    shapes: list[tuple[int, int]] = []
    for c in order:
        bm, bn = (int(x) for x in modules[c]["tiles"].split()[0].split("x")[:2])
        if (bm, bn) not in shapes:
            shapes.append((bm, bn))
    return set(shapes[:count])


def refined_candidates(rule, ranked: tuple, shapes: set[tuple[int, int]] | None, count: int, tma: bool = False) -> list:
    """The tiles to build: the rule's, then the space's in its order (`ranked`), only those of
    `shapes` where given (a second pass that varies the K step, warps, stages and grouping of
    the shapes an earlier pass found fastest); with `tma`, each after the rule's also in the
    TMA form (where the space holds it), else the space's without it."""
    others = [t for t in ranked if t != rule and not t.tma and (shapes is None or (t.bm, t.bn) in shapes)]
    if tma:
        held = set(ranked)
        others = [x for t in others for x in (t, replace(t, tma=True)) if x in held]
    return [rule, *others][:count]


def compile_all(out: Path, shapes: dict[str, tuple[int, int, int]], candidates: int,
                refine: Path | None = None, tma: bool = False) -> None:
    from tuner.external.gemm_kernel import GemmProblem, ranked_tiles, tiles_for
    from tuner.external.triton_gemm import triton_gemm
    from tuner.rewrite import Rewrite, rewrite_program
    from tuner.rewrite.external_gemm import external_gemms
    from tuner.targets import parse_target
    from tuner.tools import find_tool

    out = out.resolve()
    flags = parse_target("cuda").compile_flags
    earlier = json.loads((out / "manifest.json").read_text()) if refine else {}
    manifest = {}
    for shape, (m, n, k) in shapes.items():
        work = out / shape
        work.mkdir(parents=True, exist_ok=True)
        write_matmul(work / "model.onnx", m, n, k)
        subprocess.run([find_tool("iree-import-onnx"), str(work / "model.onnx"), "-o", str(work / "default.mlir")],
                       check=True)
        programs = {"default": (work / "default.mlir", None)}
        problem = GemmProblem(m, n, k)
        fastest = best_shapes(refine, shape, earlier[shape]["modules"]) if refine else None
        tried = refined_candidates(tiles_for(problem), ranked_tiles(problem), fastest, candidates, tma)
        for i, tiles in enumerate(tried):
            name = f"c{i}"
            rewrite = Rewrite(name, lambda module, tiles=tiles: external_gemms(
                module, lambda p, _: triton_gemm(p, tiles), fuse=False), "")
            try:
                if rewrite_program(work / "default.mlir", rewrite, work / f"{name}.mlir"):
                    programs[name] = (work / f"{name}.mlir", tiles.label)
            except ValueError as e:  # Triton's kernel needs more shared memory than a block has
                print(f"{shape:30s} {name:4s} {tiles.label:22s} declined: {e}", flush=True)
        with ThreadPoolExecutor(2) as pool:
            built = dict(zip(programs, pool.map(lambda item: build_counting_wgmma(item[1][0], work / f"{item[0]}.vmfb", flags),
                                                programs.items())))
        manifest[shape] = {"mnk": [m, n, k], "modules": {}}
        for name, (ok, wgmma, error) in built.items():
            label = programs[name][1] or "IREE's default"
            ok = ok and (name == "default" or wgmma > 0)
            print(f"{shape:30s} {name:8s} {label:22s} {'ok' if ok else 'failed: ' + error} wgmma={wgmma}", flush=True)
            if ok:
                manifest[shape]["modules"][name] = {"vmfb": f"{shape}/{name}.vmfb", "tiles": label}
        for program in work.glob("*.mlir"):
            program.unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def tuned_figures(title: str, modules: dict, runs: dict, errors: dict, flops: float, vendor: str, select: int,
                  rounds: int) -> dict | None:
    """Tune over the right candidates (the runs named c0, c1, ...; c0 the rule's tiles), then the
    figures of the default, the rule's, the tuned and the vendor's run (`runs["torch"]`) in fresh
    interleaved rounds (benchmarks.gpu_common.select_then_confirm); printed, and returned as a
    record (None where no candidate computed a right result)."""
    import statistics

    from benchmarks.gpu_common import select_then_confirm

    right = [c for c in runs if c.startswith("c") and errors[c] < 2e-3]
    wrong = {c: errors[c] for c in runs if c.startswith("c") and c not in right}
    if not right:
        print(f"{title}: no candidate computed a right result ({wrong})", flush=True)
        return None
    figures = {**({"default": "default"} if "default" in runs else {}), "rule": "c0" if "c0" in right else "tuned",
               "tuned": "tuned", vendor: "torch"}
    tuned, chosen, times = select_then_confirm(runs, right, figures, select, rounds, CALLS, on_device=(vendor,))
    med = {name: statistics.median(t) for name, t in times.items()}

    def ratio(over: str, under: str) -> list[float]:  # a round at a time
        return [a / b for a, b in zip(times[over], times[under])]

    record = {
        "tuned_tiles": modules[tuned]["tiles"], "rule_tiles": modules.get("c0", modules[tuned])["tiles"],
        "ms": med, "all_ms": times, "selection_ms": chosen, "errors": errors, "wrong": wrong,
        "tiles": {c: modules[c]["tiles"] for c in chosen},
        "tflops": {name: flops / t / 1e9 for name, t in med.items()},
        "of_vendor": statistics.median(ratio(vendor, "tuned")),
        "of_vendor_range": [min(ratio(vendor, "tuned")), max(ratio(vendor, "tuned"))],
        "rule_of_vendor": statistics.median(ratio(vendor, "rule")),
        "tuned_vs_default": statistics.median(ratio("default", "tuned")) if "default" in times else None}
    print(f"\n{title}: median CUPTI kernel ms of {rounds} rounds, after {select} rounds of {len(right)} candidates")
    for name in figures:
        label = modules.get({"rule": "c0", "tuned": tuned}.get(name, name), {}).get("tiles", "")
        print(f"  {name:8s} {label:22s} {med[name]:8.4f} ms {record['tflops'][name]:6.1f} TFLOP/s", flush=True)
    low, high = record["of_vendor_range"]
    versus = f"; {record['tuned_vs_default']:.2f}x IREE's default" if record["tuned_vs_default"] else ""
    print(f"  tuned {record['of_vendor']:.0%} of {vendor} ({low:.0%}-{high:.0%}), the rule's "
          f"{record['rule_of_vendor']:.0%}{versus}; max error {max(errors[c] for c in right):.1e}", flush=True)
    return record


def summary(report: dict, vendor: str) -> None:
    """The geometric means of the tuned and the rule's kernels' share of the vendor's speed."""
    import numpy as np

    if report:
        of = {key: float(np.exp(np.mean([np.log(r[key]) for r in report.values()]))) for key in ("of_vendor", "rule_of_vendor")}
        print(f"\ngeomean over {len(report)} shapes: tuned {of['of_vendor']:.0%} of {vendor}, the rule's "
              f"{of['rule_of_vendor']:.0%}")


def measure(out: Path, rounds: int, select: int) -> None:
    import numpy as np
    import torch

    from benchmarks.gpu_common import checked_iree_runs

    manifest = json.loads((out / "manifest.json").read_text())
    report = {}
    for shape, entry in manifest.items():
        m, n, k = entry["mnk"]
        rng = np.random.default_rng(0)
        x = rng.uniform(-1, 1, (m, k)).astype(np.float16)
        w = (rng.uniform(-1, 1, (k, n)) / np.sqrt(k)).astype(np.float16)
        tx, tw = torch.from_numpy(x).cuda(), torch.from_numpy(w).cuda()
        reference = tx.float() @ tw.float()
        scale = float(reference.abs().max())
        runs, errors = {}, {}
        checked_iree_runs(out, entry["modules"], "linear", [x, w], reference, scale, runs, errors)
        runs["torch"] = lambda: torch.matmul(tx, tw)
        errors["torch"] = float((runs["torch"]().float() - reference).abs().max()) / scale
        record = tuned_figures(f"{shape} ({m}x{n}x{k})", entry["modules"], runs, errors, 2.0 * m * n * k, "cuBLAS",
                               select, rounds)
        if record:
            report[shape] = {"mnk": [m, n, k], **record}
    (out / "measured.json").write_text(json.dumps(report, indent=1))
    summary(report, "cuBLAS")


def command_line(doc: str, out: str, shapes: dict, candidates: int, compile_all, measure) -> None:
    """The command line of a tuned-against-the-vendor benchmark: `compile` (here) with
    --candidates, --only, --refine; `measure` (on the GPU) with --select and --rounds."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["compile", "measure"])
    parser.add_argument("--out", type=Path, default=Path(out))
    parser.add_argument("--candidates", type=int, default=candidates, help="tiles built per shape (compile)")
    parser.add_argument("--only", nargs="*", choices=list(shapes), help="these shapes alone (compile)")
    parser.add_argument("--refine", type=Path, help="an earlier measure's measured.json: build the variations "
                        "of the two tile shapes that ran fastest there (compile, in the same --out)")
    parser.add_argument("--tma", action="store_true", help="each tile after the rule's also in the TMA form "
                        "(compile)")
    parser.add_argument("--select", type=int, default=2, help="interleaved rounds that choose the tiles (measure)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the figures (measure)")
    args = parser.parse_args()
    if args.step == "compile":
        compile_all(args.out, {s: shapes[s] for s in args.only or shapes}, args.candidates, args.refine,
                    **({"tma": True} if args.tma else {}))
    else:
        measure(args.out, args.rounds, args.select)


if __name__ == "__main__":
    command_line(__doc__, ".gpu-gemm", SHAPES, 12, compile_all, measure)
