"""ResNet-50's expand 1x1 convolutions (b8, f16) as IREE 3.13 forms their dispatches under
channels-last with the transposes kept (KEEP_TRANSPOSES): an f16 matmul over the pixels, B the
filter stored K x N, accumulating in f32, then bias + residual, ReLU, narrowed to f16. One program
per shape, for `iree-tuner tune` with each pipeline (benchmarks/gpu_pointwise_kn.sh).

    python benchmarks/pointwise_kn.py OUT_DIR    # writes OUT_DIR/expand_MxNxK.mlir"""

from __future__ import annotations

import sys
from pathlib import Path

# (M = images x pixels, N = output channels, K = input channels): the 56x56 and 28x28 stages'
# (the 14x14 and 7x7 stages' M = 1568 and 392 take tiles of 32 rows or none).
SHAPES = [(25088, 256, 64), (6272, 512, 128)]
PROGRAM = """#lhs = affine_map<(m, n, k) -> (m, k)>
#rhs = affine_map<(m, n, k) -> (k, n)>
#out = affine_map<(m, n, k) -> (m, n)>
#row = affine_map<(m, n) -> (m, n)>
#bias = affine_map<(m, n) -> (n)>
func.func @expand(%x: tensor<{m}x{k}xf16>, %w: tensor<{k}x{n}xf16>, %b: tensor<{n}xf16>, %r: tensor<{m}x{n}xf16>) -> tensor<{m}x{n}xf16> {{
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<{m}x{n}xf32>
  %e16 = tensor.empty() : tensor<{m}x{n}xf16>
  %acc = linalg.fill ins(%zero : f32) outs(%empty : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %mm = linalg.generic {{indexing_maps = [#lhs, #rhs, #out], iterator_types = ["parallel", "parallel", "reduction"]}}
      ins(%x, %w : tensor<{m}x{k}xf16>, tensor<{k}x{n}xf16>) outs(%acc : tensor<{m}x{n}xf32>) {{
  ^bb0(%a: f16, %bb: f16, %c: f32):
    %ae = arith.extf %a : f16 to f32
    %be = arith.extf %bb : f16 to f32
    %p = arith.mulf %ae, %be : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  }} -> tensor<{m}x{n}xf32>
  %act = linalg.generic {{indexing_maps = [#row, #bias, #row, #row], iterator_types = ["parallel", "parallel"]}}
      ins(%mm, %b, %r : tensor<{m}x{n}xf32>, tensor<{n}xf16>, tensor<{m}x{n}xf16>) outs(%e16 : tensor<{m}x{n}xf16>) {{
  ^bb0(%v: f32, %bv: f16, %rv: f16, %o: f16):
    %v16 = arith.truncf %v : f32 to f16
    %s = arith.addf %v16, %bv : f16
    %s2 = arith.addf %s, %rv : f16
    %z16 = arith.constant 0.0 : f16
    %y = arith.maximumf %s2, %z16 : f16
    linalg.yield %y : f16
  }} -> tensor<{m}x{n}xf16>
  return %act : tensor<{m}x{n}xf16>
}}
"""


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for m, n, k in SHAPES:
        (out / f"expand_{m}x{n}x{k}.mlir").write_text(PROGRAM.format(m=m, n=n, k=k))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
