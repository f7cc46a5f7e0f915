"""Linear layers on activations of rank 4 or more as 2-D matrix products, in an ONNX model's import.

torch's `nn.Linear` on an NHWC activation (ConvNeXt's and Swin's MLPs, a 2-D feature map's
channel mixing) exports as an ONNX MatMul of a rank-4 activation by the rank-2 weight,
`[8,14,14,384] x [384,1536]`. IREE 3.13 imports it as a batch matmul of (8*14) x 14 x 1536 x 384
whose B operand is the weight broadcast 112 times, in an elementwise dispatch of its own that
writes 112 copies of the weight on every call (or, where the weight is a constant IREE hoists,
in device memory once; `../shared/models/nd_linear.py` reproduces it; on llvm-cpu and cuda
alike). A rank-3 activation by a rank-2 weight (BERT's `[1,512,768] x [768,768]`, ViT's
`[8,197,768] x ...`) is imported as one matmul already, so only rank 4 and up are rewritten:

    MatMul(X[d0, ..., dk, K], W[K, N])  ->  Reshape(MatMul(Reshape(X, [d0*...*dk, K]), W), [d0, ..., dk, N])

The reshapes of a contiguous tensor are free (IREE folds them into the producer's and consumers'
indexing), the weight is read once, and the product is the same sum in the same order: the
rewritten program computes the same result. Only MatMuls with static shapes and a rank-2 B are
taken; a bias Add after the MatMul stays as the exporter wrote it (IREE fuses it either way)."""

from __future__ import annotations

import math

from iree.compiler import ir

from tuner.rewrite.torch_ops import element_type, int64_literal, onnx_op, replace_op, rewrite_sites, static_shape

# The least rank of the activation the rewrite takes: rank 3 is imported as one matmul already.
LEAST_RANK = 4


def _nd_linear(matmul: ir.Operation) -> bool:
    """Whether the MatMul is a linear layer on an activation of rank LEAST_RANK or more."""
    x, w = (static_shape(v) for v in matmul.operands)
    return x is not None and w is not None and len(w) == 2 and len(x) >= LEAST_RANK and x[-1] == w[0]


def nd_linears_as_matmuls(module: ir.Module) -> list[str]:
    """Rewrite every N-D linear `onnx.MatMul` of `module` in place (inside its context) as a 2-D
    MatMul between two Reshapes; returns each one's activation and weight shapes."""
    return rewrite_sites(module, "MatMul", _nd_linear, _as_2d)


def _as_2d(matmul: ir.Operation) -> str:
    ip, loc = ir.InsertionPoint(matmul), matmul.location
    x, w = matmul.operands
    lead, (k, n) = static_shape(x)[:-1], static_shape(w)
    rows = math.prod(lead)

    def reshape(value: ir.Value, shape: list[int]) -> ir.Value:
        return onnx_op("Reshape", [value, int64_literal(shape, ip, loc)], shape, element_type(value), ip, loc)

    product = onnx_op("MatMul", [reshape(x, [rows, k]), w], [rows, n], element_type(matmul.result), ip, loc)
    replace_op(matmul, reshape(product, [*lead, n]))
    return f"{'x'.join(map(str, lead))}x{k} by {k}x{n}"
