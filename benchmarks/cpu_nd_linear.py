"""The nd-linear-as-matmul rewrite on the CPU: an MLP on NHWC activations as torch exports
nn.Linear on a rank-4 tensor (ConvNeXt-T's first stage: [8,56,56,96] by [96,384], GELU-free: Add,
Relu, MatMul back; f32), built for llvm-cpu as imported and rewritten, each with IREE's default
flags and with data tiling (the CPU flag stage's choice), and timed side by side in interleaved
rounds (iree-benchmark-module). The ratio to read is rewritten / imported under the same flags.

    python benchmarks/cpu_nd_linear.py [--work DIR] [--rounds 6] [--batch 8 --size 56 --channels 96]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from side_by_side import interleaved  # noqa: E402
from tuner.core.running import ModuleRun  # noqa: E402
from tuner.evaluation.runtime_tools import run_once  # noqa: E402
from tuner.input.models import program_source  # noqa: E402
from tuner.rewrite import ND_LINEAR_AS_MATMUL, rewrite_program  # noqa: E402
from tuner.targets import parse_target  # noqa: E402
from tuner.tools import find_tool  # noqa: E402

DATA_TILING = ("--iree-opt-data-tiling",)


def mlp(batch: int, size: int, channels: int):
    from onnx import TensorProto as TP, helper as h, numpy_helper as nh

    rng = np.random.default_rng(0)
    wide = 4 * channels
    inits = [nh.from_array((rng.standard_normal((channels, wide)) * 0.05).astype(np.float32), "W1"),
             nh.from_array((rng.standard_normal((wide, channels)) * 0.05).astype(np.float32), "W2"),
             nh.from_array(np.zeros(wide, np.float32), "b1")]
    nodes = [h.make_node("MatMul", ["x", "W1"], ["h0"]), h.make_node("Add", ["h0", "b1"], ["h1"]),
             h.make_node("Relu", ["h1"], ["h2"]), h.make_node("MatMul", ["h2", "W2"], ["y"])]
    shape = [batch, size, size, channels]
    graph = h.make_graph(nodes, "main_graph", [h.make_tensor_value_info("x", TP.FLOAT, shape)],
                         [h.make_tensor_value_info("y", TP.FLOAT, shape)], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    return model, shape


def main() -> None:
    import subprocess

    import onnx

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path("bench-nd-linear"))
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--size", type=int, default=56)
    parser.add_argument("--channels", type=int, default=96)
    args = parser.parse_args()
    cpu = parse_target("llvm-cpu")
    args.work.mkdir(parents=True, exist_ok=True)
    model, shape = mlp(args.batch, args.size, args.channels)
    onnx.save(model, args.work / "mlp.onnx")
    imported = program_source(args.work / "mlp.onnx", args.work, cpu)
    rewritten = args.work / "rewritten.mlir"
    print("rewritten:", rewrite_program(imported, ND_LINEAR_AS_MATMUL, rewritten))
    modules = {}
    for program, name in ((imported, "imported"), (rewritten, "rewritten")):
        for flags, suffix in (((), ""), (DATA_TILING, "+data-tiling")):
            vmfb = args.work / f"{name}{suffix}.vmfb"
            subprocess.run([find_tool("iree-compile"), str(program), *cpu.compile_flags, *flags, "-o", str(vmfb)],
                           check=True)
            modules[name + suffix] = vmfb
    x = args.work / "input0.npy"
    np.save(x, np.random.default_rng(1).standard_normal(shape).astype(np.float32))
    settings = ModuleRun("local-task", "main_graph", (x,))
    outputs = {}
    for name, vmfb in modules.items():  # every build computes the same result
        run = run_once(vmfb, settings, args.work / f"{name}.npy")
        if not run.ok:
            raise SystemExit(f"{name} did not run: {run.stderr}")
        outputs[name] = np.load(args.work / f"{name}.npy")
    scale = float(np.abs(outputs["imported"]).max())
    for name, out in outputs.items():
        print(f"{name:<26} relative error against imported: {float(np.abs(out - outputs['imported']).max()) / scale:.1e}")
    times = interleaved(modules, settings, args.rounds)
    for name, rounds in times.items():
        print(f"{name:<26} {statistics.median(rounds):8.3f} ms")
    for suffix in ("", "+data-tiling"):
        ratios = [a / b for a, b in zip(times["imported" + suffix], times["rewritten" + suffix])]
        print(f"imported{suffix} / rewritten{suffix}: {statistics.median(ratios):.3f}x "
              f"(per round: {', '.join(f'{r:.3f}' for r in ratios)})")


if __name__ == "__main__":
    main()
