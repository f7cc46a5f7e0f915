"""Transform-dialect tuning specs, built with the bindings: match the root op, annotate its config."""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

from iree.compiler import ir
from iree.compiler.dialects import preprocessing_transform as match
from iree.compiler.dialects import iree_codegen, transform
from iree.compiler.dialects.transform import structured

from pipelines import MATCHED_BY_STRUCTURE, Config, Dispatch, DispatchKind
from pipelines.parts import TransformSequences, DataTiled, FusedOps, StoredThrough
from tuner.specs.fused import APPLY_FUSED, apply_fused, match_fused, match_stored_through

KERNEL_CONFIG = "__kernel_config"  # codegen tuning spec (--iree-codegen-tuning-spec-path)
TRANSFORM_MAIN = "__transform_main"  # preprocessing spec (--iree-preprocessing-transform-spec-filename)
APPLY = "apply_op_config"
APPLY_SPLIT = "apply_split_op_config"  # then _<factor>


def _readonly() -> dict[str, ir.Attribute]:
    return {"transform.readonly": ir.UnitAttr.get()}


def _maps(dispatch: Dispatch) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>")).value for text in dispatch.indexing_maps]


def _value_transposed(maps: list[ir.AffineMap]) -> list[ir.AffineMap] | None:
    """An attention's maps with V's last two dims swapped (None where they are not plain dims).
    A preprocessing spec sees the attention before dispatches are formed, where V may still be
    (.., k2, n) though the dispatch, which discovery reads, holds it transposed (.., n, k2)
    after a transpose was folded in (seen in ONNX models raised by tuner.rewrite), or the
    reverse: the spec matches either form."""
    value = maps[2]
    if len(value.results) < 2 or not all(isinstance(e, ir.AffineDimExpr) for e in value.results[-2:]):
        return None
    results = [*value.results[:-2], value.results[-1], value.results[-2]]
    return [*maps[:2], ir.AffineMap.get(value.n_dims, value.n_symbols, results), *maps[3:]]


ONLINE_ATTENTION = "iree_linalg_ext.online_attention"


def _operand_type(dispatch: Dispatch, operand: int, element: str) -> ir.Type:
    """The tensor type of one of the dispatch's root operands: each of its dims the size of the
    loop dim it follows (dynamic where it follows none)."""
    dynamic = ir.ShapedType.get_dynamic_size()
    shape = [dispatch.loop_bounds[d] if d >= 0 else dynamic for d in dispatch.operand_dims[operand]]
    return ir.RankedTensorType.get(shape, ir.Type.parse(element))


def _match_online_attention(dispatch: Dispatch, op: ir.Value) -> None:
    """An attention where the codegen stage configures it: by then the compiler has rewritten it
    into online_attention (iree-linalg-ext-convert-attention-to-online-attention runs before the
    configs are read), which IREE's attention matcher does not take. Matched by its name and
    the types of its query, key and value, which are the dispatch's: a mask, a grouped-query
    broadcast or a transposed value folded into the op while dispatches were formed is where
    discovery read it (a preprocessing spec sees the op before, often with other maps)."""
    transform.MatchOperationNameOp(op, [ONLINE_ATTENTION])
    any_value = transform.AnyValueType.get()
    for operand, element in ((0, dispatch.lhs_type), (1, dispatch.rhs_type), (2, dispatch.out_type)):
        value = transform.GetOperandOp(any_value, op, [operand]).result
        match.MatchCastCompatibleTypesOp(value, _operand_type(dispatch, operand, element))


def _match_root(dispatch: Dispatch, op: ir.Value, maps: list[ir.AffineMap] | None = None,
                codegen: bool = False) -> None:
    """Ops that succeed only on this dispatch's root op: IREE's matcher for its kind (element
    types and indexing maps, `maps` if given, else the dispatch's), then `dims_equal` on every
    group of dims it reports. `codegen`: for the codegen stage's entry (an attention is matched
    as the online_attention it is there)."""
    if codegen and dispatch.kind == DispatchKind.ATTENTION:
        _match_online_attention(dispatch, op)
        return
    types = dict(lhs_type=ir.Type.parse(dispatch.lhs_type), rhs_type=ir.Type.parse(dispatch.rhs_type),
                 output_type=ir.Type.parse(dispatch.out_type))
    if dispatch.kind == DispatchKind.CONTRACTION:
        batch, m, n, k = match.MatchContractionOp(operand_handle=op, indexing_maps=_maps(dispatch), **types).results
        groups = ((batch, dispatch.batch_dims), (m, dispatch.m_dims), (n, dispatch.n_dims), (k, dispatch.k_dims))
        for handle, dims in groups:
            match.MatchDimsEqualOp(handle, list(dispatch.sizes(dims)))
    elif dispatch.kind == DispatchKind.CONVOLUTION and dispatch.conv is not None:
        c = dispatch.conv
        batch, image, out_ch, filt, in_ch, depth, strides, dilations = match.MatchConvolutionOp(
            operand_handle=op, indexing_maps=_maps(dispatch), **types).results
        for handle, dims in ((batch, c.batch), (image, c.output_image), (out_ch, c.output_channel),
                             (filt, c.filter), (in_ch, c.input_channel), (depth, c.depth)):
            match.MatchDimsEqualOp(handle, list(dispatch.sizes(dims)))
        match.MatchDimsEqualOp(strides, list(c.strides))
        match.MatchDimsEqualOp(dilations, list(c.dilations))
    elif dispatch.kind == DispatchKind.ATTENTION:
        detail = iree_codegen.get_attention_op_detail(*(_maps(dispatch)[i] for i in (0, 1, 2, -1)))
        maps = maps or _maps(dispatch)
        batch, m, n, k1, k2 = match.MatchAttentionOp(
            operand_handle=op, query_type=types["lhs_type"], key_type=types["rhs_type"],
            value_type=types["output_type"], output_type=types["output_type"], indexing_maps=maps).results
        for handle, dims in ((batch, detail.batch_dims), (m, detail.m_dims), (n, detail.n_dims),
                             (k1, detail.k1_dims), (k2, detail.k2_dims)):
            match.MatchDimsEqualOp(handle, list(dispatch.sizes(tuple(dims))))
    else:
        raise ValueError(f"no tuning-spec matcher for {dispatch.kind.value} dispatches")


def _matcher(dispatch: Dispatch, config: ir.Attribute, attributes: list[ir.Attribute],
             maps: list[ir.AffineMap] | None = None, suffix: str = "", codegen: bool = False,
             stored_through: int | None = None) -> transform.NamedSequenceOp:
    """Matches the dispatch's root op (with `maps` instead of its own indexing maps, if given; as
    the codegen stage holds it, with `codegen`; with `stored_through`, only where its result
    reaches the store through that many elementwise ops) and yields it with its
    compilation_info and the values of its config's other root attributes
    (Config.root_attributes: attention's decomposition_config)."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    seq = transform.NamedSequenceOp(
        f"match_{dispatch.name}{suffix}", [any_op], [any_op] + [any_param] * (1 + len(attributes)),
        arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(seq.body):
        op = seq.bodyTarget
        _match_root(dispatch, op, maps, codegen)
        if stored_through is not None:
            match_stored_through(op, stored_through)
        values = [transform.ParamConstantOp(any_param, value).result for value in (config, *attributes)]
        transform.YieldOp([op, *values])
    return seq


def _fused_matcher(dispatch: Dispatch, config: Config) -> transform.NamedSequenceOp:
    """Matches a dispatch's root op by structure (tuner.specs.fused) and yields it and its other
    configured ops with the root's compilation_info and each other op's lowering_config."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    lowering_configs = _fused_configs(config)
    others = len(lowering_configs)
    seq = transform.NamedSequenceOp(f"match_{dispatch.name}", [any_op], [any_op] * (1 + others) + [any_param] * (1 + others),
                                    arg_attrs=[_readonly()])
    with ir.InsertionPoint(seq.body):
        op = seq.bodyTarget
        handles = match_fused(dispatch, op)
        if len(handles) != others:
            raise ValueError(f"{dispatch.name}: a config for {others} other ops, the dispatch has {len(handles)}")
        params = [transform.ParamConstantOp(any_param, ir.Attribute.parse(text)).result
                  for text in (config.compilation_info, *lowering_configs)]
        transform.YieldOp([op, *handles, *params])
    return seq


def _apply_name(names: tuple[str, ...]) -> str:
    """The action that sets the compilation_info and the root attributes `names`."""
    return "_and_".join((APPLY, *names))


def _attribute_names(config: Config) -> tuple[str, ...]:
    """The names of the root attributes a config sets (Config.root_attributes)."""
    return tuple(name for name, _ in config.root_attributes)


def _apply(names: tuple[str, ...] = ()) -> transform.NamedSequenceOp:
    """The action: the matched op's compilation_info, then each root attribute of `names`."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    params = 1 + len(names)
    seq = transform.NamedSequenceOp(_apply_name(names), [any_op] + [any_param] * params, [],
                                    arg_attrs=[_readonly()] * (1 + params))
    with ir.InsertionPoint(seq.body):
        op, param, *rest = seq.body.arguments
        transform.AnnotateOp(op, "compilation_info", param=param)
        for name, value in zip(names, rest):
            transform.AnnotateOp(op, name, param=value)
        transform.YieldOp([])
    return seq


def _apply_split(factor: int) -> transform.NamedSequenceOp:
    """Split-K: split the matched op's reduction `factor` ways (the parts a new outer parallel
    loop, added up by a second op) and give the split op the compilation_info. Only before
    dispatches are formed: a preprocessing spec's action."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    seq = transform.NamedSequenceOp(f"{APPLY_SPLIT}_{factor}", [any_op, any_param], [],
                                    arg_attrs=[{"transform.consumed": ir.UnitAttr.get()}, _readonly()])
    with ir.InsertionPoint(seq.body):
        op, param = seq.body.arguments
        split = structured.SplitReductionOp(any_op, any_op, any_op, any_op, op, split_factor=factor,
                                            insert_split_dimension=0)
        transform.AnnotateOp(split.split_linalg_op, "compilation_info", param=param)
        transform.YieldOp([])
    return seq


def _entrypoint(matchers: list[str], actions: list[str], entry: str) -> transform.NamedSequenceOp:
    """The spec's entry: foreach_match from each matcher to the annotation. A codegen tuning
    spec's entry returns the (updated) variant; a preprocessing spec's returns nothing."""
    any_op = transform.AnyOpType.get()
    # An empty spec's entry only reads its argument; foreach_match consumes it.
    arg_attr = "transform.consumed" if matchers else "transform.readonly"
    results = [any_op] if entry == KERNEL_CONFIG else []
    seq = transform.NamedSequenceOp(entry, [any_op], results, arg_attrs=[{arg_attr: ir.UnitAttr.get()}])
    if entry == KERNEL_CONFIG:
        seq.operation.attributes["iree_codegen.tuning_spec_entrypoint"] = ir.UnitAttr.get()
    with ir.InsertionPoint(seq.body):
        result = seq.bodyTarget
        if matchers:
            result = transform.ForeachMatchOp(
                any_op, [], seq.bodyTarget, [], matchers, actions
            ).updated
        transform.YieldOp([result] if results else [])
    return seq


def _actions(configs: list[tuple[Dispatch, Config]]) -> None:
    """Every action sequence the configs' matchers lead to, once each."""
    plain = [c for d, c in configs if c.split_ways == 1 and d.kind not in MATCHED_BY_STRUCTURE]
    for names in sorted({_attribute_names(c) for c in plain}):
        _apply(names)
    for factor in sorted({c.split_ways for _, c in configs if c.split_ways > 1}):
        _apply_split(factor)
    for others in sorted({len(_fused_configs(c)) for d, c in configs if d.kind in MATCHED_BY_STRUCTURE}):
        apply_fused(others)


def _fused_configs(config: Config) -> tuple[str, ...]:
    """The lowering_configs a config gives its dispatch's other ops (pipelines.parts.FusedOps)."""
    fused = config.part(FusedOps)
    return fused.lowering_configs if fused else ()


def _stage(configs: list[tuple[Dispatch, Config]], entry: str) -> None:
    """The matchers and actions of one entry point (`KERNEL_CONFIG` or `TRANSFORM_MAIN`) for
    `configs`, and the entry itself, at the current insertion point."""
    names, actions = [], []
    for dispatch, config in configs:
        if dispatch.kind in MATCHED_BY_STRUCTURE:
            names.append(_fused_matcher(dispatch, config).sym_name.value)
            actions.append(f"{APPLY_FUSED}_{len(_fused_configs(config))}")
            continue
        attributes = [ir.Attribute.parse(text) for _, text in config.root_attributes]
        info = ir.Attribute.parse(config.compilation_info)
        action = (f"{APPLY_SPLIT}_{config.split_ways}" if config.split_ways > 1
                  else _apply_name(_attribute_names(config)))
        # Matched only where the ops after the root are the ones its config was made for
        # (pipelines.parts.StoredThrough: a codegen strategy written for them).
        stored = config.part(StoredThrough)
        through = stored.ops if stored else None
        names.append(_matcher(dispatch, info, attributes, codegen=entry == KERNEL_CONFIG,
                              stored_through=through).sym_name.value)
        actions.append(action)
        other = (_value_transposed(_maps(dispatch))
                 if dispatch.kind == DispatchKind.ATTENTION and entry == TRANSFORM_MAIN else None)
        if other is not None:
            names.append(_matcher(dispatch, info, attributes, other, "_value_transposed").sym_name.value)
            actions.append(action)
    _entrypoint(names, actions, entry)


def _codegen_sequences(configs: list[tuple[Dispatch, Config]]) -> None:
    """The named sequences the configs' transform-dialect codegen strategies consist of
    (pipelines.parts.TransformSequences), parsed and copied into the spec, each symbol once."""
    seen: set[str] = set()
    strategies = (c.part(TransformSequences) for _, c in configs)
    for text in dict.fromkeys(s.sequences for s in strategies if s):
        library = ir.Module.parse("module attributes {transform.with_named_sequence} {\n" + text + "}")
        for op in list(library.body.operations):
            name = ir.StringAttr(op.attributes["sym_name"]).value
            if name not in seen:
                seen.add(name)
                op.operation.clone(ip=ir.InsertionPoint.current)


# Configs of dispatches that every build for a target carries besides a candidate's own
# (Target.pinned): one the compiler's own config cannot compile, repaired (tuner.stages.repair).
Pinned = tuple[tuple[Dispatch, Config], ...]


T = TypeVar("T")


def with_pinned(pinned: Sequence[T], configs: Sequence[T],
                dispatch_of: Callable[[T], Dispatch] = lambda pair: pair[0]) -> list[T]:
    """The pinned configs of the dispatches `configs` leaves alone, then `configs` (a config
    given for a pinned dispatch replaces its pinned one). `dispatch_of`: an item's dispatch
    ((Dispatch, Config) pairs by default; tuner.stages.variants passes SpecParts)."""
    mine = {dispatch_of(c).name for c in configs}
    return [*(p for p in pinned if dispatch_of(p).name not in mine), *configs]


def build_spec(configs: list[tuple[Dispatch, Config]], ctx: ir.Context, entry: str = KERNEL_CONFIG) -> ir.Module:
    """A spec that gives each dispatch's root op its config's compilation_info (and its other root
    attributes: attention's decomposition_config; split-K configs split the op first; reductions configure every op the
    compiler configures), with the entry point the target loads (`KERNEL_CONFIG` or
    `TRANSFORM_MAIN`). A preprocessing spec (`TRANSFORM_MAIN`) also gets a `KERNEL_CONFIG`
    entry for the configs that go in at the codegen stage (`Config.codegen_spec`): one file,
    passed to the compiler once for each stage (Target.spec_flags).

    With no configs it is the empty spec: it loads, matches nothing, and leaves every default.
    """
    if entry not in (KERNEL_CONFIG, TRANSFORM_MAIN):
        raise ValueError(f"unknown spec entry {entry!r}")
    configs = [(_on(d, c), c) for d, c in configs]  # a data-tiled config goes on the mmt4d
    codegen = [(d, c) for d, c in configs if entry == KERNEL_CONFIG or c.codegen_spec]
    preprocessing = [(d, c) for d, c in configs if entry == TRANSFORM_MAIN and not c.codegen_spec]
    if any(c.split_ways > 1 and c.root_attributes for _, c in configs):
        raise ValueError("a split-K config sets the split op's compilation_info only")
    if any(c.split_ways > 1 for _, c in codegen):
        raise ValueError("split-K configs need a preprocessing spec (the op is split before dispatches are formed)")
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        if codegen:
            # Lets IREE link this spec with its own default specs; it requires a foreach_match.
            module.operation.attributes["iree_codegen.tuning_spec_with_default_entrypoint"] = ir.UnitAttr.get()
        with ir.InsertionPoint(module.body):
            _codegen_sequences(codegen)
            _actions(configs)
            if entry == TRANSFORM_MAIN:
                _stage(preprocessing, TRANSFORM_MAIN)
            if codegen or entry == KERNEL_CONFIG:
                _stage(codegen, KERNEL_CONFIG)
        module.operation.verify()
        return module


def _on(dispatch: Dispatch, config: Config) -> Dispatch:
    """The dispatch whose root op a config goes on: the tuned one's, or its data-tiled mmt4d
    (pipelines.parts.DataTiled)."""
    tiled = config.part(DataTiled)
    return tiled.dispatch if tiled else dispatch


def uses_codegen_stage(configs: list[Config]) -> bool:
    """Whether a spec of these configs has a codegen-stage entry on a preprocessing-spec target."""
    return any(c.codegen_spec and c.compilation_info for c in configs)
