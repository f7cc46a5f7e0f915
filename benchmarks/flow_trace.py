"""Which of the flow's folders one `tune` enters, in the order it enters them (issue 37: following a
dispatch from `tune` through search, build, run and report should enter each folder once, in
order, bar the loop between the search and the evaluation):

    python benchmarks/flow_trace.py [INPUT.mlir] [--budget 4]

Runs `iree-tuner tune INPUT` in this process (llvm-cpu, into a temporary directory) with a
profile hook on every thread that records each call into a function of tuner/ by the step it
belongs to: the folder of tuner/ (tuner/search/... is "search") or the top-level module
(tuner/ranking.py is "ranking"). Shared types and helpers (tuner/core, errors, tools, run_dir,
targets, versions) are under every step and left out, as are pipelines/ and constraints/ (the
problem's library). Prints the sequence of steps entered, consecutive repeats folded, on the main
thread and on the build threads, how many times each step was entered, and every call that
climbs back up the flow (a step calling a function of a step before it in FLOW), by the pair of
steps and the function called."""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# The flow's order (ARCHITECTURE.md): a call from a step into one before it climbs back up.
FLOW = ("cli", "api", "driver", "strategies", "input", "profiling", "discovery", "problem", "search", "specs",
        "build", "evaluation", "cluster", "ranking", "store", "report", "stages", "rewrite")
UNDER_EVERY_STEP = {"core", "errors", "tools", "run_dir", "targets", "versions", "__init__", "__main__"}


def step_of(filename: str) -> str | None:
    """The flow step a source file belongs to, or None (not tuner/'s, or under every step)."""
    path = Path(filename)
    try:
        parts = path.resolve().relative_to(REPO / "tuner").parts
    except ValueError:
        return None
    step = parts[0].removesuffix(".py")
    return None if step in UNDER_EVERY_STEP else step


def trace(argv: list[str]) -> tuple[dict[str, list[str]], Counter]:
    """The steps entered, in order, by thread name (consecutive repeats folded), and the calls
    that climb back up the flow: (caller step, callee step, function) -> how many."""
    from tuner.cli import main as cli

    sequences: dict[str, list[str]] = {}
    climbs: Counter = Counter()
    lock = threading.Lock()

    def hook(frame, event, arg):
        if event != "call":
            return
        step = step_of(frame.f_code.co_filename)
        if step is None:
            return
        caller = step_of(frame.f_back.f_code.co_filename) if frame.f_back else None
        if caller in FLOW and step in FLOW and FLOW.index(step) < FLOW.index(caller):
            with lock:
                climbs[(caller, step, frame.f_code.co_qualname)] += 1
        name = threading.current_thread().name
        key = "main" if name == "MainThread" else name.rstrip("_0123456789")
        with lock:
            seq = sequences.setdefault(key, [])
            if not seq or seq[-1] != step:
                seq.append(step)

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        cli.main(argv, standalone_mode=False)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return sequences, climbs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("input", nargs="?", type=Path, default=REPO / "sample_dispatches" / "matmul_1024x1024x1024_f32.mlir")
    parser.add_argument("--budget", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        sequences, climbs = trace(["tune", str(args.input), "--budget", str(args.budget), "--confirm-rounds", "2",
                           "--repetitions", "2", "--output", str(Path(out) / "run"), "--quiet-wait", "0"])
    for thread, seq in sequences.items():
        print(f"{thread}: {' -> '.join(seq)}")
        entered = Counter(seq)
        print(f"  entered: {', '.join(f'{s} {n}x' for s, n in entered.items())}")
    print("calls climbing back up the flow (caller -> callee: function, times):")
    for (caller, callee, function), n in sorted(climbs.items()):
        print(f"  {caller} -> {callee}: {function}, {n}x")


if __name__ == "__main__":
    main()
