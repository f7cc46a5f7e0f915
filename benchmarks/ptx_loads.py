"""How each contraction and convolution kernel of a CUDA build loads its operands, read from the
PTX: mma.sync instructions, scalar 2-byte global loads (`ld.global.nc.b16`, one element each),
16-byte global loads (`ld.global.nc.v4`), and the shared-memory loads and `ldmatrix`. No GPU
needed: the program is compiled for cuda (sm_80) here.

    python benchmarks/ptx_loads.py PROGRAM.mlir [--flag=... ...]

ResNet-50's channels-last build (BENCHMARKS.md, issue 35): its 3x3 convolutions whose config
pads the output rows (14 and 7 columns padded to 16) load the gathered operand with 64
`ld.global.nc.b16` per K step; an unpadded one loads it with `ld.global.nc.v4`."""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tuner.targets import parse_target  # noqa: E402

COUNTED = {"mma": r"mma\.sync", "ld.global.b16": r"ld\.global\.nc\.b16", "ld.global.v4": r"ld\.global\.nc\.v4",
           "ld.shared": r"ld\.shared\.", "ldmatrix": r"ldmatrix"}


def kernel_loads(ptx: str) -> dict[str, dict[str, int]]:
    """Per kernel entry of a PTX module whose name says contraction or convolution: the counts."""
    out = {}
    for entry in re.split(r"\.visible \.entry ", ptx)[1:]:
        name = entry.split("(")[0]
        if any(kind in name for kind in ("conv", "matmul", "contract")):
            out[name] = {label: len(re.findall(pattern, entry)) for label, pattern in COUNTED.items()}
    return out


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    program, flags = sys.argv[1], sys.argv[2:]
    with tempfile.TemporaryDirectory() as work:
        subprocess.run(["iree-compile", program, *parse_target("cuda").compile_flags, *flags,
                        f"--iree-hal-dump-executable-binaries-to={work}", "-o", str(Path(work) / "m.vmfb")], check=True)
        ptx = "\n".join(p.read_text() for p in sorted(Path(work).glob("*.ptx")))
    print(f"{'kernel':72s} " + " ".join(f"{label:>13s}" for label in COUNTED))
    for name, counts in kernel_loads(ptx).items():
        print(f"{name[:72]:72s} " + " ".join(f"{counts[label]:13d}" for label in COUNTED))


if __name__ == "__main__":
    main()
