"""Transform-dialect tuning specs, built with the bindings: match the root op, annotate its config."""

from __future__ import annotations

from iree.compiler import ir
from iree.compiler.dialects import preprocessing_transform as match
from iree.compiler.dialects import transform

from pipelines import Dispatch

ENTRYPOINT = "__kernel_config"
APPLY = "apply_op_config"


def _readonly() -> dict[str, ir.Attribute]:
    return {"transform.readonly": ir.UnitAttr.get()}


def _matcher(dispatch: Dispatch, config: ir.Attribute) -> transform.NamedSequenceOp:
    """Matches the dispatch's contraction by element types, indexing maps and every dimension."""
    any_op, any_param = transform.AnyOpType.get(), transform.AnyParamType.get()
    seq = transform.NamedSequenceOp(
        f"match_{dispatch.name}", [any_op], [any_op, any_param], arg_attrs=[_readonly()]
    )
    with ir.InsertionPoint(seq.body):
        op = seq.bodyTarget
        batch, m, n, k = match.MatchContractionOp(
            operand_handle=op,
            lhs_type=ir.Type.parse(dispatch.lhs_type),
            rhs_type=ir.Type.parse(dispatch.rhs_type),
            output_type=ir.Type.parse(dispatch.out_type),
            indexing_maps=[ir.AffineMapAttr(ir.Attribute.parse(f"affine_map<{text}>")).value
                           for text in dispatch.indexing_maps],
        ).results
        for handle, dims in ((batch, dispatch.batch_dims), (m, dispatch.m_dims), (n, dispatch.n_dims), (k, dispatch.k_dims)):
            match.MatchDimsEqualOp(handle, list(dispatch.sizes(dims)))
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


def _entrypoint(matchers: list[str]) -> transform.NamedSequenceOp:
    any_op = transform.AnyOpType.get()
    # The placeholder entry point of an empty spec only reads its argument.
    arg_attr = "transform.consumed" if matchers else "transform.readonly"
    seq = transform.NamedSequenceOp(ENTRYPOINT, [any_op], [any_op], arg_attrs=[{arg_attr: ir.UnitAttr.get()}])
    seq.operation.attributes["iree_codegen.tuning_spec_entrypoint"] = ir.UnitAttr.get()
    with ir.InsertionPoint(seq.body):
        result = seq.bodyTarget
        if matchers:
            result = transform.ForeachMatchOp(
                any_op, [], seq.bodyTarget, [], matchers, [APPLY] * len(matchers)
            ).updated
        transform.YieldOp([result])
    return seq


def build_spec(configs: list[tuple[Dispatch, str]], ctx: ir.Context) -> ir.Module:
    """A tuning spec that gives each dispatch's root op its compilation_info (attribute text).

    With no configs it is the empty spec: it loads, matches nothing, and leaves every default.
    """
    with ctx, ir.Location.unknown():
        module = ir.Module.create()
        module.operation.attributes["transform.with_named_sequence"] = ir.UnitAttr.get()
        if configs:
            # Lets IREE link this spec with its own default specs; it requires a foreach_match.
            module.operation.attributes["iree_codegen.tuning_spec_with_default_entrypoint"] = ir.UnitAttr.get()
        names = []
        with ir.InsertionPoint(module.body):
            if configs:
                _apply()
            for dispatch, info in configs:
                names.append(_matcher(dispatch, ir.Attribute.parse(info)).sym_name.value)
            _entrypoint(names)
        module.operation.verify()
        return module
