"""Transform-dialect tuning specs, built with the bindings: match the root op, annotate its config."""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import preprocessing_transform as match
from iree.compiler.dialects import transform

from pipelines import Dispatch, DispatchKind

KERNEL_CONFIG = "__kernel_config"  # codegen tuning spec (--iree-codegen-tuning-spec-path)
TRANSFORM_MAIN = "__transform_main"  # preprocessing spec (--iree-preprocessing-transform-spec-filename)
APPLY = "apply_op_config"


def _readonly() -> dict[str, ir.Attribute]:
    return {"transform.readonly": ir.UnitAttr.get()}


def _maps(dispatch: Dispatch) -> list[ir.AffineMap]:
    return [ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>")).value for text in dispatch.indexing_maps]


def _match_root(dispatch: Dispatch, op: ir.Value) -> None:
    """Ops that succeed only on this dispatch's root op: IREE's matcher for its kind (element
    types and indexing maps), then `dims_equal` on every group of dims it reports."""
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
    else:
        raise ValueError(f"no tuning-spec matcher for {dispatch.kind.value} dispatches")


def _matcher(dispatch: Dispatch, config: ir.Attribute) -> transform.NamedSequenceOp:
    """Matches the dispatch's root op and yields it with its compilation_info."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    seq = transform.NamedSequenceOp(
        f"match_{dispatch.name}", [any_op], [any_op, any_param], arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(seq.body):
        op = seq.bodyTarget
        _match_root(dispatch, op)
        param = transform.ParamConstantOp(any_param, config).result
        transform.YieldOp([op, param])
    return seq


def _apply() -> transform.NamedSequenceOp:
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    seq = transform.NamedSequenceOp(APPLY, [any_op, any_param], [], arg_attrs=[_readonly(), _readonly()])
    with ir.InsertionPoint(seq.body):
        op, param = seq.body.arguments
        transform.AnnotateOp(op, "compilation_info", param=param)
        transform.YieldOp([])
    return seq


def _entrypoint(matchers: list[str], entry: str) -> transform.NamedSequenceOp:
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
                any_op, [], seq.bodyTarget, [], matchers, [APPLY] * len(matchers)
            ).updated
        transform.YieldOp([result] if results else [])
    return seq


def build_spec(configs: list[tuple[Dispatch, str]], ctx: ir.Context, entry: str = KERNEL_CONFIG) -> ir.Module:
    """A spec that gives each dispatch's root op its compilation_info (attribute text), with the
    entry point the target loads (`KERNEL_CONFIG` or `TRANSFORM_MAIN`).

    With no configs it is the empty spec: it loads, matches nothing, and leaves every default.
    """
    if entry not in (KERNEL_CONFIG, TRANSFORM_MAIN):
        raise ValueError(f"unknown spec entry {entry!r}")
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        if configs and entry == KERNEL_CONFIG:
            # Lets IREE link this spec with its own default specs; it requires a foreach_match.
            module.operation.attributes["iree_codegen.tuning_spec_with_default_entrypoint"] = ir.UnitAttr.get()
        names = []
        with ir.InsertionPoint(module.body):
            if configs:
                _apply()
            for dispatch, info in configs:
                names.append(_matcher(dispatch, ir.Attribute.parse(info)).sym_name.value)
            _entrypoint(names, entry)
        module.operation.verify()
        return module
