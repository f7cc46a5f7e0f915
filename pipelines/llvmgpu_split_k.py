"""Split-K for GPU contractions: which factors a dispatch is offered, and the op the split
leaves to configure (shared by the pipelines that split a reduction: llvmgpu_tile_and_fuse)."""

from __future__ import annotations

from dataclasses import replace

from pipelines.dispatch import Dispatch, DispatchKind
from pipelines.llvmgpu_gemm_view import image_rows
from pipelines.model_flags import O3

# Split-K: the reduction of a contraction split `split_k` ways before dispatch formation (the
# tuning spec's `transform.structured.split_reduction`): the partial products become one more
# parallel loop, in front of the others, and a second dispatch adds them up. Offered where K is
# long against the output (K >= 2 max(M, N) and K >= 2048), each part at least 512 deep.
SPLIT_FACTORS = (2, 4, 8, 16)
MIN_SPLIT_K = 2048
MIN_SPLIT_PART = 512
# Flags under which a preprocessing spec's split does not take: under --iree-opt-level=O3 every
# split-K config of a 1024x1536x8960 f16 contraction (a grouped-query decoder block's FFN down
# projection, 16 of 16 on the H100) was read back unsplit, with the compiler's own config: the
# dispatch discovery reads has lost the unit batch loop that the op the spec sees still has.
NO_SPLIT_UNDER = O3


def split_factors(dispatch: Dispatch) -> tuple[int, ...]:
    """The split-K factors the dispatch is offered (with 1, no split; `(1,)`: no split-K knob):
    contractions with one K dim (what split_reduction splits) and no unit loop, K long against
    M and N, found under flags where the split takes (NO_SPLIT_UNDER), in a program the split
    can reach (not an executable already: Dispatch.in_executable)."""
    if dispatch.conv is not None or dispatch.kind != DispatchKind.CONTRACTION or len(dispatch.k_dims) != 1:
        return (1,)
    if dispatch.in_executable or any(f in NO_SPLIT_UNDER for f in dispatch.flags):
        return (1,)
    if image_rows(dispatch):
        # A contraction over an output image written into a padded buffer (8x7x7x512x2048):
        # split, its parts no longer write there and IREE collapses their M loops (the split
        # op compiled as 2x392x512x1024), so a config on the image's loops is not taken (every
        # split candidate of it failed, compile-only on cuda).
        return (1,)
    if 1 in dispatch.loop_bounds:
        # A unit loop (the batch of 1 a rank-3 activation gives a projection) is folded away
        # after the split: the config's tile lists are then one too long, and the compiler
        # drops it for its own (the same FFN projection under the default flags, 15 of 15).
        return (1,)
    k = dispatch.loop_bounds[dispatch.k_dims[0]]
    m = 1
    for d in dispatch.m_dims:
        m *= dispatch.loop_bounds[d]
    n = 1
    for d in dispatch.n_dims:
        n *= dispatch.loop_bounds[d]
    if k < MIN_SPLIT_K or k < 2 * max(m, n):
        return (1,)
    return (1, *(f for f in SPLIT_FACTORS if k % f == 0 and k // f >= MIN_SPLIT_PART))


def split_view(dispatch: Dispatch, split_k: int) -> Dispatch:
    """The op split-K leaves to tune, as the compiler configures it: the split a new outer
    parallel loop (a batch dim), K divided by it: loops (split, *the op's), checked against the
    compiled op's own loops when a config is read back."""
    if split_k == 1:
        return dispatch
    shift = lambda dims: tuple(d + 1 for d in dims)  # noqa: E731
    k = dispatch.k_dims[0]
    bounds = tuple(b // split_k if d == k else b for d, b in enumerate(dispatch.loop_bounds))
    return replace(dispatch, loop_bounds=(split_k, *bounds), batch_dims=(0, *shift(dispatch.batch_dims)),
                   m_dims=shift(dispatch.m_dims), n_dims=shift(dispatch.n_dims), k_dims=shift(dispatch.k_dims),
                   operand_dims=(), indexing_maps=())
