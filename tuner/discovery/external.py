"""Kernels a program runs that IREE's codegen did not make: the exports of its external executable
variants (`hal.dispatch.extern`: tuner.rewrite.external_gemm's and external_attention's, or a
user's own). Discovery lists them with why they are not tuned; the profile times them like any
dispatch."""

from __future__ import annotations

from iree.compiler import ir

from tuner.discovery.entry import walk_ops

# Why such a kernel is not tuned, as the dispatch table says it.
EXTERNAL_KERNEL = "an external kernel (hal.dispatch.extern), compiled outside IREE's codegen: no config of IREE's to tune"


def external_exports(module: ir.Module) -> list[str]:
    """The exports of the module's external executable variants: objects, and no code of IREE's."""
    names = []
    for export in walk_ops(module.operation, ("hal.executable.export",)):
        variant = export.parent
        if variant.name == "hal.executable.variant" and "objects" in variant.attributes \
                and not any(op.name == "builtin.module" for op in variant.regions[0].blocks[0].operations):
            names.append(ir.StringAttr(export.attributes["sym_name"]).value)
    return names
