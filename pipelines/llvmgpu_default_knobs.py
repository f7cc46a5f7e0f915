"""The compiler's own TileAndFuse config of a contraction or convolution, read back as the GEMM
view's knobs (pipelines.llvmgpu_gemm_view): where a search starts (its neighbourhood first, for
implicit-GEMM convolutions and contractions over output images) and what tests compare with."""

from __future__ import annotations

from pipelines.dispatch import Dispatch
from pipelines.llvmgpu_common import compatible_intrinsics
from pipelines.llvmgpu_gemm_view import gemm_view, tile_sizes
from pipelines.printed_config import mma_kind, threads_and_subgroup, tiling_level


def compiler_knobs_of_default(dispatch: Dispatch) -> dict[str, int]:
    """The compiler's own TileAndFuse config for the dispatch as this view's knobs (mma_kind as
    an index into compatible_intrinsics, subgroups_m/n, subgroup_m/n, reduction_k), read from its
    printed lowering config and workgroup size; empty where it has none or one these knobs do not
    say (checked by setting the knobs' tiles and comparing them with the compiler's)."""
    config, translation = dispatch.default.lowering_config, dispatch.default.translation_info
    kind, size = mma_kind(config), threads_and_subgroup(translation)
    workgroup, subgroup, reduction = (tiling_level(config, level) for level in ("workgroup", "subgroup", "reduction"))
    intrinsics = compatible_intrinsics(dispatch)
    names = [i.name for i in intrinsics]
    view = gemm_view(dispatch)
    if not (kind in names and size and len(workgroup) == len(subgroup) == len(reduction) == view.rank):
        return {}
    intrinsic = intrinsics[names.index(kind)]

    def side(mma: int, position: int, on_rows: bool) -> tuple[int, int]:
        """The workgroup's and a subgroup's tile along one GEMM side, in elements."""
        wg, sub = workgroup[position], subgroup[position] * mma
        if on_rows:  # the column side of a convolution: times its rows and images
            for d in (view.rows[0], *([view.images[0]] if view.images else [])):
                wg, sub = wg * workgroup[d], sub * max(1, subgroup[d])
        return wg, sub

    rows = view.rows is not None
    wg_m, sub_m = side(intrinsic.m, view.m, rows and not view.rows_on_n)
    wg_n, sub_n = side(intrinsic.n, view.n, rows and view.rows_on_n)
    if not (sub_m and sub_n) or wg_m % sub_m or wg_n % sub_n:
        return {}
    knobs = {"mma_kind": names.index(kind), "subgroups_m": wg_m // sub_m, "subgroup_m": sub_m // intrinsic.m,
             "subgroups_n": wg_n // sub_n, "subgroup_n": sub_n // intrinsic.n, "reduction_k": reduction[view.k]}
    try:
        t = tile_sizes(dispatch, knobs)
    except ValueError:
        return {}
    same = (list(t.workgroup), list(t.subgroup), list(t.reduction)) == (workgroup, subgroup, reduction)
    return knobs if same and (t.threads, t.subgroup_size) == size else {}
