"""Discovery: compile the input to executable configurations and read its root ops through the bindings."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from pathlib import Path
from typing import Iterable, Optional

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu, linalg

from pipelines import ConvDims, DefaultConfig, Dispatch, DispatchKind, MmaIntrinsic, TargetFacts
from tuner.errors import InputError, ToolError, unreadable_input
from tuner.discovery.entry import entry_points, initializer_dispatches
from tuner.discovery.external import EXTERNAL_KERNEL, external_exports
from tuner.targets import Target
from tuner.core.names import why_not_a_file_name
from tuner.tools import find_tool, run_tool_retrying_a_hang
from tuner.discovery.other_kinds import OtherKind, classify, iterators
from tuner.discovery.by_structure import (is_structural_root, other_compute_ops, stored_element_type,
                                         structural_parts)
from tuner.discovery.found import Program  # noqa: F401 (where callers import it from)

TUNER_ATTRIBUTES_FLAG = "--iree-codegen-add-tuner-attributes"


def read_input_text(path: Path) -> str:
    """The input's text; one clear error when it is missing or not text."""
    if not path.is_file():
        raise unreadable_input(path)
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read it as text ({e})") from None


def parse_input(path: Path, ctx: ir.Context, text: Optional[str] = None) -> ir.Module:
    """The input module (from `text`, its contents, where the caller has read them); one clear
    error when it is missing or is not MLIR."""
    text = read_input_text(path) if text is None else text
    try:
        with ctx:
            return ir.Module.parse(text)
    except Exception as e:  # MLIRError and friends: the first diagnostic says what is wrong
        first = str(e).strip().splitlines()
        raise InputError(f"{path}: not valid MLIR: {first[-1].strip() if first else e}") from None


def configure(input_path: Path, target: Target, flags: Iterable[str], timeout_s: float = 300) -> str:
    """The input compiled to executable configurations with tuner attributes, as text."""
    cmd = [find_tool("iree-compile"), str(input_path), *target.compile_flags, *flags,
           TUNER_ATTRIBUTES_FLAG, "--compile-to=executable-configurations"]
    run = run_tool_retrying_a_hang(cmd, timeout_s)
    if run.timed_out:
        raise ToolError(f"iree-compile timed out after {timeout_s:.0f}s configuring {input_path}", list(cmd), run.stderr)
    if not run.ok:
        raise InputError(f"iree-compile rejected the input: {run.first_error()}")
    return run.stdout


def enclosing_op(op: ir.Operation, name: str) -> ir.Operation:
    while op.name != name:
        op = op.parent
    return op


def _maps(op: ir.Operation) -> list[ir.AffineMap]:
    """The op's indexing maps, one per operand (linalg ops through their view; attention, which
    has no Python view in 3.13, through its attribute)."""
    if op.name in ATTENTION_OPS:
        source = op.attributes["indexing_maps"]
    elif hasattr(op.opview, "indexing_maps"):
        source = op.opview.indexing_maps
    else:  # named ops whose view has no maps in 3.13 (linalg.mmt4d after data tiling)
        source = linalg.get_indexing_maps(op)
        if source is None:
            raise InputError(f"{op.name}: its indexing maps cannot be read through the bindings; not tunable yet")
    return [ir.AffineMapAttr(m).value for m in source]


def _typed_operands(op: ir.Operation) -> tuple[str, str, str, list[ir.AffineMap]]:
    """LHS, RHS and result element types, and the indexing maps a spec matches the op by. For
    attention: query and key types, the value type standing for the result (the compiler's
    online_attention accumulates in f32 and the dispatch stores the value type), and the maps
    of query, key, value, scale, the mask if it has one, and the output (last), as
    `transform.iree.match.attention` compares them with the attention op's."""
    maps = _maps(op)
    if op.name in ATTENTION_OPS:
        outputs = 3 if op.name.endswith("online_attention") else 1
        inputs = len(maps) - outputs
        operands = list(op.operands)
        return (_element_type(operands[0]), _element_type(operands[1]), _element_type(operands[2]),
                [*maps[:inputs], maps[inputs]])
    # A reduction may have one input; its type then stands for both. An op may have none: a
    # nearest-neighbour upsample (ONNX Resize) reads its source by tensor.extract at
    # linalg.index positions, and the output's type stands for them.
    inputs = list(op.opview.inputs) or list(op.opview.outputs)
    return (_element_type(inputs[0]), _element_type(inputs[1 if len(inputs) > 1 else 0]),
            _element_type(op.opview.outputs[0]), maps)


def _loop_bounds(op: ir.Operation) -> tuple[int, ...]:
    """Static loop extents of a linalg op, from its indexing maps and operand shapes."""
    maps = _maps(op)
    bounds: dict[int, int] = {}
    for amap, operand in zip(maps, op.operands):
        shape = operand.type.shape if isinstance(operand.type, ir.ShapedType) else []
        for expr, size in zip(amap.results, shape):
            if isinstance(expr, ir.AffineDimExpr):
                bounds.setdefault(expr.position, size)
    n = maps[0].n_dims
    if len(bounds) != n or any(b < 0 for b in bounds.values()):
        raise InputError(f"{op.name}: dynamic shapes (its loop bounds are not all static); not tunable (an ONNX "
                         "model's symbolic dimensions are fixed at import by --dynamic-size N; an MLIR "
                         "program's must be made static before it is given)")
    return tuple(bounds[d] for d in range(n))


def static_loop_bounds(op: ir.Operation) -> tuple[int, ...]:
    """The op's loop extents, or () where some are dynamic or its maps cannot be read."""
    try:
        return _loop_bounds(op)
    except (InputError, ValueError, IndexError):
        return ()


def target_config(attr: ir.Attribute) -> ir.DictAttr:
    """A #hal.executable.target's configuration dictionary. 3.13's bindings expose no accessor
    for it, so the dictionary is handed back to MLIR's own parser and read as a typed DictAttr."""
    text = str(attr)
    return ir.DictAttr(ir.Attribute.parse(text[text.index("{"): text.rindex("}") + 1]))


def _target_facts(variant: ir.Operation) -> TargetFacts:
    attr = variant.attributes["target"]
    text = str(attr)
    # 3.13's bindings have no #hal.executable.target accessor; its first parameter, a quoted
    # string, is the backend ("llvm-cpu", "cuda", "rocm").
    backend = text.split('"')[1]
    config = target_config(attr)

    def get(key: str) -> ir.Attribute | None:
        return config[key] if key in config else None

    if backend == "llvm-cpu":
        cpu = get("cpu")
        features = get("cpu_features")
        vec = get("native_vector_size")
        triple = get("target_triple")
        return TargetFacts(
            backend=backend,
            arch=(ir.StringAttr(cpu).value if cpu else "") + " " + (ir.StringAttr(triple).value if triple else ""),
            cpu_features=tuple(ir.StringAttr(features).value.split(",")) if features else (),
            native_vector_bytes=ir.IntegerAttr(vec).value if vec else 16,
            attribute=text,
        )
    if backend in ("cuda", "rocm"):
        info = iree_gpu.TargetInfo.get_gpu_target_info(attr)
        mmas = []
        for intrinsic in info.mma_intrinsics:
            # Virtual intrinsics (ROCm) come as a different enum; only real MMA ops are offered.
            if not isinstance(intrinsic, iree_gpu.MMAIntrinsic):
                continue
            mma = iree_gpu.MMAAttr.get(intrinsic)
            m, n, k = mma.mnk_shape
            a, b, c = (str(t) for t in mma.abc_element_types)
            mmas.append(MmaIntrinsic(intrinsic.name, m, n, k, a, b, c))
        return TargetFacts(
            backend=backend,
            arch=info.arch,
            subgroup_sizes=tuple(info.subgroup_size_choices),
            max_threads_per_workgroup=info.max_thread_count_per_workgroup,
            max_workgroup_sizes=tuple(info.max_workgroup_sizes),
            max_workgroup_memory_bytes=info.max_workgroup_memory_bytes,
            mma_intrinsics=tuple(mmas),
            attribute=text,
        )
    return TargetFacts(backend=backend, arch="", attribute=text)


def _element_type(value: ir.Value) -> str:
    t = value.type
    return str(t.element_type) if isinstance(t, ir.ShapedType) else str(t)


# The compiler rewrites attention into online_attention when it configures it.
ATTENTION_OPS = ("iree_linalg_ext.attention", "iree_linalg_ext.online_attention")


def _roles(op: ir.Operation) -> tuple[DispatchKind, tuple[int, ...], tuple[int, ...], tuple[int, ...],
                                        tuple[int, ...], ConvDims | None] | None:
    """The op's kind and its batch, M, N and K dims (a convolution's implicit-GEMM view)."""
    if linalg.isa_contraction_op(op):
        d = linalg.infer_contraction_dimensions(op)
        return DispatchKind.CONTRACTION, tuple(d.batch), tuple(d.m), tuple(d.n), tuple(d.k), None
    if op.name in ATTENTION_OPS:
        *_, maps = _typed_operands(op)  # q, k, v, scale, [mask,] output
        d = iree_codegen.get_attention_op_detail(maps[0], maps[1], maps[2], maps[-1])
        # M = queries, N = value columns, K = the two reductions (head dim K1, keys K2).
        return (DispatchKind.ATTENTION, tuple(d.batch_dims), tuple(d.m_dims), tuple(d.n_dims),
                tuple(d.k1_dims) + tuple(d.k2_dims), None)
    if linalg.isa_convolution_op(op):
        d = linalg.infer_convolution_dimensions(op)
        conv = ConvDims(tuple(d.batch), tuple(d.output_image), tuple(d.output_channel), tuple(d.filter_loop),
                        tuple(d.input_channel), tuple(d.depth), tuple(d.strides), tuple(d.dilations))
        return (DispatchKind.CONVOLUTION, conv.batch, conv.output_image, conv.output_channel,
                tuple(sorted(conv.filter + conv.input_channel)), conv)
    return None


def pipeline_id(attr: ir.Attribute) -> str:
    """"<dialect>.<pipeline>" of a translation_info's pipeline attribute: typed for GPU pipelines
    (`iree_gpu.PipelineAttr`); IREE 3.13's bindings have no class for `#iree_cpu.pipeline<...>`,
    so that one is read from its whole canonical form (matched whole, never by substring)."""
    if iree_gpu.PipelineAttr.isinstance(attr):
        return f"iree_gpu.{iree_gpu.PipelineAttr(attr).value.name}"
    whole = re.fullmatch(r"#(\w+)\.pipeline<(\w+)>", str(attr))
    return f"{whole[1]}.{whole[2]}" if whole else str(attr)


def _structural_roles(op: ir.Operation) -> tuple | None:
    """The roles of a root a spec matches by structure (a reduction, a transpose, elementwise
    work): its parallel loops as M, its reduced ones as K; its kind, result type and other
    configured ops (tuner.discovery.by_structure). None: not such a root."""
    if not is_structural_root(op):
        return None
    func = enclosing_op(op, "func.func")
    loops = _loop_bounds(op)
    parts = structural_parts(op, func, loops)
    if isinstance(parts, str):
        raise InputError(f"{op.name}: {parts}; not tunable yet")
    kind, result_type, fused = parts
    its = iterators(op)
    m = tuple(i for i, t in enumerate(its) if t == "parallel")
    k = tuple(i for i, t in enumerate(its) if t == "reduction")
    return kind, m, k, result_type, fused


def _dispatch(op: ir.Operation, flags: tuple[str, ...]) -> Dispatch | None:
    roles = _roles(op)
    extra: dict = {}
    if roles is None:
        structural = _structural_roles(op)
        if structural is None:
            return None
        kind, m, k, result_type, fused = structural
        roles = (kind, (), m, (), k, None)
        extra = {"result_type": result_type, "fused": fused}
    kind, batch, m, n, k, conv = roles
    func = enclosing_op(op, "func.func")
    variant = enclosing_op(op, "hal.executable.variant")
    info = iree_codegen.TranslationInfoAttr(func.attributes["translation_info"])
    lowering = op.attributes["lowering_config"] if "lowering_config" in op.attributes else None
    lhs_type, rhs_type, out_type, maps = _typed_operands(op)
    if extra:
        # Its results are compared (their tolerance chosen) at the type the dispatch stores: a
        # softmax over f16 scores reduces in f32 and stores f16.
        out_type = stored_element_type(func, out_type)
    return Dispatch(
        name=ir.StringAttr(func.attributes["sym_name"]).value,
        kind=kind,
        op_name=op.name,
        loop_bounds=_loop_bounds(op),
        batch_dims=batch,
        m_dims=m,
        n_dims=n,
        k_dims=k,
        lhs_type=lhs_type,
        rhs_type=rhs_type,
        out_type=out_type,
        indexing_maps=tuple(str(m) for m in maps),
        operand_dims=tuple(tuple(e.position if isinstance(e, ir.AffineDimExpr) else -1 for e in m.results)
                           for m in maps),
        target=_target_facts(variant),
        default=DefaultConfig(
            pipeline=str(info.pass_pipeline),
            lowering_config=str(lowering) if lowering is not None else "",
            workgroup_size=tuple(info.workgroup_size),
            subgroup_size=info.subgroup_size or None,
            translation_info=str(info),
            pipeline_id=pipeline_id(info.pass_pipeline),
        ),
        flags=flags,
        conv=conv,
        decomposition_config=(str(op.attributes["decomposition_config"])
                              if "decomposition_config" in op.attributes else ""),
        other_ops=other_compute_ops(func, op),
        **extra,
    )


def _why_not_read(op: ir.Operation, other: OtherKind) -> str:
    """Why a root no pipeline reads is not tuned, in words: its kind, and what keeps it out."""
    if other.kind == "other":  # a data-layout op (linalg.pack, linalg.unpack), say
        return (f"{op.name}, which no pipeline of this tuner reads" + (f" ({other.shape})" if other.shape else ""))
    article = "an" if other.kind[0] in "aeiou" else "a"
    what = f"{op.name}: {article} {other.kind} dispatch" + (f" ({other.shape})" if other.shape else "")
    if other.in_place:
        return f"{what} that writes its buffer in place (a copy IREE names slow_memcpy, say): no result for a spec to match"
    if other.kind in ("elementwise", "transpose", "reduction") and len(op.results) > 1:
        return f"{what} of {len(op.results)} results: this tuner reads roots of one result"
    return (f"{what}; no pipeline of this tuner reads it (contractions, convolutions, attention, and reductions, "
            "transposes and elementwise work of one result)")


def discover_program(input_path: Path, target: Target, ctx: ir.Context, flags: tuple[str, ...] = ()) -> Program:
    """Every root op of the input under `target`: the tunable ones largest first, the others
    named with why (a dynamic shape, say), and the entry function of each."""
    configured = configure(input_path, target, flags)
    digest = hashlib.sha256(input_path.read_bytes()).hexdigest()[:16]
    found, skipped = [], []
    kinds: dict[str, OtherKind] = {}
    with ctx:
        module = ir.Module.parse(configured)
        for op in iree_codegen.get_tuner_root_ops(module):
            name = ir.StringAttr(enclosing_op(op, "func.func").attributes["sym_name"]).value
            unnamed = why_not_a_file_name(name)
            if unnamed:  # the tuner's files and IREE's own dumps are named after the dispatch
                raise InputError(f"{input_path}: dispatch {unnamed}, and a dispatch's name becomes file names "
                                 "(the tuner's and IREE's dumps); rename the function that holds it")
            try:
                d = _dispatch(op, flags)
            except InputError as e:
                skipped.append((name, str(e)))
                continue
            if d is None:
                other = replace(classify(op, enclosing_op(op, "func.func"), _loops_or_none(op)),
                                in_place=not op.results)
                kinds[name] = other
                skipped.append((name, _why_not_read(op, other)))
                continue
            found.append(replace(d, source_digest=digest))
        entries, runs = entry_points(module)
        # What only an initializer runs is done once when the module loads, not in the model's
        # calls: listed apart with why, never tuned (nothing that runs it could be timed).
        loading = {name for name in initializer_dispatches(module) if name not in entries}
        # Kernels made outside IREE's codegen (tuner.rewrite.external_gemm, a user's own): listed
        # with why, their time in the profile like any dispatch's, never tuned.
        skipped += [(name, EXTERNAL_KERNEL) for name in external_exports(module)]
    seen = [d.name for d in found] + [name for name, _ in skipped]
    skipped = [(name, why) for name, why in skipped if name not in loading]
    skipped += [(name, INITIALIZER_ONLY) for name in seen if name in loading]
    found = [d for d in found if d.name not in loading]
    return Program(tuple(sorted(found, key=lambda d: d.flops, reverse=True)), tuple(skipped), entries, runs, kinds)


INITIALIZER_ONLY = ("run only by the module's initializer (util.initializer), once when the module loads, not by "
                    "a call of the model: not the model's work")


def _loops_or_none(op: ir.Operation) -> tuple[int, ...]:
    try:
        return _loop_bounds(op)
    except Exception:  # not an op with indexing maps (its shape is then its result's)
        return ()


def discover(input_path: Path, target: Target, ctx: ir.Context, flags: tuple[str, ...] = ()) -> list[Dispatch]:
    """Every tunable root op of the input under `target`, largest first."""
    return list(discover_program(input_path, target, ctx, flags).dispatches)
