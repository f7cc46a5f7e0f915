"""Write a bf16 model for the CPU's data-tiled path: the MLP block of Llama-3.2-1B (hidden 2048,
intermediate 8192, SiLU-gated) at a given number of tokens, its three weights in a parameter
archive with random values (as iree-turbine exports them), as linalg MLIR.

    python benchmarks/llama_mlp_bf16.py --out DIR [--tokens 128]
    iree-tuner tune-model DIR/llama_mlp_bf16.mlir --parameters model=DIR/llama_mlp_bf16.irpa --output tm-mlp
    python benchmarks/model_check.py tm-mlp --flags-alone=--iree-opt-data-tiling

The matmuls take bf16 and accumulate in f32; the gate's SiLU and the product with the up
projection are computed in f32 and stored as bf16, as a bf16 model runs them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.cpu_data_tiled import to_bf16_bits, write_weights  # noqa: E402

HIDDEN, INTERMEDIATE = 2048, 8192

_MATMUL_T = ("indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, "
             "affine_map<(m, n, k) -> (m, n)>]")


def model_mlir(tokens: int) -> str:
    t, h, i = tokens, HIDDEN, INTERMEDIATE

    def linear(name: str, x: str, n: int, k: int) -> str:
        return f"""  %{name}_w = util.global.load @{name} : tensor<{n}x{k}xbf16>
  %{name}_e = tensor.empty() : tensor<{t}x{n}xf32>
  %{name}_f = linalg.fill ins(%zero : f32) outs(%{name}_e : tensor<{t}x{n}xf32>) -> tensor<{t}x{n}xf32>
  %{name} = linalg.matmul {_MATMUL_T} ins(%{x}, %{name}_w : tensor<{t}x{k}xbf16>, tensor<{n}x{k}xbf16>)
      outs(%{name}_f : tensor<{t}x{n}xf32>) -> tensor<{t}x{n}xf32>
"""

    par2 = 'indexing_maps = [affine_map<(a, b) -> (a, b)>, affine_map<(a, b) -> (a, b)>, affine_map<(a, b) -> (a, b)>], iterator_types = ["parallel", "parallel"]'
    par1 = 'indexing_maps = [affine_map<(a, b) -> (a, b)>, affine_map<(a, b) -> (a, b)>], iterator_types = ["parallel", "parallel"]'
    return f"""util.global private @gate = #flow.parameter.named<"model"::"gate"> : tensor<{i}x{h}xbf16>
util.global private @up = #flow.parameter.named<"model"::"up"> : tensor<{i}x{h}xbf16>
util.global private @down = #flow.parameter.named<"model"::"down"> : tensor<{h}x{i}xbf16>
func.func @mlp(%x: tensor<{t}x{h}xbf16>) -> tensor<{t}x{h}xbf16> {{
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
{linear("gate", "x", i, h)}{linear("up", "x", i, h)}  %he = tensor.empty() : tensor<{t}x{i}xbf16>
  %hidden = linalg.generic {{{par2}}} ins(%gate, %up : tensor<{t}x{i}xf32>, tensor<{t}x{i}xf32>)
      outs(%he : tensor<{t}x{i}xbf16>) {{
  ^bb0(%g: f32, %u: f32, %o: bf16):
    %n = arith.negf %g : f32
    %ex = math.exp %n : f32
    %d = arith.addf %one, %ex : f32
    %s = arith.divf %g, %d : f32
    %p = arith.mulf %s, %u : f32
    %r = arith.truncf %p : f32 to bf16
    linalg.yield %r : bf16
  }} -> tensor<{t}x{i}xbf16>
{linear("down", "hidden", h, i)}  %oe = tensor.empty() : tensor<{t}x{h}xbf16>
  %out = linalg.generic {{{par1}}} ins(%down : tensor<{t}x{h}xf32>) outs(%oe : tensor<{t}x{h}xbf16>) {{
  ^bb0(%v: f32, %o: bf16):
    %r = arith.truncf %v : f32 to bf16
    linalg.yield %r : bf16
  }} -> tensor<{t}x{h}xbf16>
  return %out : tensor<{t}x{h}xbf16>
}}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=128)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    weights = {name: to_bf16_bits(rng.standard_normal(shape).astype(np.float32) / np.sqrt(shape[1]))
               for name, shape in (("gate", (INTERMEDIATE, HIDDEN)), ("up", (INTERMEDIATE, HIDDEN)),
                                   ("down", (HIDDEN, INTERMEDIATE)))}
    write_weights(args.out / "llama_mlp_bf16.irpa", weights)
    (args.out / "llama_mlp_bf16.mlir").write_text(model_mlir(args.tokens))
    print(f"wrote {args.out}/llama_mlp_bf16.mlir and llama_mlp_bf16.irpa")


if __name__ == "__main__":
    main()
