"""Inputs for the iree-test-suites toy Llama's `decode_bs1` (issue 36: a model with initializers
and external parameters), as a user of that model would give them: one token, a sequence of 40,
its two KV-cache pages and a cache of 8 pages (random, f16). The model and its parameters are
iree-test-suites' `sharktank_models/llama3.1/assets/toy_llama.mlir` and `toy_llama.irpa`.

    python benchmarks/toy_llama_inputs.py DIR
    iree-tuner tune toy_llama.mlir --parameters model=$PWD/toy_llama.irpa \\
        --input DIR/tokens.npy --input DIR/lengths.npy --input DIR/positions.npy \\
        --input DIR/pages.npy --input DIR/cache.npy --budget 8 --output OUT
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

PAGE = 24576  # f16 values of one KV-cache page in this toy model (its decode_bs1 signature)


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    arrays = {"tokens": np.array([[17]], np.int64), "lengths": np.array([40], np.int64),
              "positions": np.array([40], np.int64), "pages": np.arange(2, dtype=np.int64).reshape(1, 2),
              "cache": (rng.standard_normal((8, PAGE)) * 0.1).astype(np.float16)}
    for name, array in arrays.items():
        np.save(out / f"{name}.npy", array)
    print(f"wrote {', '.join(f'{n}.npy' for n in arrays)} into {out}")


if __name__ == "__main__":
    main()
