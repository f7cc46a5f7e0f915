"""Split-K on the GPU TileAndFuse pipeline: which contractions are offered it, the preprocessing
spec that splits the op and configures the split op, and the timed module that runs both of its
dispatches (compiled for sm_80 here; no GPU needed)."""

from dataclasses import replace
from pathlib import Path

import pytest
from iree.compiler import ir

from constraints.fast_enumerate import enumerate_space
from pipelines import DispatchKind
from pipelines.parts import SplitReduction
from pipelines.llvmgpu_tile_and_fuse import LLVMGPUTileAndFuse, split_factors
from tuner.specs.candidates import candidate_for
from tuner.build.builder import LocalBuilder, build_all
from tuner.build.compile import BENCH_CONFIGS
from tuner.discovery.program import discover
from tuner.discovery.read_back import read_configured
from tuner.build.dispatch_benchmark import COMBINED_FUNCTION, check_split
from tuner.core.results import Status
from tuner.targets import parse_target
from tests.conftest import SAMPLES

PIPE = LLVMGPUTileAndFuse()


def _large_k(path, m=64, n=128, k=4096):
    path.write_text(f"""
func.func @mm(%a: tensor<{m}x{k}xf16>, %b: tensor<{k}x{n}xf16>) -> tensor<{m}x{n}xf32> {{
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}xf16>, tensor<{k}x{n}xf16>) outs(%f : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  return %r : tensor<{m}x{n}xf32>
}}
""")
    return path


@pytest.fixture(scope="module")
def cuda():
    return parse_target("cuda:sm_80")


@pytest.fixture(scope="module")
def large_k(cuda, tmp_path_factory):
    path = _large_k(tmp_path_factory.mktemp("splitk") / "mm.mlir")
    [d] = discover(path, cuda, ir.Context())
    return path, d


def test_split_k_is_offered_where_k_is_long_against_the_output(cuda, large_k):
    _, d = large_k
    assert split_factors(d) == (1, 2, 4, 8)  # 4096 / 16 = 256 is below the 512 a part must keep
    assert split_factors(replace(d, loop_bounds=(1024, 1024, 16384))) == (1, 2, 4, 8, 16)
    assert split_factors(replace(d, loop_bounds=(4096, 4096, 4096))) == (1,)  # the output fills the GPU
    assert split_factors(replace(d, loop_bounds=(64, 4096, 4096))) == (1,)  # N as long as K
    assert split_factors(replace(d, loop_bounds=(64, 64, 1024))) == (1,)  # K too short to split
    assert split_factors(replace(d, kind=DispatchKind.CONVOLUTION)) == (1,)
    # Found under --iree-opt-level=O3, where a preprocessing spec's split is not taken: not offered.
    assert split_factors(replace(d, flags=("--iree-opt-level=O3",))) == (1,)
    assert split_factors(replace(d, flags=("--iree-dispatch-creation-enable-aggressive-fusion",))) == (1, 2, 4, 8)
    # In an executable already (an IREE dispatch benchmark), nothing splits the op: not offered.
    assert split_factors(replace(d, in_executable=True)) == (1,)
    # A unit batch loop is folded after the split, and the config with it: not offered.
    assert split_factors(replace(d, loop_bounds=(1, 64, 128, 4096), batch_dims=(0,), m_dims=(1,), n_dims=(2,),
                                 k_dims=(3,))) == (1,)
    assert split_factors(replace(d, loop_bounds=(2, 64, 128, 4096), batch_dims=(0,), m_dims=(1,), n_dims=(2,),
                                 k_dims=(3,))) == (1, 2, 4, 8)  # batch matmul: its batch does not count
    assert split_factors(replace(d, loop_bounds=(64, 128, 64, 64), k_dims=(2, 3))) == (1,)  # two K dims
    # Without split-K the problem has no such knob (stored results of those dispatches keep their keys).
    [square] = discover(SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir", cuda, ir.Context())
    assert "split_k" not in {k.name for k in PIPE.build_problem(square).knobs}


def test_each_split_part_is_whole_k_tiles(large_k):
    _, d = large_k
    configs = list(enumerate_space(PIPE.build_problem(d)))
    splits = [c for c in configs if c["split_k"] > 1]
    assert splits and any(c["split_k"] == 1 for c in configs)
    for c in splits:  # 16 = the MMA's K
        assert (4096 // c["split_k"]) % (c["reduction_k"] * 16) == 0, c
    features = PIPE.features(d, splits[0])
    whole = PIPE.features(d, {**splits[0], "split_k": 1})
    assert features["workgroups"] == whole["workgroups"] + features["split_k"]  # log2: the parts launch too


@pytest.mark.slow
def test_split_candidates_compile_carry_their_config_and_time_both_dispatches(cuda, large_k, ctx, tmp_path):
    path, d = large_k
    configs = list(enumerate_space(PIPE.build_problem(d)))
    chosen = [next(c for c in configs if c["split_k"] == s) for s in (2, 8)] + [next(c for c in configs if c["split_k"] == 1)]
    candidates = [candidate_for(i + 1, d, PIPE, knobs, ctx, cuda.spec_entry) for i, knobs in enumerate(chosen)]
    assert "transform.structured.split_reduction" in candidates[0].spec
    assert "split_reduction" not in candidates[2].spec
    built = build_all(LocalBuilder.of(path, cuda, tmp_path, ctx), candidates)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    for b, knobs in zip(built[:2], chosen):
        # The split op carries the config, with the loops it was built for: (parts, M, N, K / parts).
        configured = read_configured((p.read_text() for p in sorted((b.vmfb.parent / "configs").glob("*.mlir"))), ctx)
        split = next(c for c in configured if c.lowering_config == b.result.compilation_info.split("lowering_config = ")[1]
                     .split(", translation_info")[0])
        assert split.loop_bounds == (knobs["split_k"], 64, 128, 4096 // knobs["split_k"])
        # What is timed is one module that runs the split op's dispatch and the one adding the parts.
        assert b.dispatch_function == COMBINED_FUNCTION
        assert len(list((b.vmfb.parent / BENCH_CONFIGS).glob("*.mlir"))) == 2
    assert built[2].dispatch_function.endswith(d.name)  # unsplit: the tuned dispatch alone


@pytest.mark.slow
def test_a_split_config_read_back_with_other_loops_is_caught(cuda, large_k, ctx, tmp_path):
    path, d = large_k
    knobs = next(c for c in enumerate_space(PIPE.build_problem(d)) if c["split_k"] == 4)
    c = candidate_for(1, d, PIPE, knobs, ctx, cuda.spec_entry)
    wrong = replace(c, config=replace(c.config, parts=(SplitReduction(4, (64, 128, 4, 1024)),)))
    [b] = build_all(LocalBuilder.of(path, cuda, tmp_path, ctx), [wrong])
    assert b.result.status == Status.CONFIG_NOT_APPLIED and "loops are [4, 64, 128, 1024]" in b.result.error


def test_a_timed_module_without_the_adding_dispatch_is_refused(large_k, ctx):
    _, d = large_k
    knobs = next(c for c in enumerate_space(PIPE.build_problem(d)) if c["split_k"] == 4)
    config = PIPE.to_config(d, knobs, ctx)
    lonely = "module {\n}\n"
    assert "no dispatch after the split op adds up its 4 parts into 8192 elements" in check_split(config, lonely, ctx)


SPLIT_ONLY_SPEC = """
module attributes {transform.with_named_sequence} {
  transform.named_sequence @split(%op: !transform.any_op {transform.consumed}) {
    %init, %fill, %split, %comb = transform.structured.split_reduction %op
      <{split_factor = 4 : i64, insert_split_dimension = 0 : i64}>
      : (!transform.any_op) -> (!transform.any_op, !transform.any_op, !transform.any_op, !transform.any_op)
    transform.yield
  }
  transform.named_sequence @match(%op: !transform.any_op {transform.readonly}) -> !transform.any_op {
    transform.match.operation_name %op ["linalg.matmul"] : !transform.any_op
    transform.yield %op : !transform.any_op
  }
  transform.named_sequence @__transform_main(%root: !transform.any_op {transform.consumed}) {
    %r = transform.foreach_match in %root @match -> @split : (!transform.any_op) -> !transform.any_op
    transform.yield
  }
}
"""


@pytest.mark.slow
def test_the_combined_module_of_two_dispatches_runs_both(cpu, tmp_path):
    """The module that times a split op is built from two dumped dispatch benchmarks; it must run
    (each keeps its own buffer initializer) and call both. On the CPU, where this can run here."""
    from tuner.build.dispatch_benchmark import combine
    from tuner.evaluation.runtime_tools import DispatchBenchmark, ModuleRun, benchmark
    from tuner.tools import find_tool, run_tool

    path = _large_k(tmp_path / "mm.mlir", 16, 32, 2048)
    (tmp_path / "split.mlir").write_text(SPLIT_ONLY_SPEC)
    run = run_tool([find_tool("iree-compile"), str(path), *cpu.compile_flags,
                    f"--iree-preprocessing-transform-spec-filename={tmp_path / 'split.mlir'}",
                    f"--iree-hal-dump-executable-benchmarks-to={tmp_path / 'bench'}", "-o", str(tmp_path / "m.vmfb")], 300)
    assert run.ok, run.stderr
    sources = sorted((tmp_path / "bench").glob("*.mlir"))
    assert len(sources) == 2  # the split op's dispatch and the one adding its parts
    combined = combine(sources, tmp_path / "combined.mlir").read_text()
    assert combined.count("util.initializer") == 2 and combined.count("util.call @") == 2
    built = run_tool([find_tool("iree-compile"), str(tmp_path / "combined.mlir"), *cpu.compile_flags,
                      "-o", str(tmp_path / "combined.vmfb")], 300)
    assert built.ok, built.stderr
    settings = ModuleRun(device=cpu.device, entry="unused", inputs=(), repetitions=2, min_time_s=0.01)
    timing, run = benchmark(tmp_path / "m.vmfb", settings, DispatchBenchmark(tmp_path / "combined.vmfb", COMBINED_FUNCTION, 2))
    assert timing is not None, run.stderr
    assert timing.median_ms > 0


def test_split_configs_are_outside_the_compilers_space(cuda, large_k, ctx):
    """IREE's emitted constraints describe the op unsplit: `--constraints both` keeps no split
    config, and a failing split candidate is explained by that, not by an assertion."""
    from pipelines.base import NotInCompilerKnobs
    from tuner.problem.sources import with_constraints

    path, d = large_k
    configs = list(enumerate_space(PIPE.build_problem(d)))
    split = next(c for c in configs if c["split_k"] > 1)
    with pytest.raises(NotInCompilerKnobs, match="split-K"):
        PIPE.compiler_knobs(d, split)
    both = with_constraints("both", PIPE, d, path, cuda, ctx)
    assert both.constraints == "both"
    admitted = [c for c in configs if both.admits(d, c)]
    assert admitted and all(c["split_k"] == 1 for c in admitted)


def test_a_merged_spec_carries_split_and_plain_configs_and_only_as_a_preprocessing_spec(large_k, ctx):
    """tune-model merges every dispatch's config into one spec: a split-K one beside a plain one."""
    from tuner.specs.transform import KERNEL_CONFIG, TRANSFORM_MAIN, build_spec

    _, d = large_k
    configs = list(enumerate_space(PIPE.build_problem(d)))
    split = PIPE.to_config(d, next(c for c in configs if c["split_k"] == 8), ctx)
    other = replace(d, name="other_dispatch", loop_bounds=(64, 128, 2048))
    plain = PIPE.to_config(other, next(c for c in enumerate_space(PIPE.build_problem(other)) if c["split_k"] == 1), ctx)
    text = str(build_spec([(d, split), (other, plain)], ctx, TRANSFORM_MAIN))
    assert "@apply_split_op_config_8" in text and "@apply_op_config" in text
    assert text.count("transform.structured.split_reduction") == 1
    with pytest.raises(ValueError, match="preprocessing spec"):
        build_spec([(d, split)], ctx, KERNEL_CONFIG)


def test_a_split_ops_partial_result_tile_counts_in_shared_memory(tmp_path):
    """Hand-counted on gfx942 (64 KiB of shared memory) for BERT-base's FFN down-projection,
    1024x768x3072 f16 -> f32: 128x128 tiles with a K step of 64 take (128 + 128) x 64 x 2 bytes =
    32 KiB of operands; split 4 ways, IREE 3.13 also keeps the split op's 128x128 f32 partial
    result in shared memory (64 KiB more; it failed to compile: "uses 98304 bytes of shared
    memory; exceeded the limit of 65536 bytes"). Unsplit, the same tiles fit."""
    from pipelines.llvmgpu_common import compatible_intrinsics

    path = _large_k(tmp_path / "ffn_down.mlir", 1024, 768, 3072)  # not the system's temp folder: it was left there
    [d] = discover(path, parse_target("rocm:gfx942"), ir.Context())
    problem = PIPE.build_problem(d)
    f16 = [i.name for i in compatible_intrinsics(d)].index("MFMA_F32_16x16x16_F16")
    tiles = {"mma_kind": f16, "subgroups_m": 2, "subgroups_n": 2, "subgroup_m": 4, "subgroup_n": 4,
             "reduction_k": 4, "prefetch_num_stages": 0, "reorder_workgroups": 0}
    assert problem.admits({**tiles, "split_k": 1})
    assert not problem.admits({**tiles, "split_k": 4})
    # With a K step of 16 the operands take 8 KiB and the partial result 64 KiB: still too much;
    # 64x128 tiles (32 KiB of partial result) fit.
    assert not problem.admits({**tiles, "reduction_k": 1, "split_k": 4})
    assert problem.admits({**tiles, "subgroups_m": 1, "split_k": 4})


def test_a_contraction_over_an_output_image_is_offered_no_split(ctx):
    """ResNet-50's 8x7x7x512x2048 1x1 convolution written into a padded buffer: K 2048 is long
    against M 392 and N 512, but split, IREE collapses the parts' M loops (2x392x512x1024), so a
    config on the image's loops would not be taken; the unsplit image contraction has configs."""
    from pipelines import pipeline_for
    from pipelines.llvmgpu_gemm_view import image_rows

    fixture = Path(__file__).parent / "fixtures" / "kinds" / "pointwise_into_padded_8x7x7x512x2048_f16.mlir"
    [d] = discover(fixture, parse_target("cuda"), ctx)
    assert d.loop_bounds == (8, 7, 7, 512, 2048) and image_rows(d) == (0, 1, 2)
    assert split_factors(d) == (1,)
    assert "split_k" not in {k.name for k in pipeline_for(d).build_problem(d).knobs}
