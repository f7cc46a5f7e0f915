"""Attention as an external Hopper kernel, in an ONNX model's import (tuner.external).

The spelled-out attentions are raised first (tuner.rewrite.attention), then every `torch.aten.scaled_dot_product_attention` of static f16
operands, no dropout, a constant scale (or none: 1/sqrt(d)) and K and V of Q's heads (or, with
enable_gqa, of a divisor of them: each K/V head read by its group of query heads) becomes a
call of a function whose body is one `hal.dispatch.extern` of Triton's flash attention for
sm_90a (tuner.external.triton_attention), its PTX embedded in the program; one function per
problem. An additive mask is passed as it is (each leading dim 1 or the problem's), a causal
flag as the kernel's own masking; a mask the program computes from constants alone is read
(tuner.rewrite.constant_eval.kind_of_mask): one of zeros is dropped, a causal one (transformers'
decoders build it from aranges) becomes the kernel's causal masking, which also skips the keys
past each block's last query; one whose z dim repeats (Swin's window mask: every image's copy of
one image's windows, plus the per-head bias) is given as a constant of one period, which the
kernel reads modulo it (`_periodic_mask`), so IREE no longer writes the whole mask each call. Heads of any multiple of 8 from 16 to 256 are
read at their own width (the kernel pads them in registers: Phi-2's 80, Gemma's 256), not
copied padded. Where the kernel cannot be made, or does not take an attention
(another head width, a mask of another form), the raised op stays, its heads padded to a power
of two as IREE's attention pipeline needs (`pad_heads_of`), as after raise-attention. The heads as the exporter splits them (Reshape to
[z, seq, h, d], Transpose to [z, h, seq, d], and for Q and K a Mul by the scale's square root)
are read as they lie before the Transpose, and the result written as the Transpose after it
wants it (`_split_heads`; the kernel's `seq_major` layout, the scalars in its scale): no
transpose dispatch around the kernel; where the heads are a Split of one fused projection
(GPT-2's c_attn), Q, K and V are read from it, each at its offset in the rows (`_fused_projection`),
not from the three copies IREE makes of the Split's parts. Grouped-query K and V repeated by
transformers' repeat_kv (Unsqueeze, Expand, Reshape; K's scalar Mul after it) are read before it,
the kernel giving each K/V head to its group of query heads (`_repeated_kv`). Where no attention became an external kernel the
rewrite says it changed nothing. On any GPU but a Hopper the driver refuses the PTX at load, and the flag stage,
which runs every variant, drops it."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Optional

import numpy as np
from iree.compiler import ir

from tuner.external.abi import ExternKernel
from tuner.external.attention_kernel import AttentionProblem, AttentionTiles, attention_tiles_for
from tuner.rewrite.attention import SDPA, pad_heads_of, raise_attention
from tuner.rewrite.constant_eval import evaluate, kind_of_mask, scalar_constant
from tuner.rewrite.extern_call import Kernels, call_extern, define_extern, onnx_meta, tensor_type
from tuner.rewrite.torch_ops import (array_literal, element_type, is_onnx, only_user, onnx_ints, producer, replace_op,
                                     static_shape)

KernelSource = Callable[[AttentionProblem, AttentionTiles], ExternKernel]


def _constant(value: ir.Value) -> object:
    """The value of a torch.constant.{float,bool,int} operand, None for torch.constant.none, or
    the string "?" where the operand is not a constant."""
    op = producer(value)
    if op is None or not op.name.startswith("torch.constant."):
        return "?"
    if op.name == "torch.constant.none":
        return None
    attr = op.attributes["value"]
    if op.name == "torch.constant.float":
        return ir.FloatAttr(attr).value
    if op.name == "torch.constant.bool":
        return ir.BoolAttr(attr).value
    return ir.IntegerAttr(attr).value


def problem_of(sdpa: ir.Operation) -> tuple[Optional[AttentionProblem], str]:
    """The attention the op computes, or None and why the kernel does not take it."""
    q, k, v, mask, dropout, causal, scale, gqa = sdpa.operands
    shapes = [static_shape(x) for x in (q, k, v)]
    if any(s is None or len(s) not in (3, 4) or len(s) != len(shapes[0]) for s in shapes):
        return None, "operands not of one static rank 3 or 4"
    (*lead, m, d), (*klead, n, dk), (*vlead, nv, dv) = shapes
    z, h = (1, lead[0]) if len(lead) == 1 else lead
    grouped = _constant(gqa) is True
    if _constant(dropout) not in (0.0, None) or _constant(gqa) not in (False, None, True):
        return None, "dropout, or an enable_gqa that is not a constant"
    if dk != d or nv != n or klead != vlead or klead[:-1] != lead[:-1]:
        return None, "keys and values of another batch, width or count than the queries take"
    kv_heads = klead[-1]
    if kv_heads != h and not (grouped and h % kv_heads == 0):
        return None, "keys and values of other heads than the queries (grouped-query heads not repeated)"
    causal_value, scale_value = _constant(causal), _constant(scale)
    if causal_value == "?" or scale_value == "?":
        return None, "a causal flag or scale that is not a constant"
    mask_dims, mask_element = None, "f16"
    if _constant(mask) is not None:
        dims = static_shape(mask)
        if dims is None or len(dims) != len(shapes[0]) or dims[-1] != n:
            return None, "a mask of another rank or key count"
        mask_dims = (1, *dims[:-1]) if len(dims) == 3 else tuple(dims[:-1])
        mask_element = element_type(mask)
    problem = AttentionProblem(z, h, m, n, d, dv, element_type(q), mask_dims, mask_element, bool(causal_value),
                               1.0 / math.sqrt(d) if scale_value is None else float(scale_value),
                               kv_heads=kv_heads if kv_heads != h else 0)
    why = problem.why_not()
    return (None, why) if why else (problem, "")


def external_attentions(module: ir.Module, source: Optional[KernelSource] = None,
                        tiles: Callable[[AttentionProblem], AttentionTiles] = attention_tiles_for) -> list[str]:
    """Raise the module's attentions, then rewrite every one the kernel takes as a call of it (in
    place, inside the module's context); `source` makes the kernels (Triton's by default); `tiles`:
    each problem's tiles (tuner.stages.kernel_tiles tries others in the model).
    Returns each rewritten attention's problem and tiles, then each one left as the raised op and
    why; nothing where no attention became an external kernel (the module may be raised then:
    rewrite_program, which discards a module whose rewrite returns nothing, writes nothing)."""
    if source is None:
        from tuner.external.triton_attention import triton_attention as source
    raise_attention(module)
    sites: list[ir.Operation] = []

    def visit(op: ir.Operation) -> ir.WalkResult:
        if op.name == SDPA:
            sites.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    kernels, done, left = Kernels(source), [], []
    for op in sites:
        problem, why = problem_of(op)
        if problem is None:
            left.append(f"{'x'.join(map(str, static_shape(op.operands[0]) or ['?']))} left raised: {why}"
                        + pad_heads_of(op))
            continue
        mask = op.operands[3] if problem.mask else None
        values = evaluate(mask, depth=MASK_DEPTH) if problem.mask else None  # read once, for both uses below
        kind = kind_of_mask(values, problem.m, problem.n)
        if kind is not None:  # a mask of zeros is none; a causal one is the kernel's own masking
            problem = replace(problem, mask=None, mask_element="f16", causal=problem.causal or kind == "causal")
        elif values is not None:
            periodic = _periodic_mask(values, problem, ir.InsertionPoint(op), op.location)
            if periodic is not None:  # Swin's window mask: one image's windows, not every image's
                mask, problem = periodic
        split = _split_heads(op)
        if split is not None:  # the exporter's head split read as it lies, its scale in the kernel's
            problem = replace(problem, seq_major=split.layout, scale=problem.scale * split.scale, rows=split.rows,
                              offsets=split.offsets)
        qkv = list(split.operands if split else op.operands[:3])
        repeated = _repeated_kv(op, qkv, split.layout if split else (False,) * 4)
        if repeated is not None:  # grouped-query K/V read before transformers' repeat_kv copies them
            qkv[1:] = repeated.sources
            problem = replace(problem, kv_heads=repeated.heads, scale=problem.scale * repeated.scale)
        operands = [*qkv, *([mask] if problem.mask else [])]
        last = split.out if split and split.out is not None else op
        kernel = kernels.get(problem, tiles(problem),
                             lambda k, operands=operands, last=last, op=op: define_extern(
                                 module, k, [tensor_type(static_shape(x), element_type(x)) for x in operands],
                                 tensor_type(static_shape(last.result), element_type(last.result)), onnx_meta(op)),
                             f"{problem.name} left raised")
        if kernel is None:
            pad_heads_of(op)
            continue
        replace_op(last, call_extern(problem.name, operands, static_shape(last.result), element_type(last.result),
                                     ir.InsertionPoint(last), op.location))
        if last is not op:
            op.erase()
        for dead in (*(split.chain if split else ()), *(repeated.chain if repeated else ())):
            if not any(list(r.uses) for r in dead.results):  # users first: a Split goes with its last part
                dead.erase()
        done.append(f"{problem.name.removeprefix('attention_')} ({kernel.label})")
    if not done:
        return []
    module.operation.verify()
    return done + left + kernels.failed


# How deep a mask's computation from constants is read: Swin's shifted-window mask is built by
# torchvision in about 40 ops from an image of zeros (ConstantOfShape, ScatterND, Slice, ...).
MASK_DEPTH = 64


def _periodic_mask(values: np.ndarray, problem: AttentionProblem, ip: ir.InsertionPoint,
                   loc: ir.Location) -> Optional[tuple[ir.Value, AttentionProblem]]:
    """Where the mask (`values`, computed from constants) has a z dim that repeats with a shorter period p
    (Swin's: the nW windows' masks, the same for every image of the batch, plus the per-head
    bias), its first p as a constant and the problem with a mask of p: the kernel reads it
    modulo p, and IREE no longer writes the mask of every image each call (8 x 64 x 3 x 49 x 49
    values in Swin-T's first stage). None otherwise."""
    if values.dtype not in (np.float16, np.float32):
        return None
    mz, mh, mm = problem.mask
    values = values.reshape(mz, mh, mm, problem.n)
    period = next(p for p in range(1, mz + 1)
                  if mz % p == 0 and np.array_equal(values.reshape(mz // p, p, mh, mm, problem.n),
                                                    np.broadcast_to(values[:p], (mz // p, p, mh, mm, problem.n))))
    if period == mz:
        return None
    return array_literal(values[:period], ip, loc), replace(problem, mask=(period, mh, mm))


@dataclass(frozen=True)
class SplitHeads:
    """An attention's operands as the exporter split its heads: Q, K and V as they lie before
    their Transpose to [z, h, seq, d] (each one that had it), the Transpose of the result back
    to [z, seq, h, d] (None: none), the layout the kernel reads and writes (q, k, v, result
    seq-major), the product of the scalars Q and K were multiplied by after the Transpose (torch's
    SDPA export scales both by the scale's square root), and the ops that become dead."""

    operands: tuple[ir.Value, ir.Value, ir.Value]
    out: Optional[ir.Operation]
    layout: tuple[bool, bool, bool, bool]
    scale: float
    chain: tuple[ir.Operation, ...]
    rows: tuple[int, int, int] = (0, 0, 0)  # Q, K, V read from a fused projection: its width
    offsets: tuple[int, int, int] = (0, 0, 0)  # and where each starts in its rows


HEAD_SPLIT = [0, 2, 1, 3]  # [z, seq, h, d] <-> [z, h, seq, d]


def _split_heads(sdpa: ir.Operation) -> Optional[SplitHeads]:
    """The attention's head-split Transposes (and the scalar Muls after those of Q and K) to read
    through, or None where it has none."""
    operands, layout, scale, chain, rows, offsets = [], [], 1.0, [], [], []
    for index, value in enumerate(sdpa.operands[:3]):
        factor, through, op = _scaled(value, sdpa) if index < 2 else (1.0, [], producer(value))
        split = (is_onnx(op, "Transpose") and onnx_ints(op, "perm", []) == HEAD_SPLIT
                 and len(static_shape(op.operands[0]) or []) == 4)
        fused = _fused_projection(op.operands[0]) if split else None
        operands.append(fused.source if fused else op.operands[0] if split else value)
        layout.append(split)
        rows.append(fused.width if fused else 0)
        offsets.append(fused.offset if fused else 0)
        if split:
            scale *= factor
            chain += [*through, op, *(fused.chain if fused else ())]
    users = [use.owner for use in sdpa.results[0].uses]
    out = users[0] if len(users) == 1 and is_onnx(users[0], "Transpose") and \
        onnx_ints(users[0], "perm", []) == HEAD_SPLIT else None
    if not any(layout) and out is None:
        return None
    # each op once: a Reshape after the Slices of its heads, a Split after the Reshapes of all its
    # parts (each is dead only after them)
    chain = sorted(dict.fromkeys(chain), key=lambda op: 2 if is_onnx(op, "Split") else 1 if is_onnx(op, "Reshape") else 0)
    return SplitHeads(tuple(operands), out, (*layout, out is not None), scale, tuple(chain), tuple(rows),
                      tuple(offsets))


@dataclass(frozen=True)
class FusedProjection:
    """Where a head-split operand ([z, seq, h, d], a Reshape of one result of a Split of the last
    axis) lies in the tensor before the Split: that tensor, its row's width, the operand's offset
    in the row, and the Reshape and Split, which become dead."""

    source: ir.Value
    width: int
    offset: int
    chain: tuple[ir.Operation, ...]


def _fused_projection(value: ir.Value) -> Optional[FusedProjection]:
    """The fused projection `value` was split from (GPT-2's c_attn: [z, seq, 3 x h x d] split in
    three; join-sibling-linears' joined Q, K and V: whole heads sliced from it), or None: IREE
    copies each part of such a Split (a `slow_memcpy` dispatch each)."""
    reshape = producer(value)
    if is_onnx(reshape, "Slice"):
        return _sliced_heads(value, reshape)
    if not is_onnx(reshape, "Reshape") or not only_user(reshape.operands[0]):
        return None
    part = reshape.operands[0]
    split = producer(part)
    if not is_onnx(split, "Split"):
        return None
    source, shape = split.operands[0], static_shape(split.operands[0])
    widths = [static_shape(r) for r in split.results]
    if shape is None or len(shape) != 3 or any(w is None or w[:2] != shape[:2] for w in widths):
        return None
    axis = ir.IntegerAttr(split.attributes["torch.onnx.axis"]).value if "torch.onnx.axis" in split.attributes else 0
    z, seq, h, d = static_shape(value)
    if axis % 3 != 2 or static_shape(part) != [z, seq, h * d]:
        return None
    index = ir.OpResult(part).result_number
    return FusedProjection(source, shape[2], sum(w[2] for w in widths[:index]), (reshape, split))


def _scaled(value: ir.Value, sdpa: ir.Operation) -> tuple[float, list[ir.Operation], Optional[ir.Operation]]:
    """Where `value`, read by `sdpa` alone, is a Mul by a scalar constant (the exporter's square
    root of the scale on Q and K): the scalar, [the Mul], and what made the other operand; else
    1.0, [] and what made `value`."""
    op = producer(value)
    if is_onnx(op, "Mul") and only_user(value) == sdpa:
        constants = [scalar_constant(x) for x in op.operands]
        for side in (0, 1):
            if constants[side] is not None:
                return constants[side], [op], producer(op.operands[1 - side])
    return 1.0, [], op


@dataclass(frozen=True)
class RepeatedKV:
    """Grouped-query K and V as they were before transformers' repeat_kv (Unsqueeze at axis 2,
    Expand over the group, Reshape to the query heads; for K also the Mul by the scale's square
    root after it): the two sources [z, kv_heads, n, d], their heads, the scalar K was multiplied
    by (1.0: none), and the ops that become dead."""

    sources: tuple[ir.Value, ir.Value]
    heads: int
    scale: float
    chain: tuple[ir.Operation, ...]


def _repeated_kv(sdpa: ir.Operation, qkv: list[ir.Value], layout: tuple[bool, ...]) -> Optional[RepeatedKV]:
    """K and V (`qkv`'s last two, head-major: not read through a head split) where both are one
    smaller tensor's heads repeated, each by the same group; None otherwise. IREE writes the
    repeated copies (a Mistral-7B layer's two `broadcast_8x4x512x128` dispatches, 0.022 ms of its
    0.571 on the H200); the kernel reads each K/V head for its group of query heads instead."""
    if layout[1] or layout[2]:
        return None
    sources, heads, chain = [], set(), []
    scale, k_mul, k_repeat = _scaled(qkv[1], sdpa)
    for through, op in ((k_mul, k_repeat), ([], producer(qkv[2]))):
        found = _repeat_kv(op)
        if found is None:
            return None
        source, repeat = found
        sources.append(source)
        heads.add(static_shape(source)[1])
        chain += [*through, *repeat]
    if len(heads) != 1:
        return None
    return RepeatedKV(tuple(sources), heads.pop(), scale, tuple(chain))


def _repeat_kv(reshape: Optional[ir.Operation]) -> Optional[tuple[ir.Value, list[ir.Operation]]]:
    """x [z, kv, n, d] where `reshape` is Reshape(Expand(Unsqueeze(x)) to [z, kv, g, n, d]) to
    [z, kv * g, n, d] (each of x's heads g times in a row), with the three ops; or x [z, 1, n, d]
    where it is Expand(x) to [z, h, n, d] (one head for all: multi-query attention, as
    tuner.rewrite.attention raises Falcon's), with that op; else None."""
    if is_onnx(reshape, "Expand"):
        x, out = static_shape(reshape.operands[0]), static_shape(reshape.result)
        if x is None or out is None or len(x) != 4 or len(out) != 4 or x[1] != 1 or out[1] < 2 \
                or [x[0], *x[2:]] != [out[0], *out[2:]]:
            return None
        return reshape.operands[0], [reshape]
    if not is_onnx(reshape, "Reshape"):
        return None
    expand = producer(reshape.operands[0])
    unsqueeze = producer(expand.operands[0]) if is_onnx(expand, "Expand") else None
    if not is_onnx(unsqueeze, "Unsqueeze"):
        return None
    source = unsqueeze.operands[0]
    x, lifted, wide, out = (static_shape(v) for v in (source, unsqueeze.result, expand.result, reshape.result))
    if x is None or len(x) != 4 or None in (lifted, wide, out):
        return None
    z, kv, n, d = x
    if lifted != [z, kv, 1, n, d] or len(wide) != 5 or wide[:2] != [z, kv] or wide[3:] != [n, d]:
        return None
    if out != [z, kv * wide[2], n, d] or wide[2] < 2:
        return None
    return source, [reshape, expand, unsqueeze]


def _sliced_heads(value: ir.Value, slice_: ir.Operation) -> Optional[FusedProjection]:
    """Where `value` [z, seq, h, d] is whole heads sliced (step 1, on the heads' axis) from a
    projection [z, seq, W] reshaped into W / d heads (tuner.rewrite.sibling_linears joins Q, K and
    V so): that projection, W, and where the heads start in its rows."""
    reshape = producer(slice_.operands[0])
    if not is_onnx(reshape, "Reshape") or len(slice_.operands) < 4:
        return None
    source, out = reshape.operands[0], static_shape(value)
    shape, heads = static_shape(source), static_shape(reshape.result)
    if None in (shape, heads, out) or len(shape) != 3 or len(heads) != 4 or heads[:2] != shape[:2] \
            or heads[2] * heads[3] != shape[2]:
        return None
    bounds = [evaluate(x, depth=2) for x in slice_.operands[1:5]]
    if any(b is None or b.size != 1 for b in bounds):
        return None
    start, end, axis, *step = (int(b.reshape(-1)[0]) for b in bounds)
    if axis % 4 != 2 or step not in ([], [1]) or not 0 <= start < end <= heads[2] or end - start != out[2]:
        return None
    return FusedProjection(source, shape[2], start * heads[3], (slice_, reshape))

