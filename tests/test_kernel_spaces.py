"""The external Hopper kernels' tile spaces (constraints.wgmma, tuner.external.gemm_kernel.space,
tuner.external.attention_kernel.attention_space) and the order they are tried in
(tuner.external.space.ranked): which tiles the rules admit and refuse, counted by hand, that the
hand-written rules' tiles lie in the spaces, and that a few tries meet several tile shapes. No
Triton or GPU needed."""

from dataclasses import replace

import pytest

from constraints.fast_enumerate import enumerate_space
from tuner.external.attention_kernel import (PREFERRED as ATTENTION_PREFERRED, AttentionProblem, AttentionTiles,
                                             attention_space, attention_tile_candidates, attention_tiles_for,
                                             ranked_attention_tiles)
from tuner.external.gemm_kernel import (TIERS, GemmProblem, GemmTiles, estimate, ranked_tiles, space,
                                        tile_candidates, tiles_for)
from tuner.external.space import ranked


def admitted(problem: GemmProblem, tiles: GemmTiles) -> bool:
    return space(problem).admits({"bm": tiles.bm, "bn": tiles.bn, "bk": tiles.bk, "warps": tiles.warps,
                                  "stages": tiles.stages, "group": tiles.group, "tma": tiles.tma})


def test_every_tile_of_the_hand_written_rule_lies_in_the_gemm_space():
    square = GemmProblem(4096, 4096, 4096)
    assert all(admitted(square, t) for tier in TIERS for t in tier)


@pytest.mark.parametrize("tiles, mnk, admits", [
    (GemmTiles(128, 256, 64, 8, 3), (4096, 4096, 4096), True),    # 32768 sums on 256 threads: 128 each
    (GemmTiles(128, 256, 64, 4, 3), (4096, 4096, 4096), False),   # ... on 128 threads: 256 each
    (GemmTiles(128, 256, 128, 8, 2), (4096, 4096, 4096), True),   # 2 x 384 x 128 x 2 = 196608 bytes shared
    (GemmTiles(128, 256, 128, 8, 3), (4096, 4096, 4096), False),  # 294912 bytes: over 232448
    (GemmTiles(64, 32, 64, 4, 3), (4096, 4096, 4096), True),      # one warpgroup, one 64 x 32 piece
    (GemmTiles(64, 32, 64, 8, 3), (4096, 4096, 4096), False),     # two warpgroups for one 64 x 32 piece
    (GemmTiles(256, 64, 64, 4, 3), (100, 4096, 4096), False),     # 256 rows on 100: past 128, which covers them
    (GemmTiles(128, 64, 64, 4, 3), (100, 4096, 4096), True),
    (GemmTiles(128, 64, 64, 4, 3), (4096, 96, 4096), False),      # 96 columns: a multiple of 32, so no masking
    (GemmTiles(128, 32, 64, 4, 3), (4096, 96, 4096), True),
    (GemmTiles(128, 128, 64, 4, 3), (4096, 1000, 4096), True),    # 1000 columns: the last tile masked
    (GemmTiles(128, 128, 64, 4, 3), (4096, 4096, 4000), False),   # K 4000 = 125 x 32: steps of 64 do not divide
    (GemmTiles(128, 128, 32, 4, 3), (4096, 4096, 4000), True),
    # the TMA form keeps C's tile in shared memory too: 3 x 384 x 64 x 2 + 128 x 256 x 2 = 212992
    # bytes; at 4 stages 262144
    (GemmTiles(128, 256, 64, 8, 3, tma=True), (4096, 4096, 4096), True),
    (GemmTiles(128, 256, 64, 8, 4, tma=True), (4096, 4096, 4096), False),
    (GemmTiles(128, 256, 64, 8, 4), (4096, 4096, 4096), True),
    (GemmTiles(128, 128, 64, 4, 3, tma=True), (4100, 1000, 4096), True),   # rows and columns past the problem's
    (GemmTiles(128, 128, 32, 4, 3, tma=True), (4096, 4096, 4004), False),  # K rows of A not whole 16 bytes
])
def test_the_gemm_space_admits_exactly_the_tiles_a_wgmma_kernel_can_hold_and_lay_out(tiles, mnk, admits):
    assert admitted(GemmProblem(*mnk), tiles) == admits


@pytest.mark.parametrize("problem", [GemmProblem(512, 768, 768, epilogue=("bias", "gelu")),
                                     GemmProblem(49, 512, 256, batch=8)])
def test_the_tma_form_is_not_in_the_space_of_a_product_with_a_bias_or_a_batch(problem):
    assert not any(t.tma for t in ranked_tiles(problem))
    assert any(t.tma for t in ranked_tiles(GemmProblem(512, 768, 768, epilogue=("gelu",))))


def test_the_ranking_holds_the_whole_space_each_tile_once():
    problem = GemmProblem(2048, 11008, 4096)
    order = ranked_tiles(problem)
    assert len(set(order)) == len(order) == sum(1 for _ in enumerate_space(space(problem)))


def test_a_few_tries_meet_every_tile_shape_before_any_shape_twice():
    problem = GemmProblem(1576, 384, 1536)
    order = ranked_tiles(problem)
    shapes = {(t.bm, t.bn) for t in order}
    first = [(t.bm, t.bn) for t in order[:len(shapes)]]
    assert len(set(first)) == len(shapes) > 4
    # within a shape, by the estimate
    of_64x128 = [t for t in order if (t.bm, t.bn) == (64, 128)]
    assert [estimate(problem, t) for t in of_64x128] == sorted(estimate(problem, t) for t in of_64x128)


def test_the_order_is_by_estimate_then_label_round_robin_over_shapes():
    a1, a2, b1, c1 = (GemmTiles(128, 128, 64, 8, 3), GemmTiles(128, 128, 64, 8, 4), GemmTiles(64, 64, 64, 4, 3),
                      GemmTiles(64, 128, 64, 4, 3))
    times = {a1: 1.0, a2: 2.0, b1: 3.0, c1: 1.5}
    assert ranked([b1, a2, c1, a1], times.get) == (a1, c1, b1, a2)


def test_a_tile_too_small_to_keep_the_tensor_cores_busy_is_estimated_slower_for_the_same_work():
    # 4096^2: 128x128 makes 1024 workgroups (8 waves of 132) at full intensity (64 sums a value
    # loaded); 64x64 makes 4096 (32 waves) at half of it (32): 8 x 16384 against 32 x 4096 x 2
    problem = GemmProblem(4096, 4096, 4096)
    assert estimate(problem, GemmTiles(128, 128, 64, 8, 3, 8)) * 2 == pytest.approx(
        estimate(problem, GemmTiles(64, 64, 64, 4, 3, 8)))
    # 3 or 4 stages, K steps of 64 and grouped rows before the others of one shape
    assert estimate(problem, GemmTiles(128, 128, 64, 8, 3, 8)) < estimate(problem, GemmTiles(128, 128, 64, 8, 5, 8))
    assert estimate(problem, GemmTiles(128, 128, 64, 8, 3, 8)) < estimate(problem, GemmTiles(128, 128, 64, 8, 3, 1))


def test_the_candidates_in_the_model_are_the_rules_tiles_in_both_forms_then_the_spaces_distinct_ones():
    problem = GemmProblem(1576, 384, 1536)
    candidates = tile_candidates(problem, count=6)
    assert candidates[0] == tiles_for(problem) and len(set(candidates)) == 6
    assert candidates[1] == replace(candidates[0], tma=True)  # the kernel's other form of the rule's tiles
    assert all(admitted(problem, t) for t in candidates) and len({(t.bm, t.bn) for t in candidates}) >= 4


def test_grouped_tiles_launch_one_row_of_every_block_and_ungrouped_ones_a_grid_of_them():
    from tuner.external.triton_gemm import grid

    problem = GemmProblem(1000, 512, 256, batch=3)  # 8 row tiles of 128, 4 column tiles of 128
    assert grid(problem, GemmTiles(128, 128, 64, 8, 3)) == (4, 8, 3)
    assert grid(problem, GemmTiles(128, 128, 64, 8, 3, group=8)) == (32, 1, 3)
    assert GemmTiles(128, 128, 64, 8, 3, group=8).label == "128x128x64 w8 s3 g8"


def test_every_tile_the_attention_rule_offers_lies_in_its_space():
    for problem in (AttentionProblem(1, 32, 4096, 4096, 128, 128, causal=True), AttentionProblem(8, 12, 197, 197, 64, 64),
                    AttentionProblem(1, 8, 4096, 4096, 256, 256)):
        for tiles in (t.fitted(problem) for t in ATTENTION_PREFERRED):
            if tiles:
                assert attention_space(problem).admits(vars(tiles)), (problem.name, tiles)


@pytest.mark.parametrize("tiles, d, admits", [
    (AttentionTiles(128, 128, 8, 2), 128, True),   # 2 x (2 x 128 x 256 + 128 x 128) = 163840 bytes
    (AttentionTiles(128, 128, 8, 4), 128, False),  # 2 x (4 x 128 x 256 + 128 x 128) = 294912
    (AttentionTiles(128, 128, 4, 2), 128, False),  # 128 x (128 + 128) on 128 threads: 256 values each
    (AttentionTiles(128, 64, 4, 3), 128, True),    # 128 x (64 + 128) / 128 = 192: the rule's on Mistral
    (AttentionTiles(128, 64, 4, 3), 256, False),   # 128 x 256 accumulator values on 128 threads: 256
    (AttentionTiles(64, 64, 4, 3), 256, True),     # 2 x (3 x 64 x 512 + 64 x 256) = 229376 bytes
    (AttentionTiles(128, 128, 8, 3), 128, True),   # 2 x (3 x 128 x 256 + 128 x 128) = 229376
    (AttentionTiles(128, 128, 8, 3, True), 128, False),  # ... and the result's block for its TMA store: 262144
    (AttentionTiles(128, 128, 8, 2, True), 128, True),   # 2 x (2 x 128 x 256 + 2 x 128 x 128) = 196608
])
def test_the_attention_space_admits_exactly_the_tiles_that_fit_registers_and_shared_memory(tiles, d, admits):
    assert attention_space(AttentionProblem(1, 32, 4096, 4096, d, d)).admits(vars(tiles)) == admits


def test_the_attention_candidates_are_the_rules_tiles_then_the_spaces():
    problem = AttentionProblem(1, 32, 2048, 2048, 128, 128, causal=True)
    candidates = attention_tile_candidates(problem, count=5)
    assert candidates[0] == attention_tiles_for(problem) and len(set(candidates)) == 5
    assert all(attention_space(problem).admits(vars(t)) for t in candidates)
    assert len({(t.bm, t.bn) for t in candidates}) == 5  # every shape of 64 or 128 rows by 32, 64, 128 keys but one


def test_the_attention_tma_form_is_in_the_space_only_where_a_head_is_a_descriptors_block():
    def has_tma(d: int, **kw) -> bool:
        return any(t.tma for t in ranked_attention_tiles(AttentionProblem(1, 8, 1024, 1024, d, d, **kw)))

    assert has_tma(64) and has_tma(128)
    assert not has_tma(80)  # Phi-2's heads, computed padded to 128: a block would read the next head's columns
    # GPT-2's Q, K, V side by side in rows of 3 x 12 x 64, each read at its offset: whole 16-byte steps
    assert has_tma(64, rows=(1536, 1536, 1536), offsets=(0, 512, 1024), seq_major=(True, True, True, True))
    assert not has_tma(64, rows=(1540, 1540, 1540), offsets=(0, 512, 1024), seq_major=(True, True, True, True))
