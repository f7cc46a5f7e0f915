"""Record the CUPTI kernel records of a few calls of a compiled model, with a kernel of another
module (torch's) between them, as the test fixture tests/fixtures/cupti/NAME.json:

    python benchmarks/record_kernels.py MODULE.vmfb FUNCTION INPUT.npy... --runs PROFILE.json \
        [--torch KERNELS.json] --out FIXTURE.json

Uses the tuner's own tracer (tuner.evaluation.cupti) and the runs per call the profile listed;
`--torch`: benchmarks/gpu_model_kernels.py's figures for the same module (its "default" entry),
stored beside the records as each dispatch's independent time per call.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.evaluation import cupti  # noqa: E402
from tuner.evaluation.in_model import LoadedModule  # noqa: E402
from tuner.evaluation.runtime_tools import ModuleRun  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("module", type=Path)
    parser.add_argument("function")
    parser.add_argument("inputs", nargs="*", type=Path)
    parser.add_argument("--runs", type=Path, required=True, help="`iree-tuner dispatches --json` of the model")
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--torch", type=Path, default=None, help="gpu_model_kernels.py --json of the same module")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch

    loaded = LoadedModule(args.module, ModuleRun("cuda", args.function, tuple(args.inputs)))
    loaded.call()
    a = torch.randn(256, 256, device="cuda")
    with cupti.tracer().trace() as records:
        for _ in range(args.calls):
            loaded.call()
            (a @ a).sum().item()  # another module's kernels, between the calls
        torch.cuda.synchronize()
    runs = {r["name"]: r["runs"] for r in json.loads(args.runs.read_text())["dispatches"]}
    fixture = {"calls": args.calls, "runs": runs, "records": [r.to_json() for r in records]}
    if args.torch:
        by_key = json.loads(args.torch.read_text())["default"]["dispatch_ms"]
        fixture["torch_profiler_ms"] = {n: by_key[re.search(r"(dispatch_\d+)", n).group(1)] for n in runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(fixture, indent=0))
    print(f"{len(records)} records, {args.out}")


if __name__ == "__main__":
    main()
