"""Convolutions: found through the bindings with their dims by role, and matched by a tuning spec
(`transform.iree.match.convolution` + `dims_equal` on every role, strides and dilations) that
really reaches the compiler."""

from pathlib import Path

import pytest
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen, iree_gpu

from pipelines import Config, DispatchKind, pipeline_for, why_untunable
from tuner.specs.candidates import generate_candidates
from tuner.build.builder import LocalBuilder, build_all
from tuner.discovery.program import discover
from tuner.discovery.read_back import read_configured
from tuner.specs.transform import TRANSFORM_MAIN, build_spec
from tuner.targets import parse_target
from tuner.tools import find_tool, run_tool
from tests.conftest import SAMPLES

CONV = SAMPLES / "conv_2d_nhwc_hwcf_2x34x34x256_3x3x256_f16f16f32.mlir"
CPU_CONV = SAMPLES / "conv_2d_nhwc_hwcf_4x58x58x64_3x3x64_f32.mlir"
NCHW = SAMPLES / "conv_2d_nchw_fchw_2x256x34x34_3x3_f16f16f32.mlir"
KINDS = Path(__file__).parent / "fixtures" / "kinds"
CONV7 = KINDS / "conv_nhwc_8x9x9x512_3x3_f16.mlir"
CONV14 = KINDS / "conv_nhwc_8x16x16x256_3x3_f16.mlir"
STEM = KINDS / "conv_nhwc_8x230x230x3_7x7s2_f16.mlir"
POINTWISE14 = KINDS / "pointwise_into_padded_8x14x14x256x1024_f16.mlir"


def test_discovery_reads_convolution_dims(ctx):
    [d] = discover(CONV, parse_target("cuda"), ctx)
    assert d.kind == DispatchKind.CONVOLUTION and d.loop_bounds == (2, 32, 32, 256, 3, 3, 256)
    c = d.conv
    assert (c.batch, c.output_image, c.output_channel, c.filter, c.input_channel) == ((0,), (1, 2), (3,), (4, 5), (6,))
    assert (c.depth, c.strides, c.dilations) == ((), (1, 1), (1, 1))
    # The implicit-GEMM view: M = output image, N = output channels, K = filter and input channels.
    assert (d.batch_dims, d.m_dims, d.n_dims, d.k_dims) == ((0,), (1, 2), (3,), (4, 5, 6))
    assert "use_igemm_convolution = true" in d.default.translation_info
    assert d.shape_name == "b2_m32x32_n256_k3x3x256_f16f16f32"


def test_a_convolution_spec_reaches_the_compiler(ctx, tmp_path):
    """A hand-written IGEMM config, different from the default, applied through a spec built
    for the discovered convolution, is read back from the compiled dispatch."""
    cuda = parse_target("cuda")
    [d] = discover(CONV, cuda, ctx)
    wanted = ("#iree_gpu.lowering_config<{convert_acc_gemm, mma_kind = #iree_gpu.mma_layout<NV_MMA_SYNC_F32_16x8x16_F16>, "
              "promote_operands = [0, 1], reduction = [0, 0, 0, 0, 4], subgroup = [1, 1, 2, 2, 0], "
              "workgroup = [1, 2, 32, 64, 0]}>")
    assert wanted != d.default.lowering_config
    info = f"#iree_codegen.compilation_info<lowering_config = {wanted}, translation_info = {d.default.translation_info}>"
    spec = tmp_path / "spec.mlir"
    spec.write_text(str(build_spec([(d, Config({}, info))], ctx, TRANSFORM_MAIN)))
    assert "transform.iree.match.convolution" in spec.read_text()
    run = run_tool([find_tool("iree-compile"), str(CONV), *cuda.compile_flags, *cuda.spec_flags(str(spec)),
                    "--compile-to=executable-configurations"], 300)
    assert run.ok, run.stderr
    [configured] = read_configured([run.stdout], ctx)
    with ctx:
        assert configured.lowering_config == str(ir.Attribute.parse(wanted))
    # A spec for another shape leaves the convolution alone.
    from dataclasses import replace

    other = replace(d, loop_bounds=(2, 32, 32, 128, 3, 3, 256))
    spec.write_text(str(build_spec([(other, Config({}, info))], ctx, TRANSFORM_MAIN)))
    run = run_tool([find_tool("iree-compile"), str(CONV), *cuda.compile_flags, *cuda.spec_flags(str(spec)),
                    "--compile-to=executable-configurations"], 300)
    [configured] = read_configured([run.stdout], ctx)
    assert configured.lowering_config == d.default.lowering_config


def test_who_claims_convolutions(ctx, tmp_path):
    [d] = discover(CPU_CONV, parse_target("llvm-cpu"), ctx)
    assert pipeline_for(d).name == "llvmcpu_conv_tile_and_decompose"
    # A single image: IREE 3.13 loses any config given to it on llvm-cpu (see the pipeline).
    single = tmp_path / "one.mlir"
    single.write_text(CPU_CONV.read_text().replace("4x58x58x64", "1x58x58x64").replace("4x56x56x64", "1x56x56x64"))
    [d] = discover(single, parse_target("llvm-cpu"), ctx)
    assert d.kind == DispatchKind.CONVOLUTION and pipeline_for(d) is None
    # ... and says so where the dispatch is listed or refused.
    assert why_untunable(d).startswith("a single-image convolution: IREE 3.13 folds its unit batch away")
    for target in ("cuda", "rocm"):
        [d] = discover(CONV, parse_target(target), ctx)
        assert pipeline_for(d).name == "llvmgpu_tile_and_fuse"


@pytest.mark.slow
@pytest.mark.parametrize("target_name,count", [("cuda", 8), ("rocm:gfx942", 6)])
def test_gpu_convolution_candidates_compile_and_carry_their_config(ctx, tmp_path, target_name, count):
    target = parse_target(target_name)
    [d] = discover(CONV, target, ctx)
    candidates = generate_candidates(d, pipeline_for(d), count, ctx, target.spec_entry)
    assert len(candidates) == count + 1
    built = build_all(LocalBuilder.of(CONV, target, tmp_path, ctx), candidates)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert len({b.result.binary_hash for b in built}) == len(built)
    # build_all read every config back from the compiled dispatch (a mismatch is a failure above).
    # What those configs are, read through the typed attributes: implicit GEMMs over (n, oh, ow, f, K)
    # whose M tile (n x oh x ow pixels) and N tile (f channels) are whole MMA tiles per subgroup,
    # one subgroup of threads per (subgroups_m x subgroups_n), and the IGEMM option on.
    with ctx:
        for c in candidates[1:]:
            info = iree_codegen.CompilationInfoAttr(ir.Attribute.parse(c.config.compilation_info))
            lowering = iree_gpu.LoweringConfigAttr(info.lowering_config)
            translation = iree_codegen.TranslationInfoAttr(info.translation_info)
            m, n, _ = iree_gpu.MMAAttr(lowering.mma_kind).mnk_shape
            wg = list(lowering.workgroup_tile_sizes)
            k = c.config.knobs
            assert len(wg) == 5 and wg[4] == 0 and all(t <= b for t, b in zip(wg[:4], d.loop_bounds[:4]))
            assert wg[0] * wg[1] * wg[2] == m * k["subgroup_m"] * k["subgroups_m"]
            assert wg[3] == n * k["subgroup_n"] * k["subgroups_n"]
            assert list(translation.workgroup_size)[0] == translation.subgroup_size * k["subgroups_m"] * k["subgroups_n"]
            options = iree_gpu.PipelineOptionsAttr(translation.configuration["gpu_pipeline_options"])
            assert options.use_igemm_convolution


def test_cpu_convolution_problem(ctx):
    import z3

    from pipelines.llvmcpu_conv_tile_and_decompose import MAX_VECTOR_BYTES

    [d] = discover(CPU_CONV, parse_target("llvm-cpu"), ctx)
    problem = pipeline_for(d).build_problem(d)
    solver = z3.Solver()
    solver.add(*problem.constraints)
    assert solver.check() == z3.sat
    ow, oc, ic = (problem.knob(n).var for n in ("vector_common_parallel_ow", "vector_common_parallel_oc",
                                                "vector_reduction_ic"))
    solver.add(ow * oc * ic * 4 > MAX_VECTOR_BYTES)
    assert solver.check() == z3.unsat
    # The vector tile that failed to compile (4x64 with 32 input channels per step) is not admitted.
    base = {"distribution_n": 1, "distribution_oh": 2, "distribution_ow": 8, "distribution_oc": 64,
            "vector_common_parallel_ow": 4, "vector_common_parallel_oc": 64, "vector_reduction_ic": 16}
    assert problem.admits(base) and not problem.admits({**base, "vector_reduction_ic": 32})
    config = pipeline_for(d).to_config(d, base, ctx)
    assert "distribution = [1, 2, 8, 64, 0, 0, 0]" in config.expect_lowering_config
    two_images = pipeline_for(d).to_config(d, {**base, "distribution_n": 2}, ctx)
    assert "distribution = [2, 2, 8, 64, 0, 0, 0]" in two_images.expect_lowering_config
    assert "vector_common_parallel = [1, 1, 4, 64, 0, 0, 0], vector_reduction = [0, 0, 0, 0, 1, 1, 16]" \
        in config.expect_lowering_config


def test_the_compilers_own_convolution_config_is_read_as_knobs_and_its_neighbours_come_first(ctx):
    """The default config of the 4x56x56x64 sample, as the compiler prints it, read back as the
    pipeline's knobs (each checked against its place in the string), is a point of the space;
    the first tier of the preferences holds configs that change one or two of its knobs."""
    from pipelines.llvmcpu_conv_tile_and_decompose import default_knobs
    from pipelines.printed_config import tiling_level

    [d] = discover(CPU_CONV, parse_target("llvm-cpu"), ctx)
    text = d.default.lowering_config
    dist, vec, red = (tiling_level(text, level) for level in ("distribution", "vector_common_parallel", "vector_reduction"))
    assert len(dist) == len(vec) == len(red) == 7  # n, oh, ow, oc, kh, kw, ic
    own = default_knobs(d)
    assert own == {"distribution_n": dist[0], "distribution_oh": dist[1], "distribution_ow": dist[2],
                   "distribution_oc": dist[3], "vector_common_parallel_ow": vec[2], "vector_common_parallel_oc": vec[3],
                   "vector_reduction_ic": red[6]}
    problem = pipeline_for(d).build_problem(d)
    assert problem.admits(own)
    near = next(p for p in problem.preferences if p.name == "near_default")
    assert problem.preferences[0] is near
    import z3

    def holds(assignment):
        solver = z3.Solver()
        solver.add(near.condition, *(problem.knob(k).var == v for k, v in assignment.items()))
        return solver.check() == z3.sat

    changed = dict(own, vector_reduction_ic=1 if own["vector_reduction_ic"] != 1 else 2)
    assert holds(changed) and not holds(own)  # the default itself is the baseline, not a candidate
    far = dict(changed, distribution_oc=1 if own["distribution_oc"] != 1 else 2,
               vector_common_parallel_oc=own["vector_common_parallel_oc"] * 2)
    assert not holds(far)  # three knobs changed


@pytest.mark.parametrize("target_name", ["cuda", "rocm:gfx942"])
def test_an_nchw_convolution_is_an_implicit_gemm_with_its_channels_as_m(ctx, target_name):
    """Channels first, IREE 3.13 tiles (n, f, oh, ow, K) with the output channels as the GEMM's M
    and the output columns as its N, a column tile wider than a row spilling into rows (its own
    config for this sample on cuda: workgroup [1, 128, 1, 32, 0], subgroup [1, 2, 1, 2, 0], 256
    threads)."""
    from pipelines.llvmgpu_gemm_view import gemm_view, tile_sizes

    [d] = discover(NCHW, parse_target(target_name), ctx)
    pipeline = pipeline_for(d)
    assert pipeline is not None and pipeline.name == "llvmgpu_tile_and_fuse"
    view = gemm_view(d)
    # 256 output channels (position 1), 32 columns (position 3) in 32 rows (position 2), K = 256 x 3 x 3.
    assert (view.m, view.n, view.k, view.rows, view.rows_on_n) == (1, 3, 4, (2, 32), True)
    assert (view.m_total, view.n_total, view.k_extent) == (256, 32 * 32, 2304)
    if target_name != "cuda":
        return
    # MMA 16x8x16: 4 subgroups of 2 M tiles = 128 channels; 2 subgroups of 2 N tiles = 32 columns.
    own = {"mma_kind": 0, "subgroups_m": 4, "subgroup_m": 2, "subgroups_n": 2, "subgroup_n": 2, "reduction_k": 8,
           "prefetch_num_stages": 2, "reorder_workgroups": 0}
    t = tile_sizes(d, own)
    assert (t.workgroup, t.subgroup, t.reduction, t.threads) == ((1, 128, 1, 32, 0), (1, 2, 1, 2, 0), (0, 0, 0, 0, 8), 256)
    assert pipeline.build_problem(d).admits(own)
    # 64 columns are two whole rows of 32: 2 rows x 32 columns. Its 2 subgroups along N share it
    # out innermost first: the 4 N tiles of a row halve, so each takes 2 N tiles (16 columns) of both rows.
    wide = tile_sizes(d, {**own, "subgroup_n": 4})
    assert (wide.workgroup, wide.subgroup) == ((1, 128, 2, 32, 0), (1, 2, 2, 2, 0))
    config = pipeline.to_config(d, own, ctx)
    assert "use_igemm_convolution = true" in config.expect_translation_info
    assert "workgroup = [1, 128, 1, 32, 0]" in config.expect_lowering_config


def test_a_model_with_nchw_convolutions_is_tried_channels_last_with_them_tuned_first(ctx, tmp_path):
    """The flag stage tries a model holding a channels-first convolution with IREE's channels-last
    preprocessing pass too, judged with the convolution it forms tuned; under that flag the
    dispatch is one channels-last convolution (the transposes folded in) that the pipeline takes."""
    from types import SimpleNamespace

    from pipelines.model_flags import CHANNELS_LAST, DIRECT_CONVOLUTION
    from tuner.stages.flag_options import model_options

    cuda = parse_target("cuda")
    [d] = discover(NCHW, cuda, ctx)
    pipeline = pipeline_for(d)
    assert CHANNELS_LAST in pipeline.model_flags_for(d)
    [nhwc] = discover(CONV, cuda, ctx)
    assert CHANNELS_LAST not in pipeline_for(nhwc).model_flags_for(nhwc)
    # Both are also tried as direct convolutions (channels last first for the NCHW one), which
    # this pipeline configures too: each choice is judged with the convolutions it forms tuned.
    assert (*CHANNELS_LAST, *DIRECT_CONVOLUTION) in pipeline.model_flags_for(d)
    assert DIRECT_CONVOLUTION in pipeline_for(nhwc).model_flags_for(nhwc)
    assert pipeline.tuned_model_flags_for(d) == (CHANNELS_LAST, (*CHANNELS_LAST, *DIRECT_CONVOLUTION))
    assert pipeline_for(nhwc).tuned_model_flags_for(nhwc) == (DIRECT_CONVOLUTION,)
    from tuner.stages.base import RunCache
    from tuner.stages.ledger import Ledger

    env = SimpleNamespace(program=SimpleNamespace(dispatches=[d], in_place_copies=()), target=cuda, model=NCHW, output_dir=tmp_path,
                          cache=RunCache(), say=print, ledger=Ledger())
    options = model_options(env)
    for flags in (CHANNELS_LAST, (*CHANNELS_LAST, *DIRECT_CONVOLUTION)):
        [option] = [o for o in options if o.flags == flags and o.rewrite is None]
        assert option.tunes == (DispatchKind.CONVOLUTION,)
    [made] = discover(NCHW, cuda, ctx, CHANNELS_LAST)
    assert made.conv.output_channel == (3,) and made.conv.input_channel == (4,)  # (n, oh, ow, f) then K
    assert pipeline_for(made).name == "llvmgpu_tile_and_fuse" and CHANNELS_LAST not in pipeline_for(made).model_flags_for(made)


def test_under_the_direct_convolution_flag_a_padded_convolution_is_configured_on_its_own_loops(ctx):
    """IREE 3.13's direct convolution (DIRECT_CONVOLUTION): the config indexes the convolution's
    seven loops, one filter tap per step, not an implicit GEMM. The pipeline takes it as the same
    GEMM on those loops: M the columns (then rows, then images), N the output channels, K the
    input channels alone, the filter taps one step each; the compiler's own config is read back
    as the same knobs as its implicit-GEMM config of the same convolution."""
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default
    from pipelines.llvmgpu_gemm_view import gemm_view, tile_sizes
    from pipelines.model_flags import DIRECT_CONVOLUTION

    cuda = parse_target("cuda")
    [igemm] = discover(CONV14, cuda, ctx)
    [direct] = discover(CONV14, cuda, ctx, DIRECT_CONVOLUTION)
    assert "use_igemm_convolution = true" in igemm.default.translation_info
    assert "use_igemm_convolution = false" in direct.default.translation_info
    assert "reduction = [0, 0, 0, 0, 1, 1, 8]" in direct.default.lowering_config  # kh, kw one tap; 128 channels
    view = gemm_view(direct)
    assert (view.rank, view.m, view.n, view.k, view.k_extent) == (7, 2, 3, 6, 256)  # K: 256 input channels, not 2304
    assert view.unit_reduction == (4, 5) and view.rows == (1, 14) and view.images == (0, 8)
    own = compiler_knobs_of_default(direct)
    assert own == compiler_knobs_of_default(igemm) == {"mma_kind": 0, "subgroups_m": 4, "subgroup_m": 2,
                                                       "subgroups_n": 2, "subgroup_n": 2, "reduction_k": 8}
    # One of its neighbours, counted by hand: 2 images of 2 rows of 16 padded columns (64) by 32
    # channels, 2 x 2 subgroups of 2 x 2 MMA tiles, 2 K steps of 16 channels.
    knobs = {**own, "subgroups_m": 2, "reduction_k": 2, "prefetch_num_stages": 2, "reorder_workgroups": 0}
    t = tile_sizes(direct, knobs)
    assert (t.workgroup, t.subgroup, t.reduction) == ((2, 2, 16, 32, 0, 0, 0), (2, 1, 1, 2, 0, 0, 0),
                                                      (0, 0, 0, 0, 1, 1, 2))
    pipeline = pipeline_for(direct)
    assert pipeline is not None and pipeline.build_problem(direct).admits(knobs)
    config = pipeline.to_config(direct, knobs, ctx)
    assert "padding_conv = [2, 2, 16, 32, 0, 0, 32]" in config.expect_lowering_config  # channels padded to the K step
    assert "use_igemm_convolution = false" in config.expect_translation_info


@pytest.mark.slow
@pytest.mark.parametrize("target_name,fixture", [("cuda", CONV7), ("rocm:gfx942", CONV14)])
def test_direct_convolution_candidates_compile_and_carry_their_config(ctx, tmp_path, target_name, fixture):
    from pipelines.model_flags import DIRECT_CONVOLUTION
    from tuner.stages.builtin import with_flags

    target = with_flags(parse_target(target_name), DIRECT_CONVOLUTION)
    [d] = discover(fixture, target, ctx)
    assert pipeline_for(d) is not None and "use_igemm_convolution = false" in d.default.translation_info
    candidates = generate_candidates(d, pipeline_for(d), 4, ctx, target.spec_entry)
    built = build_all(LocalBuilder.of(fixture, target, tmp_path, ctx), candidates)
    # build_all reads each config back from the compiled dispatch: a config not taken is a failure.
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert len({b.result.binary_hash for b in built}) == len(built)
    assert all("reduction = [0, 0, 0, 0, 1, 1," in c.config.expect_lowering_config for c in candidates[1:])


@pytest.mark.slow
def test_a_unet_resnet_block_as_torch_exports_it_has_its_convolutions_and_group_norms_tunable_on_cuda(ctx, tmp_path):
    """The UNet ResNet block of examples/onnx_models.py (small here): NCHW 3x3 convolutions, each
    an implicit GEMM TileAndFuse takes; GroupNorm as torch exports it, whose two reductions over a
    group's row the reduction pipeline takes."""
    pytest.importorskip("onnx")
    import onnx

    from tests.conftest import onnx_examples
    from tuner.discovery.program import discover_program
    from tuner.input.models import program_source

    cuda = parse_target("cuda:sm_80")
    onnx.save(onnx_examples().unet_resnet_block(2, 64, 16, 128, 8), tmp_path / "unet.onnx")
    program = discover_program(program_source(tmp_path / "unet.onnx", tmp_path, cuda), cuda, ctx)
    by_kind: dict = {}
    for d in program.dispatches:
        by_kind.setdefault(d.kind, []).append(d)
    convs = by_kind[DispatchKind.CONVOLUTION]
    assert len(convs) == 2 and all(pipeline_for(d).name == "llvmgpu_tile_and_fuse" for d in convs)
    assert all(d.loop_bounds == (2, 64, 16, 16, 64, 3, 3) for d in convs)  # (n, f, oh, ow, c, kh, kw)
    # A group's row: 64 channels / 8 groups x 16 x 16 = 2048 elements, for 2 images x 8 groups.
    norms = [d for kind in (DispatchKind.REDUCTION, DispatchKind.NORMALIZATION) for d in by_kind.get(kind, ())]
    assert norms and all(d.loop_bounds == (16, 2048) for d in norms)
    assert all(pipeline_for(d).name == "llvmgpu_vector_distribute_reduction" for d in norms)




def test_a_column_tile_lies_on_padded_rows_then_images_of_a_14_wide_output(ctx):
    """ResNet's 14x14 outputs: no power-of-two MMA tile divides 14 columns, so the columns are
    padded to 16 (as IREE's own config pads them), and a wider tile takes as many whole padded
    rows as 14 shares with its span, then images dividing the batch of 8; a subgroup's share is
    cut innermost first. IREE 3.13's own config for it: workgroup [4, 2, 16, 32, 0] (4 images of
    2 rows), subgroup [2, 1, 1, 2, 0] (2 images of one row), 8 subgroups of 32 threads."""
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default
    from pipelines.llvmgpu_gemm_view import column_tiles, gemm_view, subgroup_placement

    [d] = discover(CONV14, parse_target("cuda"), ctx)
    view = gemm_view(d)
    assert (view.columns, view.rows[1], view.images[1]) == (14, 14, 8)
    # Counted by hand, MMA 16 along the columns (padded to 16):
    assert column_tiles(view, 8, 16) == (8, 1, 1)  # half a padded row
    assert column_tiles(view, 16, 16) == (16, 1, 1)  # one padded row
    assert column_tiles(view, 32, 16) == (16, 2, 1)  # two rows: 14 = 7 x 2
    assert column_tiles(view, 64, 16) == (16, 2, 2)  # 4 spans: 14 shares 2 with 4, then 2 images
    assert column_tiles(view, 128, 16) == (16, 2, 4)  # the compiler's own tile
    assert column_tiles(view, 256, 16) == (16, 2, 8)  # 16 spans: 2 rows of all 8 images
    assert column_tiles(view, 48, 16) is None  # 3 spans: 14 shares 1 with 3, and 3 images do not divide 8
    assert column_tiles(view, 512, 16) is None  # 32 spans: 16 images, more than the batch
    # 4 subgroups along the columns share 4 images of 2 rows: the rows halve first, then the images.
    assert subgroup_placement((16, 2, 4), 4, 16) == (16, 1, 2)
    assert subgroup_placement((64, 1, 1), 2, 16) == (32, 1, 1)  # columns first
    # The compiler's own config is read back as knobs: 4 x 2 subgroups of 2 x 2 MMA tiles, 8 K steps.
    assert compiler_knobs_of_default(d) == {"mma_kind": 0, "subgroups_m": 4, "subgroup_m": 2, "subgroups_n": 2,
                                            "subgroup_n": 2, "reduction_k": 8}


@pytest.mark.parametrize("fixture", [CONV14, NCHW], ids=["nhwc_14x14", "nchw_32x32"])
def test_a_gpu_convolutions_first_candidates_are_the_compilers_config_with_one_or_two_knobs_changed(ctx, fixture):
    from constraints.enumerate import enumerate_solutions
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default

    [d] = discover(fixture, parse_target("cuda"), ctx)
    own = compiler_knobs_of_default(d)
    assert own["subgroups_m"] * own["subgroups_n"] == 8  # the compiler's 256 threads
    first = list(enumerate_solutions(pipeline_for(d).build_problem(d), 12))
    changed = [sum(s[k] != v for k, v in own.items()) for s in first]
    assert len(first) == 12 and all(1 <= c <= 2 for c in changed), changed


def test_a_matmuls_candidates_are_not_tied_to_the_compilers_config(ctx):
    """The near-default preference is for implicit-GEMM convolutions only: a matmul's order
    stays the measured one, which puts a full register tile first (4096^3: 4x8 tiles of 16x8)."""
    from constraints.enumerate import enumerate_solutions
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default

    [d] = discover(SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir", parse_target("cuda"), ctx)
    problem = pipeline_for(d).build_problem(d)
    assert compiler_knobs_of_default(d) and "near_default" not in [p.name for p in problem.preferences]
    [s] = list(enumerate_solutions(problem, 1))
    assert s["subgroup_m"] * s["subgroup_n"] >= 16


def test_the_z3_rule_for_column_tiles_admits_exactly_the_tiles_that_lie_on_the_image(ctx):
    import z3

    from pipelines.llvmgpu_gemm_view import column_tiles, column_tiles_fit, gemm_view

    for fixture in (CONV7, CONV14, CONV, STEM):
        [d] = discover(fixture, parse_target("cuda"), ctx)
        view = gemm_view(d)
        for mma in (8, 16):
            for tile in range(8, 1025, 8):
                solver = z3.Solver()
                t, m = z3.Int("t"), z3.Int("m")
                solver.add(t == tile, m == mma, column_tiles_fit(view, t, m))
                assert (solver.check() == z3.sat) == (column_tiles(view, tile, mma) is not None), (fixture.name, tile, mma)


def test_a_7x7_convolution_has_configs_and_one_reproduces_the_compilers_own_padded_config(ctx):
    """IREE 3.13's own config for this convolution on cuda (read from --iree-hal-dump-executable-
    configurations-to): workgroup [8, 1, 16, 32, 0], subgroup [2, 1, 1, 2, 0], padding
    [8, 1, 16, 32, 128], padding_conv [8, 1, 16, 32, 0, 0, 0], 256 threads, MMA 16x8x16, 8 K steps.
    Before the columns were padded this convolution had no config at all (an empty space)."""
    from pipelines.llvmgpu_gemm_view import tile_sizes

    [d] = discover(CONV7, parse_target("cuda"), ctx)
    pipeline = pipeline_for(d)
    assert pipeline is not None and pipeline.name == "llvmgpu_tile_and_fuse"
    problem = pipeline.build_problem(d)
    # 8 images x 16 padded columns = 128 = 4 subgroups x 2 MMA tiles x 16; 32 channels = 2 x 2 x 8.
    own = {"mma_kind": 0, "subgroups_m": 4, "subgroup_m": 2, "subgroups_n": 2, "subgroup_n": 2, "reduction_k": 8,
           "prefetch_num_stages": 2, "reorder_workgroups": 0}
    assert problem.admits(own)
    t = tile_sizes(d, own)
    assert (t.workgroup, t.subgroup, t.reduction, t.threads) == ((8, 1, 16, 32, 0), (2, 1, 1, 2, 0), (0, 0, 0, 0, 8), 256)
    config = pipeline.to_config(d, own, ctx)
    assert "padding = [8, 1, 16, 32, 128]" in config.expect_lowering_config
    assert "padding_conv = [8, 1, 16, 32, 0, 0, 0]" in config.expect_lowering_config
    # A tile of 3 padded rows (48) lies on nothing; nor does a subgroup tile wider than its workgroup's rows.
    assert not problem.admits({**own, "subgroups_m": 1, "subgroup_m": 3})
    assert len(generate_candidates(d, pipeline, 8, ctx, parse_target("cuda").spec_entry)) == 9


def test_a_contraction_over_an_output_image_is_tiled_on_whole_padded_rows_as_the_compiler_does(ctx):
    """A 1x1 convolution made channels last and written into a padded buffer stays a contraction
    with M loops (8 images, 14 rows, 14 columns). IREE 3.13's own config tiles it as a
    convolution: workgroup [2, 2, 16, 64, 0], 2 images of 2 rows of 14 columns padded to 16,
    subgroup [2, 1, 1, 4, 0], 128 threads, 8 K steps. Tiled as a plain GEMM on its 14 columns
    (the other M loops one each), every candidate crashed iree-compile (SIGFPE) on the H100 run."""
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default
    from pipelines.llvmgpu_gemm_view import gemm_view, tile_sizes

    [d] = discover(POINTWISE14, parse_target("cuda"), ctx)
    assert d.conv is None and d.loop_bounds == (8, 14, 14, 256, 1024)
    view = gemm_view(d)
    assert (view.m, view.columns, view.rows, view.images, view.n, view.k) == (2, 14, (1, 14), (0, 8), 3, 4)
    # Counted by hand: M 64 = 2 subgroups x 2 MMA tiles x 16; N 64 = 2 subgroups x 4 x 8.
    own = compiler_knobs_of_default(d)
    assert own == {"mma_kind": 0, "subgroups_m": 2, "subgroup_m": 2, "subgroups_n": 2, "subgroup_n": 4,
                   "reduction_k": 8}
    knobs = {**own, "subgroups_m": 4, "prefetch_num_stages": 2, "reorder_workgroups": 0}  # 128 rows: 4 images x 2 rows
    t = tile_sizes(d, knobs)
    assert (t.workgroup, t.subgroup, t.threads) == ((4, 2, 16, 64, 0), (2, 1, 1, 4, 0), 256)
    config = pipeline_for(d).to_config(d, knobs, ctx)
    assert "padding = [4, 2, 16, 64, 128]" in config.expect_lowering_config
    assert "padding_conv" not in config.expect_lowering_config
    assert "use_igemm_convolution" not in config.expect_translation_info


def test_the_stem_convolutions_own_config_is_in_the_space_one_padded_row_and_k_padded(ctx):
    """ResNet's stem (7x7, stride 2, 3 channels; 112 output columns; K = 147). IREE 3.13's own
    config on cuda: workgroup [1, 1, 128, 32, 0] (one row of 112 columns padded to 128), subgroup
    [1, 1, 2, 2, 0], 8 subgroups, 2 K steps (K padded to 160: padding [1, 1, 128, 32, 32]). The
    space had no config for it at all (K is no multiple of a K step, and 112 columns take no
    power-of-two tile but 16)."""
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default
    from pipelines.llvmgpu_gemm_view import column_tiles, gemm_view

    [d] = discover(STEM, parse_target("cuda"), ctx)
    view = gemm_view(d)
    assert (view.columns, view.k_extent) == (112, 147)
    assert column_tiles(view, 128, 16) == (128, 1, 1)  # 112 padded to 128: a seventh more
    assert column_tiles(view, 16, 16) == (16, 1, 1)
    assert column_tiles(view, 256, 16) is None  # 2.3 rows: lies on nothing
    assert column_tiles(view, 64, 16) is None  # 112 = 1.75 x 64
    own = compiler_knobs_of_default(d)
    assert own == {"mma_kind": 0, "subgroups_m": 4, "subgroup_m": 2, "subgroups_n": 2, "subgroup_n": 2,
                   "reduction_k": 2}
    pipeline = pipeline_for(d)
    knobs = {**own, "prefetch_num_stages": 2, "reorder_workgroups": 0}
    problem = pipeline.build_problem(d)
    assert problem.admits(knobs)
    assert not problem.admits({**knobs, "reduction_k": 4})  # K 147 padded to 192: a third more
    config = pipeline.to_config(d, knobs, ctx)
    assert "padding = [1, 1, 128, 32, 32]" in config.expect_lowering_config
    assert "padding_conv = [1, 1, 128, 32, 0, 0, 0]" in config.expect_lowering_config


@pytest.mark.slow
@pytest.mark.parametrize("fixture, count", [(CONV14, 6), (POINTWISE14, 3), (STEM, 3)],
                         ids=["conv_14_wide", "contraction_over_14x14_image", "stem_k147"])
def test_padded_gpu_configs_compile_and_carry_their_config_on_cuda(ctx, tmp_path, fixture, count):
    """Configs that pad: ResNet's 14-wide rows (padding_conv), a contraction over a 14x14 image
    (padding, unit-tiled loops padded to 1: a 0 crashed iree-compile), the stem's 112-wide row
    and its K of 147 (padding on both)."""
    target = parse_target("cuda")
    [d] = discover(fixture, target, ctx)
    candidates = generate_candidates(d, pipeline_for(d), count, ctx, target.spec_entry)
    assert len(candidates) == count + 1
    built = build_all(LocalBuilder.of(fixture, target, tmp_path, ctx), candidates)
    # build_all reads each config back from the compiled dispatch: a config not taken is a failure.
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert any("padding" in c.config.compilation_info for c in candidates[1:])


@pytest.mark.parametrize("as_terms", [False, True], ids=["integers", "z3_terms"])
def test_workgroup_counts_cover_the_whole_output_grid_images_included(ctx, as_terms):
    """Counted by hand. ResNet-50's 8x14x14x256x1024 contraction over an output image: its M
    tiles lie on rows of 14 columns padded to 16, then 14 rows, then 8 images (1792 positions).
    Counted without the images (the space did until now), the compiler's own 64x64 config and
    every neighbour but the smallest read as under 128 workgroups."""
    import z3

    from pipelines.llvmgpu_gemm_view import gemm_view, workgroup_count

    def count(fixture, wg_m, wg_n, mma_m=16, mma_n=8):
        [d] = discover(fixture, parse_target("cuda"), ctx)
        args = (wg_m, wg_n, mma_m, mma_n)
        if as_terms:
            return z3.simplify(workgroup_count(d, gemm_view(d), *map(z3.IntVal, args))).as_long()
        return workgroup_count(d, gemm_view(d), *args)

    assert count(POINTWISE14, 64, 64) == 1792 // 64 * (256 // 64) == 112  # the compiler's config
    assert count(POINTWISE14, 32, 64) == 1792 // 32 * 4 == 224
    assert count(POINTWISE14, 128, 128) == 1792 // 128 * 2 == 28
    # The stem (output 8x112x112x64): a 128-column tile holds one row of 112, padded; a 16-column
    # tile is one of 7 across a row.
    assert count(STEM, 128, 32) == 8 * 112 * (64 // 32) == 1792
    assert count(STEM, 16, 32) == 8 * 112 * 7 * 2 == 12544
    # A batched matmul: every batch a workgroup of its own per tile.
    assert count(SAMPLES / "batch_matmul_16x1024x1024x1024_f16f16f32.mlir", 128, 64) == 16 * 8 * 16


def test_the_first_configs_of_a_contraction_over_an_image_are_near_the_compilers_and_fill_the_gpu(ctx):
    """On the H100 the 8 configs first tried for ResNet-50's 8x14x14x256x1024 contraction were one
    of 896 workgroups and seven of 28-56 (larger tiles: the images went uncounted), all 0.24-0.63x
    of the compiler's 112. Now the first 8 each change one or two of the compiler's knobs and
    launch at least 128 workgroups."""
    from pipelines.llvmgpu_default_knobs import compiler_knobs_of_default
    from pipelines.llvmgpu_gemm_view import GemmTiles, gemm_view, workgroup_count
    from pipelines.llvmgpu_common import compatible_intrinsics

    [d] = discover(POINTWISE14, parse_target("cuda"), ctx)
    own = compiler_knobs_of_default(d)
    candidates = generate_candidates(d, pipeline_for(d), 8, ctx, parse_target("cuda").spec_entry)[1:]
    assert len(candidates) == 8
    for c in candidates:
        k = c.config.knobs
        mma = compatible_intrinsics(d)[k["mma_kind"]]
        tiles = GemmTiles.of(k, mma)
        assert 1 <= sum(k[name] != value for name, value in own.items()) <= 2, c.label
        assert workgroup_count(d, gemm_view(d), tiles.wg_m, tiles.wg_n, mma.m, mma.n) >= 128, c.label
