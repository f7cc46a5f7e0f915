"""Split-K on a preprocessed program's 3x3 channels-last convolutions, by hand: each one whose
output width is named gets `iree_linalg_ext.split_reduction` (tile sizes of its reduction loops:
the whole filter, input channels / S), so IREE 3.13 forms a dispatch of S partial convolutions and
one that adds them (BENCHMARKS.md, "Direct convolutions"; benchmarks/gpu_direct_conv.sh split).

    python benchmarks/conv_split_reduction.py PRE.mlir OUT.mlir 7:4,14:2   # width:splits, ...
"""

from __future__ import annotations

import sys

from iree.compiler import ir


def split(module: ir.Module, rule: dict[int, int]) -> int:
    """Annotates the module's conv_2d_nhwc_hwcf ops with a 3x3 filter and an output width in
    `rule` (width -> splits) whose input channels the splits divide; how many it annotated."""
    count = 0

    def walk(op: ir.Operation) -> None:
        nonlocal count
        for region in op.regions:
            for block in region.blocks:
                for child in block.operations:
                    if child.operation.name == "linalg.conv_2d_nhwc_hwcf":
                        filt = ir.RankedTensorType(child.operands[1].type).shape
                        out = ir.RankedTensorType(child.results[0].type).shape
                        parts = rule.get(out[2])
                        if parts and filt[:2] == [3, 3] and filt[2] % parts == 0:
                            index = ir.IndexType.get()
                            child.operation.attributes["iree_linalg_ext.split_reduction"] = ir.ArrayAttr.get(
                                [ir.IntegerAttr.get(index, v) for v in (3, 3, filt[2] // parts)])
                            count += 1
                    walk(child.operation)

    walk(module.operation)
    return count


def main() -> None:
    source, out, spec = sys.argv[1:4]
    rule = dict(tuple(int(x) for x in part.split(":")) for part in spec.split(","))
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    with ctx:
        module = ir.Module.parse(open(source).read())
        print(f"{split(module, rule)} convolutions split")
        with open(out, "w") as f:
            f.write(str(module))


if __name__ == "__main__":
    main()
