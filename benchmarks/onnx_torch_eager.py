"""An ONNX model run by torch eager on CUDA (cuDNN and cuBLAS): the vendor-library figure beside
IREE's. Each ONNX node becomes the torch op exporters make it from, in the graph's order, on the
graph's own weights; the kernels of one call are read by CUPTI (torch.profiler), as
gpu_model_kernels.py reads IREE's, and the wall time per call (synchronized) is printed beside.

    python benchmarks/onnx_torch_eager.py MODEL.onnx [--input x.npy ...] [--channels-last] \\
        [--rounds 6] [--calls 20] [--check OUT.npy] [--json OUT.json]

--channels-last keeps 4-D activations and convolution weights in torch's channels_last memory
format (cuDNN's NHWC kernels), as a torch user would for a CNN. Inputs not given are seeded random
normals of the graph's shapes. --check compares the first output with a saved one (IREE's). The ops
are those of examples/onnx_models.py; another op stops with its name. Needs torch and onnx; the
tuner never imports this.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np


def _ints(t) -> list[int]:
    return [int(v) for v in t.flatten().tolist()]


def _conv(torch, a, x, w, b=None):
    pads = a.get("pads", [0] * (2 * (w.dim() - 2)))
    half = len(pads) // 2
    if pads[:half] != pads[half:]:
        raise SystemExit("asymmetric Conv padding is not handled")
    return torch.nn.functional.conv2d(x, w, b, stride=a.get("strides", 1), padding=pads[:half],
                                      dilation=a.get("dilations", 1), groups=a.get("group", 1))


def _pool(torch, a, x):
    pads = a.get("pads", [0, 0, 0, 0])
    return torch.nn.functional.max_pool2d(x, a["kernel_shape"], a.get("strides", 1), pads[:2])


def _instance_norm(torch, a, x, scale, bias):
    dims = tuple(range(2, x.dim()))
    mean = x.float().mean(dims, keepdim=True)
    var = x.float().var(dims, keepdim=True, unbiased=False)
    shape = [1, -1] + [1] * len(dims)
    y = (x.float() - mean) / torch.sqrt(var + a.get("epsilon", 1e-5))
    return (y * scale.float().reshape(shape) + bias.float().reshape(shape)).to(x.dtype)


def _layer_norm(torch, a, x, scale, bias=None):
    axis = a.get("axis", -1) % x.dim()
    return torch.nn.functional.layer_norm(x, x.shape[axis:], scale, bias, a.get("epsilon", 1e-5))


def _gemm(torch, a, x, w, b=None):
    x = x.t() if a.get("transA") else x
    w = w.t() if a.get("transB") else w
    y = x @ w
    return y + b if b is not None else y


def _split(torch, a, x, sizes=None):
    sizes = _ints(sizes) if sizes is not None else a["split"]
    return torch.split(x, sizes, dim=a.get("axis", 0))


def _ops(torch):
    f = torch.nn.functional
    dtypes = {1: torch.float32, 10: torch.float16, 16: torch.bfloat16, 7: torch.int64}
    return {
        "Conv": lambda a, *x: _conv(torch, a, *x),
        "MaxPool": lambda a, x: _pool(torch, a, x),
        "GlobalAveragePool": lambda a, x: x.mean((2, 3), keepdim=True),
        "InstanceNormalization": lambda a, *x: _instance_norm(torch, a, *x),
        "LayerNormalization": lambda a, *x: _layer_norm(torch, a, *x),
        "MatMul": lambda a, x, y: x @ y,
        "Gemm": lambda a, *x: _gemm(torch, a, *x),
        "Add": lambda a, x, y: x + y, "Sub": lambda a, x, y: x - y,
        "Mul": lambda a, x, y: x * y, "Div": lambda a, x, y: x / y,
        "Pow": lambda a, x, y: torch.pow(x, y), "Sqrt": lambda a, x: torch.sqrt(x),
        "Erf": lambda a, x: torch.erf(x), "Neg": lambda a, x: -x,
        "Sigmoid": lambda a, x: torch.sigmoid(x), "Relu": lambda a, x: torch.relu(x),
        "Tanh": lambda a, x: torch.tanh(x),
        "Softmax": lambda a, x: torch.softmax(x, a.get("axis", -1)),
        "ReduceMean": lambda a, x, axes=None: x.mean(a.get("axes") or _ints(axes), keepdim=bool(a.get("keepdims", 1))),
        "Cast": lambda a, x: x.to(dtypes[a["to"]]),
        "Reshape": lambda a, x, s: x.reshape(_ints(s)),
        "Flatten": lambda a, x: x.flatten(a.get("axis", 1)),
        "Transpose": lambda a, x: x.permute(a["perm"]),
        "Unsqueeze": lambda a, x, axes=None: _unsqueeze(x, a.get("axes") or _ints(axes)),
        "Expand": lambda a, x, s: x.expand(_ints(s)),
        "Split": lambda a, *x: _split(torch, a, *x),
        "Concat": lambda a, *x: torch.cat(x, a["axis"]),
        "Gelu": lambda a, x: f.gelu(x),
    }


def _unsqueeze(x, axes: list[int]):
    for axis in sorted(a % (x.dim() + len(axes)) for a in axes):
        x = x.unsqueeze(axis)
    return x


def build(model_path: Path, device: str, channels_last: bool, compute_dtype=None):
    """(function of the inputs, the graph's inputs as (name, shape, numpy dtype)). COMPUTE_DTYPE (a
    torch dtype) casts every floating weight and input to it: float32 gives a reference that f16
    rounding and overflow do not touch."""
    import onnx
    import torch
    from onnx import helper, numpy_helper

    model = onnx.load(model_path)
    ops = _ops(torch)
    missing = sorted({n.op_type for n in model.graph.node} - set(ops))
    if missing:
        raise SystemExit(f"{model_path.name}: ops not handled here: {', '.join(missing)}")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    consts = {}
    for init in model.graph.initializer:
        value = torch.from_numpy(numpy_helper.to_array(init).copy())
        value = value.to(device) if value.dtype != torch.int64 else value
        if compute_dtype is not None and value.is_floating_point():
            value = value.to(compute_dtype)
        consts[init.name] = value.contiguous(memory_format=fmt) if value.dim() == 4 else value
    nodes = [(n.op_type, {a.name: helper.get_attribute_value(a) for a in n.attribute},
              list(n.input), list(n.output)) for n in model.graph.node]
    shapes_only = {"Reshape": 1, "Expand": 1, "Unsqueeze": 1, "ReduceMean": 1, "Split": 1}
    outputs = [o.name for o in model.graph.output]

    def run(*args):
        env = dict(consts)
        for spec, arg in zip(model.graph.input, args):
            if compute_dtype is not None and arg.is_floating_point():
                arg = arg.to(compute_dtype)
            env[spec.name] = arg.contiguous(memory_format=fmt) if arg.dim() == 4 else arg
        for op, attrs, ins, outs in nodes:
            values = [env[i] if i else None for i in ins]
            keep = shapes_only.get(op)
            if keep is not None:  # shape operands live on the host
                values = values[:keep] + [v.cpu() if v is not None else None for v in values[keep:]]
            result = ops[op](attrs, *[v for v in values if v is not None])
            for name, value in zip(outs, result if isinstance(result, (tuple, list)) else [result]):
                env[name] = value
        return [env[o] for o in outputs]

    np_types = {1: np.float32, 10: np.float16, 7: np.int64}
    inputs = [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim], np_types[i.type.tensor_type.elem_type])
              for i in model.graph.input]
    return run, inputs


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--input", type=Path, action="append", default=[])
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--check", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    run, specs = build(args.model, "cuda", args.channels_last)
    rng = np.random.default_rng(0)
    arrays = [np.load(p) for p in args.input] or [rng.standard_normal(s).astype(t) for _, s, t in specs]
    xs = [torch.from_numpy(a).cuda() for a in arrays]
    with torch.no_grad():
        out = run(*xs)[0]
        if args.check:
            want = np.load(args.check).astype(np.float32)
            got = out.float().cpu().numpy()
            err = float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))
            print(f"check against {args.check.name}: max relative error {err:.2e}")
        for _ in range(3):
            run(*xs)
        torch.cuda.synchronize()
        kernel, wall = [], []
        for _ in range(args.rounds):
            start = time.perf_counter()
            for _ in range(args.calls):
                run(*xs)
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - start) * 1e3 / args.calls)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.calls):
                    run(*xs)
                torch.cuda.synchronize()
            kernel.append(sum(e.device_time_total for e in prof.events()
                              if e.device_type == torch.autograd.DeviceType.CUDA) / 1e3 / args.calls)
    layout = "channels_last" if args.channels_last else "contiguous (NCHW)"
    result = {"model": args.model.name, "layout": layout, "kernel_ms": statistics.median(kernel),
              "wall_ms": statistics.median(wall), "device": torch.cuda.get_device_name()}
    print(f"torch {torch.__version__} eager, {layout}, {result['device']}: kernels "
          f"{result['kernel_ms']:.3f} ms per call, wall {result['wall_ms']:.3f} ms (median of {args.rounds} rounds)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
