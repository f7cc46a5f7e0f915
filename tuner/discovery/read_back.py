"""Reading back what the compiler did: the root ops of configured modules (dumps or
executable-configurations output) with the config each carries, so that a candidate's config
is checked, never assumed, to have taken effect (pipelines.check_config)."""

from __future__ import annotations

from typing import Iterable

from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, linalg

from pipelines import ConfiguredDispatch
from tuner.discovery.by_structure import configured_ops, is_structural_root
from tuner.discovery.program import ATTENTION_OPS, enclosing_op, static_loop_bounds, target_config

# A root op's attributes that are its structure, not its config (left out of
# ConfiguredDispatch.attributes; its lowering_config has a field of its own).
_NOT_CONFIG = frozenset({"lowering_config", "indexing_maps", "iterator_types", "operandSegmentSizes"})


def _ukernels(op: ir.Operation) -> str:
    """The `ukernels` its executable's target names (llvm-cpu), or ""."""
    target = enclosing_op(op, "hal.executable.variant").attributes["target"]
    if "{" not in str(target):
        return ""
    config = target_config(target)
    return ir.StringAttr(config["ukernels"]).value if "ukernels" in config else ""


def _configured_roots(module: ir.Module) -> list[ir.Operation]:
    """Root ops of configured modules. The compiler marks the ones it configured itself; an op
    configured from a compilation_info keeps no root_op mark, so any contraction, convolution,
    attention, reduction or other structurally matched op that carries a lowering_config counts too."""
    roots = list(iree_codegen.get_tuner_root_ops(module))

    def visit(op: ir.Operation) -> ir.WalkResult:
        if "lowering_config" in op.attributes and op not in roots and (
            linalg.isa_contraction_op(op) or linalg.isa_convolution_op(op) or iree_codegen.isa_attention_op(op)
            or op.name in ATTENTION_OPS or is_structural_root(op)
        ):
            roots.append(op)
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit)
    return roots


def read_configured(texts: Iterable[str], ctx: ir.Context) -> list[ConfiguredDispatch]:
    """Root ops as the compiler configured them, from configured modules (dumps or
    executable-configurations output), to check that a candidate's config took effect."""
    out = []
    with ctx:
        for text in texts:
            module = ir.Module.parse(text)
            for op in _configured_roots(module):
                func = enclosing_op(op, "func.func")
                others = [o for o in configured_ops(func) if o != op] if is_structural_root(op) else []
                out.append(ConfiguredDispatch(
                    op_name=op.name,
                    lowering_config=str(op.attributes["lowering_config"]),
                    translation_info=str(func.attributes["translation_info"]) if "translation_info" in func.attributes else "",
                    attributes=tuple((name, str(op.attributes[name])) for name in op.attributes
                                     if name not in _NOT_CONFIG),
                    loop_bounds=static_loop_bounds(op),
                    fused_lowering_configs=tuple(str(o.attributes["lowering_config"]) for o in others),
                    ukernels=_ukernels(op),
                ))
    return out
