"""Pooling windows on GPUs (ResNet's stem max pooling): found as a window reduction with no
channel contraction, taken by their own TileAndFuse pipeline, its rules on hand-counted configs,
and candidates compiled for real on cuda and rocm carrying their configs."""

from dataclasses import replace
from pathlib import Path

import pytest

from pipelines import DispatchKind, pipeline_for, why_untunable
from tuner.discovery.program import discover
from tuner.specs.candidates import generate_candidates
from tuner.targets import parse_target

POOL = Path(__file__).parent / "fixtures" / "kinds" / "maxpool_3x3s2_f16.mlir"  # NCHW, and NHWC read / NCHW written


def _pools(target: str, ctx):
    return {d.name.split("_dispatch")[0]: d for d in discover(POOL, parse_target(target), ctx)}


def test_a_pooling_window_is_read_as_a_convolution_with_no_channel_contraction(ctx):
    pools = _pools("cuda", ctx)
    for d in pools.values():
        assert d.kind == DispatchKind.CONVOLUTION and d.loop_bounds == (2, 64, 28, 28, 3, 3)
        assert (d.conv.batch, d.conv.output_image, d.conv.filter) == ((0, 1), (2, 3), (4, 5))
        assert not d.conv.input_channel and not d.conv.output_channel and d.conv.strides == (2, 2)
        assert pipeline_for(d).name == "llvmgpu_tile_and_fuse_pooling"
    # The channels-last form reads the input along the channels, the exporter's along the columns.
    assert pools["maxpool_nhwc_to_nchw"].operand_dims[0] == (0, -1, -1, 1)
    assert pools["maxpool_nchw"].operand_dims[0] == (0, 1, -1, -1)


def test_the_pooling_rules_on_hand_counted_configs(ctx):
    d = _pools("cuda", ctx)["maxpool_nhwc_to_nchw"]  # loops (n 2, c 64, oh 28, ow 28, kh 3, kw 3), f16
    problem = pipeline_for(d).build_problem(d)
    # 32 channels x 2 rows x 4 columns, 4 columns a thread: 32 x 2 x 1 = 64 threads.
    ok = {"workgroup_channels": 32, "workgroup_rows": 2, "workgroup_columns": 4, "thread_channels": 1,
          "thread_columns": 4}
    assert problem.admits(ok)
    # Whole subgroups of 32: 8 x 2 x 1 = 16 threads is half of one.
    assert not problem.admits({**ok, "workgroup_channels": 8})
    # At most 1024 threads: 64 x 28 x (28 / 1) = 50176 is over; 64 x 14 x 1 = 896 is not.
    assert not problem.admits({**ok, "workgroup_rows": 28, "workgroup_columns": 28, "thread_columns": 1})
    assert problem.admits({**ok, "workgroup_channels": 64, "workgroup_rows": 14})
    # A thread's elements divide the workgroup tile: 4 columns a thread do not go into 2.
    assert not problem.admits({**ok, "workgroup_columns": 2})
    # Tiles divide the loop: 8 columns do not go into 28 (not offered), 7 do (7 x 32 x 1 = 224 threads).
    assert not problem.admits({**ok, "workgroup_columns": 8, "thread_columns": 8})
    assert problem.admits({**ok, "workgroup_columns": 7, "thread_columns": 1, "workgroup_rows": 1})
    # A vector is at most 16 bytes: 8 f16 lanes, 4 f32 ones.
    wide = {**ok, "workgroup_channels": 64, "thread_channels": 8, "workgroup_rows": 4, "workgroup_columns": 4}
    assert problem.admits(wide)  # (64 / 8) x 4 x 1 = 32 threads
    f32 = replace(d, lhs_type="f32", out_type="f32")
    assert not pipeline_for(f32).build_problem(f32).admits(wide)


def test_the_pooling_config_keeps_the_window_whole_and_sizes_the_workgroup_from_its_tiles(ctx):
    d = _pools("cuda", ctx)["maxpool_nhwc_to_nchw"]
    solution = {"workgroup_channels": 32, "workgroup_rows": 2, "workgroup_columns": 4, "thread_channels": 1,
                "thread_columns": 4}
    config = pipeline_for(d).to_config(d, solution, ctx)
    # Loops (n, c, oh, ow, kh, kw): one image a workgroup, the 3x3 window reduced in one step.
    assert "workgroup = [1, 32, 2, 4, 0, 0]" in config.expect_lowering_config
    assert "thread = [1, 1, 1, 4, 0, 0]" in config.expect_lowering_config
    assert "reduction = [0, 0, 0, 0, 3, 3]" in config.expect_lowering_config
    assert "workgroup_size = [64, 1, 1]" in config.expect_translation_info  # 32 x 2 x (4 / 4)


def test_a_pooling_whose_compiler_config_tiles_the_window_is_declined_with_a_reason(ctx):
    d = _pools("cuda", ctx)["maxpool_nchw"]
    split_window = replace(d, default=replace(d.default, lowering_config=d.default.lowering_config.replace(
        "reduction = [0, 0, 0, 0, 3, 3]", "reduction = [0, 0, 0, 0, 1, 3]")))
    assert pipeline_for(split_window) is None
    assert "pooling window" in why_untunable(split_window)


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["cuda", "rocm:gfx942"])
def test_pooling_candidates_compile_and_carry_their_configs(target_name, ctx, tmp_path):
    """Both pooling forms' second and third candidates go into one merged spec each; the file
    compiles with it and every config is read back from the compiled executables."""
    from tuner.stages.variants import SpecPart, Variant, build_variant

    target = parse_target(target_name)
    pools = list(_pools(target_name, ctx).values())
    picks = []
    for d in pools:
        candidates = generate_candidates(d, pipeline_for(d), 3, ctx, target.spec_entry)
        assert len(candidates) >= 3 and candidates[0].is_baseline
        picks.append(candidates[1:3])
    for i in range(2):
        parts = tuple(SpecPart(d, cs[i].config, cs[i].label) for d, cs in zip(pools, picks))
        built = build_variant(POOL, Variant(f"sample-{i}", parts=parts), target, tmp_path / f"v{i}", ctx)
        assert built.ok, built.error
