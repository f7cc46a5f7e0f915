"""The external implicit-GEMM convolution kernel (tuner.external.triton_conv) alone against torch's
(cuDNN) on the GPU: each shape's output checked against an f32 convolution, then both timed,
interleaved, by CUDA events around 50 calls (`triton.testing.do_bench`), and the kernel's
tiles said. A kernel's time alone is an estimate: in the model it runs inside IREE's program
(benchmarks/export_vs_torch.py gives its CUPTI time there). Where the kernel steps one tap's
channels, it is timed in both forms, the image NCHW (the experiment `external-hopper-conv-nchw`)
and channels-last (NHWC, as `external-hopper-conv` gives it), with torch's time to transpose X
beside them (in the model, IREE's transpose dispatch or its producer's fusion pays it).

    python3 benchmarks/gpu_external_conv.py [--set seen|held-out] [--json OUT]    # on the GPU: torch and Triton

`seen`: the 3x3 convolutions of ResNet-50 and DenseNet-121 at batch 8 that the kernel was written
and its tiles set against. `held-out`: convolutions of models it has not met (VGG-16's, an SD
UNet's ResNet block at 64x64 latents, YOLOv8-s's 3x3s), none used to choose anything."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.external.conv_kernel import ConvProblem, conv_tiles_for, tap_major  # noqa: E402

P1 = (1, 1, 1, 1)
SETS = {
    "seen": {
        "resnet50 layer1 3x3": ConvProblem(8, 64, 56, 56, 64, 3, 3, pads=P1, epilogue=("relu",)),
        "resnet50 layer2 3x3": ConvProblem(8, 128, 28, 28, 128, 3, 3, pads=P1, epilogue=("relu",)),
        "resnet50 layer3 3x3": ConvProblem(8, 256, 14, 14, 256, 3, 3, pads=P1, epilogue=("relu",)),
        "resnet50 layer4 3x3": ConvProblem(8, 512, 7, 7, 512, 3, 3, pads=P1, epilogue=("relu",)),
        "resnet50 stem 7x7/2": ConvProblem(8, 3, 224, 224, 64, 7, 7, (2, 2), (3, 3, 3, 3), epilogue=("relu",)),
        "densenet121 56x56 3x3": ConvProblem(8, 128, 56, 56, 32, 3, 3, pads=P1),
    },
    "held-out": {
        "vgg16 conv3 3x3": ConvProblem(8, 256, 56, 56, 256, 3, 3, pads=P1, epilogue=("row_bias", "relu")),
        "vgg16 conv4 3x3": ConvProblem(8, 512, 28, 28, 512, 3, 3, pads=P1, epilogue=("row_bias", "relu")),
        "sd unet 64x64 3x3": ConvProblem(2, 320, 64, 64, 320, 3, 3, pads=P1, epilogue=("row_bias",)),
        "yolov8s 3x3/2": ConvProblem(8, 128, 80, 80, 256, 3, 3, (2, 2), P1, epilogue=("row_bias",)),
        "resnext50 grouped 3x3": ConvProblem(8, 256, 28, 28, 256, 3, 3, pads=P1, group=32, epilogue=("relu",)),
    },
}


def run(name: str, problem: ConvProblem) -> dict:
    import torch
    import triton.testing

    from tuner.external.triton_conv import constants, conv_jit, grid

    tiles = conv_tiles_for(problem)
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(problem.n, problem.c, problem.h, problem.w, device="cuda", generator=g).half()
    w = (torch.randn(problem.f, problem.c // problem.group, problem.kh, problem.kw, device="cuda", generator=g)
         / (problem.gemm[2] ** 0.5)).half()
    (pt, pl, pb, pr) = problem.pads
    forms = {"nchw": problem}
    if tap_major(problem, tiles):  # the image channels-last too (as external-hopper-conv gives it)
        forms["nhwc"] = replace(problem, channels_last=True)
    has_bias = problem.epilogue[:1] == ("row_bias",)
    b = torch.randn(problem.f, device="cuda", generator=g).half() if has_bias else None
    y = torch.empty(problem.n, problem.f, *problem.out, device="cuda", dtype=torch.half)
    given = w.permute(0, 2, 3, 1).contiguous() if tap_major(problem, tiles) else w  # tap-major, as the rewrite gives it
    x_nhwc = x.permute(0, 2, 3, 1).contiguous()

    def ours(form: ConvProblem):
        values = constants(form, tiles)
        image = x_nhwc if form.channels_last else x
        return lambda: conv_jit()[grid(form, tiles)](image, given, b if b is not None else y, y, **values,
                                                      num_warps=tiles.warps, num_stages=tiles.stages)

    def theirs(a=x, f=w, bias=b):
        out = torch.nn.functional.conv2d(torch.nn.functional.pad(a, (pl, pr, pt, pb)), f, bias, problem.strides, 0,
                                         problem.dilations, problem.group)
        act = [s for s in problem.epilogue if s != "row_bias"]
        return out.relu() if act == ["relu"] else torch.nn.functional.gelu(out) if act == ["gelu"] else out

    reference = theirs(x.float(), w.float(), b.float() if b is not None else None)
    calls = {form: ours(p) for form, p in forms.items()}
    errors = {}
    for form, call in calls.items():
        y.zero_()
        call()
        errors[form] = ((y.float() - reference).norm() / reference.norm()).item()
    calls["torch"] = theirs
    calls["transpose"] = lambda: x.permute(0, 2, 3, 1).contiguous()  # what IREE's transpose of X costs, about
    times = {form: [] for form in calls}
    for _ in range(3):  # interleaved rounds
        for form, call in calls.items():
            times[form].append(triton.testing.do_bench(call, warmup=10, rep=50))
    best = {form: min(t) for form, t in times.items()}
    m, n, k = problem.gemm
    said = "  ".join(f"{form} {best[form] * 1e3:6.1f} us err {errors[form]:.1e} {best['torch'] / best[form]:4.2f}x "
                     f"{2 * m * n * k * problem.group / best[form] / 1e9:4.0f} TFLOP/s" for form in forms)
    print(f"{name:26s} {problem.name:58s} {tiles.label:16s} {said}  torch {best['torch'] * 1e3:6.1f} us  "
          f"(transpose of X {best['transpose'] * 1e3:5.1f} us)", flush=True)
    return {"name": name, "problem": problem.name, "tiles": tiles.label, "rel_error": errors,
            "ms": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", choices=sorted(SETS), action="append", help="default: both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = [run(name, p) for s in args.set or sorted(SETS) for name, p in SETS[s].items()]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
