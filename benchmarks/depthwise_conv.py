"""One depthwise convolution as torch exports `nn.Conv2d(C, C, K, padding=K // 2, groups=C)`: an
ONNX Conv with `group` = channels (random f16 weights and bias), and a seeded input, for timing
the GPU window pipeline's configs against IREE's default (benchmarks/gpu_depthwise.sh).

    python benchmarks/depthwise_conv.py DIR --batch 8 --channels 96 --size 56 --kernel 7 [--stride 1]

Writes DIR/model.onnx (its function is main_graph, as torch's exports name it) and DIR/input0.npy.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np


def main() -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--channels", type=int, required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--kernel", type=int, required=True)
    parser.add_argument("--stride", type=int, default=1)
    args = parser.parse_args()
    n, c, s, k = args.batch, args.channels, args.size, args.kernel
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) / k).astype(np.float16), "weight")
    bias = numpy_helper.from_array(rng.standard_normal(c).astype(np.float16), "bias")
    out = (s + 2 * (k // 2) - k) // args.stride + 1
    conv = helper.make_node("Conv", ["x", "weight", "bias"], ["y"], group=c, kernel_shape=[k, k],
                            pads=[k // 2] * 4, strides=[args.stride] * 2)
    graph = helper.make_graph([conv], "main_graph", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [n, c, s, s])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [n, c, out, out])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    args.out.mkdir(parents=True, exist_ok=True)
    onnx.save(model, args.out / "model.onnx")
    np.save(args.out / "input0.npy", rng.standard_normal((n, c, s, s)).astype(np.float16))


if __name__ == "__main__":
    main()
