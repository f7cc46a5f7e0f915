"""A contraction's data-tiled form: the linalg.mmt4d the compiler makes of it under data tiling,
found by compiling the program under the pipeline's `data_tiling_flags` and reading it back, so
that `tune` can search the contraction's own tiles and its data-tiled op's together."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

from iree.compiler import ir

from pipelines import Dispatch
from tuner.discovery.program import discover_program
from tuner.targets import Target


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def formed_from(mmt4d: Dispatch, contraction: Dispatch) -> bool:
    """Whether `mmt4d` is what data tiling makes of `contraction`: the same element types and,
    for each of batch, M, N and K, outer tiles x inner tiles covering the contraction's extent
    with less than one inner tile to spare."""
    if (mmt4d.lhs_type, mmt4d.rhs_type, mmt4d.out_type) != (contraction.lhs_type, contraction.rhs_type,
                                                            contraction.out_type):
        return False
    if len(contraction.m_dims) != 1 or len(contraction.n_dims) != 1 or len(contraction.k_dims) != 1:
        return False
    if len(mmt4d.batch_dims) != len(contraction.batch_dims) or \
            mmt4d.sizes(mmt4d.batch_dims) != contraction.sizes(contraction.batch_dims):
        return False
    for tiled, dims in ((mmt4d.m_dims, contraction.m_dims), (mmt4d.n_dims, contraction.n_dims),
                        (mmt4d.k_dims, contraction.k_dims)):
        if len(tiled) != 2:
            return False
        outer, inner = mmt4d.sizes(tiled)
        if outer != _ceil_div(contraction.sizes(dims)[0], inner):
            return False
    return True


def with_data_tiled(dispatch: Dispatch, flags: tuple[str, ...], input_path: Path, target: Target,
                    ctx: ir.Context) -> Dispatch:
    """`dispatch` with its data-tiled op (Dispatch.data_tiled): the root op, among those the
    input has when compiled with `flags` too, that data tiling formed from it; unchanged where
    there is none (one more configure compile)."""
    if not flags or dispatch.data_tiled is not None:
        return dispatch
    program = discover_program(input_path, target, ctx, (*dispatch.flags, *flags))
    found: Optional[Dispatch] = next((d for d in program.dispatches if formed_from(d, dispatch)), None)
    return replace(dispatch, data_tiled=found) if found is not None else dispatch
