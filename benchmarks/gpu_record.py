"""On the GPU machine (runtime wheel + torch): time a recorded space compiled by
`benchmarks/record_space.py record --compile-only` (the tuner's own benchmark stage, dispatch
alone, numerics off: only the dispatch modules travel), and with --torch, time the winner and the
default against torch.matmul (cuBLAS) in interleaved rounds.

    python3 benchmarks/gpu_record.py DIR [--torch] [--rounds 6]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--torch", action="store_true")
    parser.add_argument("--torch-only", action="store_true", help="Only the torch comparison of a measured DIR.")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--confirm-top", type=int, default=4, help="Candidates confirmed in interleaved rounds.")
    args = parser.parse_args()
    from tuner.benchmark_dir import benchmark_dir
    from tuner.build.manifest import Manifest
    from tuner.core.settings import EvalSettings

    last = {}

    def progress(phase: str, done: int, total: int) -> None:
        if done != last.get(phase) and (done % 25 == 0 or done == total):
            print(f"{args.dir.name} {phase}: {done}/{total}", flush=True)
        last[phase] = done

    if not args.torch_only:
        measured = benchmark_dir(args.dir, ("cuda",), EvalSettings(check_numerics=False, repetitions=5, confirm_rounds=4,
                                                                  confirm_top=args.confirm_top),
                                 progress)
        print(measured.ranking.verdict, flush=True)
    if args.torch or args.torch_only:
        from benchmarks.gpu_common import default_tuned_torch
        from benchmarks.gpu_matmul import torch_matmul

        data = json.loads((args.dir / "results.json").read_text())
        manifest = Manifest.read(args.dir)
        med = default_tuned_torch(data, manifest, args.dir, torch_matmul(list(manifest.inputs(args.dir))), args.rounds)
        print(json.dumps({"torch_compare": med, "tuned_share_of_torch": med["torch"] / med["tuned"],
                          "default_share_of_torch": med["torch"] / med["default"]}), flush=True)


if __name__ == "__main__":
    main()
