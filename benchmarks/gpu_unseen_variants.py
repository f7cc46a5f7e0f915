"""Compile-only on cuda (no GPU needed): Stable-Diffusion-style blocks other than the ones the GPU
work was done on, through what tune-model would do with them: the GPU rewrites the flag stage
offers (raise-attention, pointwise-conv-as-matmul), the flags it chose on the H100 models
(channels-last and direct convolutions for the ResNet blocks, aggressive fusion for the attention
blocks), then for each convolution and attention dispatch the pipeline that takes it and its first
candidates, each compiled and read back. A dispatch no pipeline takes is said with why.

    python benchmarks/gpu_unseen_variants.py --out /tmp/unseen [--candidates 4]
    python benchmarks/gpu_unseen_variants.py --out /tmp/unseen --im2col   # the convolution
        # variants (and SD 1.x's first level, ResNet-34) through conv-as-im2col-matmul and
        # pointwise-conv-as-matmul, each batch matmul formed with the mma.sync kernel's candidates

Variants (examples/onnx_models.py's builders with other arguments): SD 1.x attention (8 heads of
40, CLIP-L's 768-wide context), SDXL attention (640 channels, 10 heads of 64, a 2048-wide context,
32x32), a ResNet block widening 320 -> 640 through a 1x1 shortcut, a 1280-channel block at
16x16, batch 1, and a UNet level's resampling (a nearest-neighbour 2x upsample, as ONNX's Resize,
with a 3x3 convolution, then a 3x3 convolution of stride 2), whose upsample is checked too.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from iree.compiler import ir  # noqa: E402

from pipelines import DispatchKind, pipeline_for  # noqa: E402
from pipelines.model_flags import AGGRESSIVE_FUSION, CHANNELS_LAST, DIRECT_CONVOLUTION, short_flags  # noqa: E402
from pipelines.llvmgpu_mma_sync import LLVMGPUMmaSync  # noqa: E402
from pipelines.registry import why_untunable  # noqa: E402
from tuner.build.builder import LocalBuilder, build_all  # noqa: E402
from tuner.discovery.program import discover_program  # noqa: E402
from tuner.input.models import program_source  # noqa: E402
from tuner.rewrite import REWRITES, combined, rewrite_program  # noqa: E402
from tuner.specs.candidates import generate_candidates  # noqa: E402
from tuner.stages.builtin import with_flags  # noqa: E402
from tuner.targets import parse_target  # noqa: E402


def _examples():
    spec = importlib.util.spec_from_file_location("onnx_models", ROOT / "examples" / "onnx_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variants(m) -> dict:
    """name -> (ONNX model, the flag sets to compile it under, the dispatch kinds checked)."""
    res_flags = ((), CHANNELS_LAST, CHANNELS_LAST + DIRECT_CONVOLUTION)
    attn_flags = (AGGRESSIVE_FUSION,)
    kinds = (DispatchKind.CONVOLUTION, DispatchKind.ATTENTION)
    return {
        "sd15_attention": (m.unet_attention_block(heads=8, context_dim=768), attn_flags, kinds),
        "sdxl_attention": (m.unet_attention_block(channels=640, size=32, heads=10, context_dim=2048), attn_flags,
                           kinds),
        "resnet_widen_320_640": (m.unet_resnet_block(channels=320, out_channels=640, size=32), res_flags, kinds),
        "resnet_1280_b1": (m.unet_resnet_block(batch=1, channels=1280, size=16), res_flags, kinds),
        "sampling": (m.unet_sampling_block(), res_flags, (*kinds, DispatchKind.ELEMENTWISE)),
    }


def _compiled(label: str, builder: LocalBuilder, candidates) -> bool:
    """Build the candidates and say how many compiled and carry their config; whether all did
    (and there was one besides the baseline)."""
    start = time.time()
    built = build_all(builder, candidates)
    bad = {b.result.label: b.result.error.splitlines()[0][:160] for b in built if not b.result.ok}
    print(f"{label}: {len(built) - len(bad)} of {len(built)} compiled and carry their config, "
          f"{time.time() - start:.0f} s" + (f"; failed: {bad}" if bad else ""), flush=True)
    return not bad and len(built) > 1


def im2col_variants(m) -> dict:
    """name -> ONNX model: the convolution blocks above, SD 1.x's first level (320 channels at
    64x64) and ResNet-34 at batch 4 (its 56, 28, 14 and 7 pixel rows: the rewrite pads them)."""
    return {"resnet_widen_320_640": m.unet_resnet_block(channels=320, out_channels=640, size=32),
            "resnet_1280_b1": m.unet_resnet_block(batch=1, channels=1280, size=16),
            "resnet_320_64x64": m.unet_resnet_block(channels=320, size=64),
            "sampling": m.unet_sampling_block(),
            "resnet34_b4": m.resnet_basic(blocks=(3, 4, 6, 3), batch=4, name="resnet34")}


def check_im2col(out: Path, candidates: int) -> int:
    """Each variant rewritten with conv-as-im2col-matmul (and pointwise-conv-as-matmul), and every
    batch matmul it forms given to the mma.sync kernel: its first candidates compiled and read
    back. Returns how many formed matmuls the kernel did not take or had a candidate fail."""
    import onnx

    cuda = parse_target("cuda:sm_80")
    rewrite = combined([r for r in REWRITES["gpu"] if r.name in ("pointwise-conv-as-matmul", "conv-as-im2col-matmul")])
    failed = 0
    for name, model in im2col_variants(_examples()).items():
        onnx.save(model, out / f"{name}.onnx")
        program, imported = out / f"{name}.im2col.mlir", program_source(out / f"{name}.onnx", out, cuda)
        changed = rewrite_program(imported, rewrite, program)
        print(f"{name}: {len(changed)} rewritten", flush=True)
        with ir.Context() as ctx:
            before = {d.shape_name for d in discover_program(imported, cuda, ctx).dispatches}
            formed = {}  # the contractions the rewrites formed (shapes the model did not hold)
            for d in discover_program(program, cuda, ctx).dispatches:
                if d.kind == DispatchKind.CONTRACTION and d.shape_name not in before:
                    formed.setdefault(d.shape_name, d)
            for shape, d in formed.items():
                pipeline = pipeline_for(d, "llvmgpu_mma_sync")
                if pipeline is None or pipeline.name != "llvmgpu_mma_sync":
                    failed += 1
                    print(f"  {shape}: not taken by the mma.sync kernel: {LLVMGPUMmaSync().declines(d)}")
                    continue
                # Built as tune-model on the H100 builds them: timed inside the model (CUPTI).
                builder = LocalBuilder.of(program, cuda, out / "builds" / f"{name}-im2col-{shape}", ctx, in_model=True)
                failed += not _compiled(f"  {shape}", builder,
                                        generate_candidates(d, pipeline, candidates, ctx, cuda.spec_entry))
    return failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--candidates", type=int, default=4, help="Candidates per dispatch, the baseline besides.")
    parser.add_argument("--im2col", action="store_true", help="The convolution variants through conv-as-im2col-matmul.")
    args = parser.parse_args()
    import onnx

    if args.im2col:
        args.out.mkdir(parents=True, exist_ok=True)
        failed = check_im2col(args.out, args.candidates)
        print("every formed matmul taken, every candidate compiled" if not failed
              else f"{failed} formed matmuls not taken or with failed candidates")
        sys.exit(1 if failed else 0)

    cuda = parse_target("cuda:sm_80")
    rewrite = combined([r for r in REWRITES["gpu"] if r.name in ("raise-attention", "pointwise-conv-as-matmul")])
    args.out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name, (model, flag_sets, kinds) in variants(_examples()).items():
        onnx.save(model, args.out / f"{name}.onnx")
        imported = program_source(args.out / f"{name}.onnx", args.out, cuda)
        program = args.out / f"{name}.gpu.mlir"
        changed = rewrite_program(imported, rewrite, program)
        print(f"{name}: {'; '.join(changed) or 'nothing rewritten'}", flush=True)
        if not changed:
            program = imported
        for flags in flag_sets:
            with ir.Context() as ctx:
                for d in discover_program(program, cuda, ctx, flags).dispatches:
                    if d.kind not in kinds:
                        continue
                    short = d.name.split("_dispatch_")[-1]
                    pipeline = pipeline_for(d)
                    if pipeline is None:
                        failed += 1
                        print(f"  [{short_flags(' '.join(flags))}] {short}: not tunable: {why_untunable(d)}")
                        continue
                    candidates = generate_candidates(d, pipeline, args.candidates, ctx, cuda.spec_entry)
                    builder = LocalBuilder.of(program, with_flags(cuda, flags),
                                              args.out / "builds" / f"{name}-{len(flags)}-{short}", ctx)
                    label = f"  [{short_flags(' '.join(flags))}] {short} ({pipeline.name})"
                    failed += not _compiled(label, builder, candidates)
    print("every dispatch checked tunable, every candidate compiled" if not failed
          else f"{failed} dispatches not tunable or with failed candidates")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
