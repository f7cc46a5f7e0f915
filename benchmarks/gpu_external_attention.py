"""Attention as an external Hopper kernel (tuner.rewrite.external_attention) against IREE's
default (the spelled-out attention: two batch matmuls and a softmax), IREE's attention op
(raise-attention, the compiler's config) and torch's scaled_dot_product_attention, by CUPTI
kernel time, interleaved; every output checked against an f32 reference.

    .venv/bin/python benchmarks/gpu_external_attention.py compile --out DIR   # here (Triton needed)
    python3 benchmarks/gpu_external_attention.py measure --out DIR --rounds 5  # on the GPU

Each shape is an ONNX-import-style program (torch dialect), `MatMul(Mul(MatMul(Q, Transpose(K0)),
c) [+ mask] -> Softmax, V)` in f16, c = 1/sqrt(d); a causal mask is an additive f16 mask of 0
and -65504 over [m, n], as exporters write one. Held-out shapes: none of them chose the kernel's
tiles (128 query rows where that makes a wave of workgroups, else 64)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# name -> (z, h, m, d, causal mask)
SHAPES = {"clip_vit_l14_4x257": (4, 16, 257, 64, False), "deit_s_8x197": (8, 6, 197, 64, False),
          "whisper_small_enc_1500": (1, 12, 1500, 64, False), "gpt2_causal_1024": (1, 12, 1024, 64, True),
          "mistral_causal_512_d128": (1, 32, 512, 128, True)}
CALLS = 20


def program(z: int, h: int, m: int, d: int, causal: bool) -> str:
    def t(*dims: int) -> str:
        return f"!torch.vtensor<[{','.join(map(str, dims))}],f16>"

    mask_arg = f", %mask: {t(1, 1, m, m)}" if causal else ""
    masked = (f'  %a = torch.operator "onnx.Add"(%t, %mask) : ({t(z, h, m, m)}, {t(1, 1, m, m)}) -> {t(z, h, m, m)}\n'
              if causal else "")
    logits = "%a" if causal else "%t"
    return f"""
func.func @attention(%q: {t(z, h, m, d)}, %k0: {t(z, m, h, d)}, %v: {t(z, h, m, d)}, %c: {t()}{mask_arg}) -> {t(z, h, m, d)}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %kt = torch.operator "onnx.Transpose"(%k0) {{torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]}} : ({t(z, m, h, d)}) -> {t(z, h, d, m)}
  %s = torch.operator "onnx.MatMul"(%q, %kt) : ({t(z, h, m, d)}, {t(z, h, d, m)}) -> {t(z, h, m, m)}
  %t = torch.operator "onnx.Mul"(%s, %c) : ({t(z, h, m, m)}, {t()}) -> {t(z, h, m, m)}
{masked}  %p = torch.operator "onnx.Softmax"({logits}) {{torch.onnx.axis = -1 : si64}} : ({t(z, h, m, m)}) -> {t(z, h, m, m)}
  %o = torch.operator "onnx.MatMul"(%p, %v) : ({t(z, h, m, m)}, {t(z, h, m, d)}) -> {t(z, h, m, d)}
  return %o : {t(z, h, m, d)}
}}
"""


def compile_all(out: Path) -> None:
    from tuner.rewrite import RAISE_ATTENTION_GPU, Rewrite, rewrite_program
    from tuner.rewrite.external_attention import external_attentions
    from tuner.targets import parse_target
    from tuner.tools import find_tool

    out = out.resolve()
    flags = parse_target("cuda").compile_flags
    manifest = {}
    for shape, (z, h, m, d, causal) in SHAPES.items():
        work = out / shape
        work.mkdir(parents=True, exist_ok=True)
        (work / "default.mlir").write_text(program(z, h, m, d, causal))
        programs = {"default": work / "default.mlir"}
        for name, rewrite in (("raised", RAISE_ATTENTION_GPU),
                              ("external", Rewrite("external-flash-attention", external_attentions, ""))):
            changed = rewrite_program(work / "default.mlir", rewrite, work / f"{name}.mlir")
            print(f"{shape:26s} {name:10s} {changed}", flush=True)
            if changed:
                programs[name] = work / f"{name}.mlir"
        manifest[shape] = {"shape": [z, h, m, d, causal], "modules": {}}
        for name, source in programs.items():
            binaries = work / f"{name}-binaries"
            run = subprocess.run([find_tool("iree-compile"), str(source), *flags, "-o", str(work / f"{name}.vmfb"),
                                  f"--iree-hal-dump-executable-binaries-to={binaries}"], capture_output=True, text=True)
            wgmma = sum(p.read_text().count("wgmma.mma_async") for p in binaries.glob("*.ptx"))
            ok = run.returncode == 0 and (name != "external" or wgmma > 0)
            print(f"{shape:26s} {name:10s} {'ok' if ok else 'failed: ' + run.stderr[-300:]} wgmma={wgmma}", flush=True)
            if ok:
                manifest[shape]["modules"][name] = {"vmfb": f"{shape}/{name}.vmfb"}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))


def measure(out: Path, rounds: int) -> None:
    import numpy as np
    import torch

    from benchmarks.gpu_common import checked_iree_runs, interleaved_kernel_ms

    manifest = json.loads((out / "manifest.json").read_text())
    report = {}
    for shape, entry in manifest.items():
        z, h, m, d, causal = entry["shape"]
        rng = np.random.default_rng(0)
        q, v = (rng.uniform(-1, 1, (z, h, m, d)).astype(np.float16) for _ in range(2))
        k0 = rng.uniform(-1, 1, (z, m, h, d)).astype(np.float16)
        c = np.array(1.0 / np.sqrt(d), np.float16)
        args = [q, k0, v, c]
        tq, tk, tv = torch.from_numpy(q).cuda(), torch.from_numpy(k0).cuda().permute(0, 2, 1, 3).contiguous(), \
            torch.from_numpy(v).cuda()
        mask = None
        if causal:
            mask_np = np.triu(np.full((1, 1, m, m), -65504.0, np.float16), 1)
            args.append(mask_np)
            mask = torch.from_numpy(mask_np).cuda()
        scaled_q = (tq * torch.tensor(c).cuda()).half()  # the model multiplies Q by c in f16
        reference = torch.nn.functional.scaled_dot_product_attention(
            scaled_q.float(), tk.float(), tv.float(), attn_mask=None if mask is None else mask.float(), scale=1.0)
        scale = float(reference.abs().max())
        runs, errors = {}, {}
        checked_iree_runs(out, entry["modules"], "attention", args, reference, scale, runs, errors)
        runs["torch"] = lambda: torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=mask, scale=float(c))
        errors["torch"] = float((runs["torch"]().float() - reference).abs().max()) / scale
        times = interleaved_kernel_ms(runs, rounds, CALLS, on_device=("torch",))
        base = float(np.median(times["default"]))
        print(f"\n{shape} ({z}x{h} heads, {m} tokens, head {d}{', causal mask' if causal else ''}): "
              f"median CUPTI kernel ms of {rounds} rounds")
        report[shape] = {}
        for name, t in times.items():
            med = float(np.median(t))
            report[shape][name] = {"ms": med, "all_ms": t, "vs_default": base / med, "error": errors[name]}
            print(f"  {name:10s} {med:8.4f} ms  {base / med:5.2f}x default  max err {errors[name]:.1e} of max|O|")
    (out / "measured.json").write_text(json.dumps(report, indent=1))


def main() -> None:
    from benchmarks.gpu_common import compile_or_measure

    compile_or_measure(__doc__, ".gpu-external-attention", compile_all, measure)


if __name__ == "__main__":
    main()
