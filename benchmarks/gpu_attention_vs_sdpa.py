"""The external Hopper flash-attention kernel tuned on prefill attentions of real models against
torch's scaled_dot_product_attention (issue 59): plain iree-compile builds, CUPTI kernel time,
interleaved, every output checked.

    .venv/bin/python benchmarks/gpu_attention_vs_sdpa.py compile --out DIR [--candidates 10]   # here (Triton needed)
    python3 benchmarks/gpu_attention_vs_sdpa.py measure --out DIR --rounds 5                    # on the GPU

`compile` writes, for each of SHAPES, the attention as a torch program from iree-turbine carries
it (`torch.aten.scaled_dot_product_attention` of Q [z, h, s, d] and K, V [z, kv, s, d], its
is_causal and enable_gqa flags, the scale left to 1/sqrt(d)), and builds it with IREE's default
and with the attention as the external kernel (tuner.rewrite.external_attention) at each of the
first `--candidates` tiles the tuner would try (tuner.external.attention_kernel.
attention_tile_candidates: the rule's, then the Z3 space's by its estimate; `--refine` as in
benchmarks/gpu_gemm_vs_cublas.py); each build's PTX is read back (it must hold wgmma).
`measure` checks every module's output against torch's f32 SDPA, then tunes and reports as benchmarks/gpu_gemm_vs_cublas.py does (`tuned_figures`), torch's SDPA
(is_causal, enable_gqa: the flash kernel where it takes them) beside.

SHAPES are prefill attentions of real models, 4 to 32 heads of 64 or 128, 1k to 8k tokens,
causal and not, grouped-query; named, and never used to choose anything in the kernel, its space
or its estimate."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.gpu_gemm_vs_cublas import (build_counting_wgmma, best_shapes, command_line, refined_candidates,  # noqa: E402
                                          summary, tuned_figures)

# name -> (z, heads, kv heads, tokens, head width, causal)
SHAPES = {
    "llama2_7b_prefill_2k": (1, 32, 32, 2048, 128, True),
    "llama3_8b_prefill_8k_gqa": (1, 32, 8, 8192, 128, True),
    "mistral_7b_prefill_4k_gqa": (1, 32, 8, 4096, 128, True),
    "sdxl_unet_self_attn_64x64_b2": (2, 10, 10, 4096, 64, False),
    "bert_large_b4_1k": (4, 16, 16, 1024, 64, False),
    "whisper_large_encoder_1500": (1, 20, 20, 1500, 64, False),
}


def program(z: int, h: int, kv: int, s: int, d: int, causal: bool) -> str:
    def t(heads: int) -> str:
        return f"!torch.vtensor<[{z},{heads},{s},{d}],f16>"

    flag = "true" if causal else "false"
    gqa = "true" if kv != h else "false"
    return f"""
func.func @attention(%q: {t(h)}, %k: {t(kv)}, %v: {t(kv)}) -> {t(h)} {{
  %none = torch.constant.none
  %zero = torch.constant.float 0.000000e+00
  %causal = torch.constant.bool {flag}
  %gqa = torch.constant.bool {gqa}
  %r = torch.aten.scaled_dot_product_attention %q, %k, %v, %none, %zero, %causal, %none, %gqa : {t(h)}, {t(kv)}, {t(kv)}, !torch.none, !torch.float, !torch.bool, !torch.none, !torch.bool -> {t(h)}
  return %r : {t(h)}
}}
"""


def compile_all(out: Path, shapes: dict[str, tuple], candidates: int, refine: Path | None = None,
                tma: bool = False) -> None:
    from tuner.external.attention_kernel import AttentionProblem, attention_tiles_for, ranked_attention_tiles
    from tuner.rewrite import Rewrite, rewrite_program
    from tuner.rewrite.external_attention import external_attentions
    from tuner.targets import parse_target

    out = out.resolve()
    flags = parse_target("cuda").compile_flags
    earlier = json.loads((out / "manifest.json").read_text()) if refine else {}
    manifest = {}
    for shape, dims in shapes.items():
        work = out / shape
        work.mkdir(parents=True, exist_ok=True)
        (work / "default.mlir").write_text(program(*dims))
        z, h, kv, s, d, causal = dims
        problem = AttentionProblem(z, h, s, s, d, d, causal=causal, scale=d ** -0.5, kv_heads=kv if kv != h else 0)
        programs = {"default": (work / "default.mlir", "IREE's default")}
        fastest = best_shapes(refine, shape, earlier[shape]["modules"]) if refine else None
        for i, tiles in enumerate(refined_candidates(attention_tiles_for(problem), ranked_attention_tiles(problem),
                                                     fastest, candidates, tma)):
            name = f"c{i}"
            rewrite = Rewrite(name, lambda module, tiles=tiles: external_attentions(module, tiles=lambda _: tiles), "")
            try:
                changed = rewrite_program(work / "default.mlir", rewrite, work / f"{name}.mlir")
            except ValueError as e:
                changed = f"declined: {e}"
            if changed and (work / f"{name}.mlir").exists() and "hal.dispatch.extern" in (work / f"{name}.mlir").read_text():
                programs[name] = (work / f"{name}.mlir", tiles.label)
            else:
                print(f"{shape:30s} {name:4s} {tiles.label:16s} not rewritten: {changed}", flush=True)
        with ThreadPoolExecutor(2) as pool:
            built = dict(zip(programs, pool.map(lambda item: build_counting_wgmma(item[1][0], work / f"{item[0]}.vmfb", flags),
                                                programs.items())))
        manifest[shape] = {"dims": list(dims), "flops": 4.0 * dims[0] * dims[1] * dims[3] ** 2 * dims[4] / (2 if dims[5] else 1),
                           "modules": {}}
        for name, (ok, wgmma, error) in built.items():
            ok = ok and (name == "default" or wgmma > 0)
            print(f"{shape:30s} {name:8s} {programs[name][1]:16s} {'ok' if ok else 'failed: ' + error} wgmma={wgmma}",
                  flush=True)
            if ok:
                manifest[shape]["modules"][name] = {"vmfb": f"{shape}/{name}.vmfb", "tiles": programs[name][1]}
        for source in work.glob("*.mlir"):
            source.unlink()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def measure(out: Path, rounds: int, select: int) -> None:
    import numpy as np
    import torch

    from benchmarks.gpu_common import checked_iree_runs

    manifest = json.loads((out / "manifest.json").read_text())
    report = {}
    for shape, entry in manifest.items():
        z, h, kv, s, d, causal = entry["dims"]
        rng = np.random.default_rng(0)
        q = rng.uniform(-1, 1, (z, h, s, d)).astype(np.float16)
        k, v = (rng.uniform(-1, 1, (z, kv, s, d)).astype(np.float16) for _ in range(2))
        tq, tk, tv = (torch.from_numpy(x).cuda() for x in (q, k, v))
        grouped = kv != h
        reference = torch.nn.functional.scaled_dot_product_attention(
            tq.float(), tk.float().repeat_interleave(h // kv, 1), tv.float().repeat_interleave(h // kv, 1),
            is_causal=causal)
        scale = float(reference.abs().max())
        runs, errors = {}, {}
        checked_iree_runs(out, entry["modules"], "attention", [q, k, v], reference, scale, runs, errors)
        runs["torch"] = lambda: torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal,
                                                                                 enable_gqa=grouped)
        errors["torch"] = float((runs["torch"]().float() - reference).abs().max()) / scale
        title = f"{shape} ({z}x{h} heads{f' on {kv} K/V heads' if grouped else ''}, {s} tokens, head {d}" \
                f"{', causal' if causal else ''})"
        record = tuned_figures(title, entry["modules"], runs, errors, entry["flops"], "SDPA", select, rounds)
        if record:
            report[shape] = {"dims": entry["dims"], **record}
    (out / "measured.json").write_text(json.dumps(report, indent=1))
    summary(report, "SDPA")


if __name__ == "__main__":
    command_line(__doc__, ".gpu-attn", SHAPES, 10, compile_all, measure)
