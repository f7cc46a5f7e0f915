"""The external implicit-GEMM convolution kernel (tuner.external.triton_conv) run by Triton's
interpreter on the CPU (`TRITON_INTERPRET=1`, numpy underneath) against torch's f32 convolution:
the kernel's index arithmetic, masks and epilogue checked where no GPU is (the GPU's own
compilation of it is checked by benchmarks/gpu_external_conv.py and in the model by
benchmarks/export_vs_torch.py). Each case exercises one path of the kernel; small shapes, so
that the interpreter takes seconds.

    python benchmarks/interpret_external_conv.py      # needs torch and triton (CPU builds are enough)

Prints each case's relative error (max |y - ref| / max |ref|) and exits non-zero where one is
over 2e-3 (f16 rounding of the output is 5e-4 of the largest value)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tuner.external.conv_kernel import ConvProblem, conv_tiles_for  # noqa: E402

P1 = (1, 1, 1, 1)
CASES = {
    "one tap's channels a step, stride 2, bias + relu": ConvProblem(2, 64, 9, 9, 64, 3, 3, (2, 2), P1,
                                                                    epilogue=("row_bias", "relu")),
    "groups of 32 channels, one tap a step": ConvProblem(1, 96, 7, 7, 192, 3, 3, pads=P1, group=3),
    "48 channels: 16 a step, filters masked (40)": ConvProblem(2, 48, 5, 6, 40, 3, 3, pads=P1, epilogue=("row_bias",)),
    "8 channels: k in the filter's order, masked": ConvProblem(2, 8, 9, 7, 32, 3, 3, pads=P1,
                                                               epilogue=("row_bias", "relu")),
    "a stem: 3 channels, 7x7 stride 2, uneven pads": ConvProblem(2, 3, 11, 11, 16, 7, 7, (2, 2), (3, 2, 3, 1)),
    "dilation 2, groups of 4 channels": ConvProblem(1, 16, 8, 8, 64, 3, 3, pads=P1, dilations=(2, 2), group=4,
                                                    epilogue=("row_bias",)),
    "strided 1x1, bias + gelu": ConvProblem(2, 64, 6, 6, 96, 1, 1, (2, 2), epilogue=("row_bias", "gelu")),
}


def error_of(problem: ConvProblem) -> float:
    import torch

    from tuner.external.triton_conv import conv_kernel, constants, grid

    tiles = conv_tiles_for(problem)
    values = constants(problem, tiles)
    torch.manual_seed(0)
    x = torch.randn(problem.n, problem.c, problem.h, problem.w, dtype=torch.float16)
    w = torch.randn(problem.f, problem.c // problem.group, problem.kh, problem.kw, dtype=torch.float16)
    b = torch.randn(problem.f, dtype=torch.float16)
    y = torch.empty(problem.n, problem.f, *problem.out, dtype=torch.float16)
    conv_kernel()[grid(problem, tiles)](x, w, b if values["HAS_BIAS"] else y, y, **values)
    pt, pl, pb, pr = problem.pads
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(x.float(), (pl, pr, pt, pb)), w.float(),
                                     b.float() if values["HAS_BIAS"] else None, problem.strides, 0, problem.dilations,
                                     problem.group)
    if "relu" in problem.epilogue:
        ref = ref.relu()
    if "gelu" in problem.epilogue:
        ref = torch.nn.functional.gelu(ref)
    return ((y.float() - ref).abs().max() / ref.abs().max()).item()


def main() -> None:
    worst = 0.0
    for what, problem in CASES.items():
        error = error_of(problem)
        worst = max(worst, error)
        tiles = conv_tiles_for(problem)
        print(f"{what:50s} {problem.name:50s} {tiles.label:16s} error {error:.1e}", flush=True)
    sys.exit(0 if worst <= 2e-3 else 1)


if __name__ == "__main__":
    main()
