"""Half-precision reductions accumulated in f32, in an ONNX model's import.

torch sums an f16 or bf16 tensor in f32 and rounds the result once (its norm, sum and mean on
CPU and GPU); IREE 3.13 lowers an ONNX `ReduceL2`, `ReduceSum`, ... of f16 to a reduction that
accumulates in f16. Past a few thousand elements the running sum's spacing is wider than what
each element adds: wav2vec2's positional convolution, weight-normalized as the exporter writes it
(`ReduceL2` of the f16 filter over 36864 values), made IREE's result of the whole f16 model 0.19
off (relative L2) torch's f32 one on llvm-cpu and 0.28 on CUDA, where torch's own f16 model is
1.4e-3 off. Each such reduction is written with its input cast to f32 and its result cast back:

    ReduceL2(X: f16, axes)  ->  Cast(ReduceL2(Cast(X, f32), axes), f16)

The casts fuse into the reduction's dispatch (and a reduction of a constant, a weight's norm,
folds away at compile time)."""

from __future__ import annotations

from iree.compiler import ir

from tuner.rewrite.torch_ops import element_type, is_onnx, onnx_op, replace_op, si64, static_shape

# The reductions that accumulate (not ReduceMax/ReduceMin, which are exact in any precision).
ACCUMULATING = ("ReduceL1", "ReduceL2", "ReduceSum", "ReduceSumSquare", "ReduceMean", "ReduceLogSumExp")
HALF = {"f16": 10, "bf16": 16}  # ONNX's TensorProto codes, for Cast's `to`
FLOAT = 1


def _taken(op: ir.Operation) -> bool:
    return (element_type(op.operands[0]) in HALF and element_type(op.result) == element_type(op.operands[0])
            and static_shape(op.result) is not None)


def f32_reductions(module: ir.Module) -> list[str]:
    """Every accumulating reduction of an f16 or bf16 tensor in `module` computed in f32 (in
    place, inside its context). Returns what was rewritten, one entry per reduction."""
    sites: list[tuple[ir.Operation, str]] = []

    def visit(op: ir.Operation) -> ir.WalkResult:  # one walk for every kind of reduction
        name = next((n for n in ACCUMULATING if is_onnx(op, n)), None)
        if name is not None and _taken(op):
            sites.append((op, name))
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    done = []
    for op, name in sites:
        half, loc, ip = element_type(op.result), op.location, ir.InsertionPoint(op)
        x = op.operands[0]
        wide = onnx_op("Cast", [x], static_shape(x), "f32", ip, loc, to=si64(FLOAT))
        attributes = {key.removeprefix("torch.onnx."): op.attributes[key] for key in op.attributes
                      if key.startswith("torch.onnx.")}
        reduced = onnx_op(name, [wide, *list(op.operands)[1:]], static_shape(op.result), "f32", ip, loc, **attributes)
        replace_op(op, onnx_op("Cast", [reduced], static_shape(op.result), half, ip, loc, to=si64(HALF[half])))
        done.append(f"{name} of {'x'.join(map(str, static_shape(x)))} {half}")
    if done:
        module.operation.verify()
    return done
