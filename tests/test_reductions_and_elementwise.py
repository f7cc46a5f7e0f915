"""Reductions (softmax, LayerNorm-style normalizations, row sums), transposes and elementwise
dispatches on llvm-cpu, cuda and rocm: read with the other ops the compiler configures, their
constraints checked on hand-counted configs, a sample of candidates of each kind compiled for
real on each target (each carrying the root's config and every other op's), a wrong result
caught by the numerics check, and tune-model's --kinds."""

from dataclasses import replace
from pathlib import Path

import pytest

from pipelines import DispatchKind, check_config, pipeline_for
from pipelines.base import ConfiguredDispatch
from pipelines.parts import FusedOps
from tuner.build.builder import LocalBuilder, build_all
from tuner.build.compile import EvalSettings
from tuner.build.compile_stage import builder_for, compile_to_manifest
from tuner.discovery.program import discover, discover_program
from tuner.benchmark_dir import benchmark_dir
from tuner.core.results import Status
from tuner.specs.candidates import generate_candidates
from tuner.store import ResultStore
from tuner.targets import parse_target
from tuner.versions import compiler_version, runtime_version
from tests.conftest import SAMPLES, corrupt_output

KINDS = Path(__file__).parent / "fixtures" / "kinds"
TORCH_KINDS = KINDS / "other_kinds.mlir"  # softmax 8x128x128, LayerNorm 256x512 (two dispatches), row sum,
# a 256x512 transpose, a GELU
NCHW_TO_NHWC = KINDS / "nchw_to_nhwc_f16.mlir"  # 2x256x32x32 f16 scaled, written NHWC into a padded buffer
SOFTMAX_F16 = KINDS / "softmax_f16.mlir"  # 4x256x256: f16 scores, an f32 softmax, f16 probabilities
FAST = EvalSettings(repetitions=2, min_time_s=0.01, confirm_rounds=0, quiet_wait_s=0.0)


def _of_kind(path: Path, target: str, kind: str, ctx):
    return next(d for d in discover(path, parse_target(target), ctx) if d.kind.value == kind)


def test_a_gpu_softmax_is_read_with_its_max_reduction_and_its_division(ctx):
    d = _of_kind(SOFTMAX_F16, "cuda", "softmax", ctx)
    assert d.op_name == "linalg.generic" and d.loop_bounds == (4, 256, 256)
    assert (d.m_dims, d.k_dims) == ((0, 1), (2,))
    # The root, the exp-sum, reduces in f32; the dispatch stores f16: results are compared in f16.
    assert d.result_type == "tensor<4x256xf32>" and (d.lhs_type, d.out_type) == ("f16", "f16")
    assert [(f.path, f.result_type) for f in d.fused] == [((("input", 1),), "tensor<4x256xf32>"),
                                                          ((("user", 0),), "tensor<4x256x256xf16>")]
    assert all("lane_basis" in f.default_lowering_config for f in d.fused)
    assert pipeline_for(d).name == "llvmgpu_vector_distribute_reduction"


def test_the_gpu_reduction_rules_on_hand_counted_configs(ctx):
    d = _of_kind(SOFTMAX_F16, "cuda", "softmax", ctx)  # rows of 256, 32 lanes, f16 loads
    problem = pipeline_for(d).build_problem(d)
    # A row pass is subgroups x 32 lanes x loads: 2 x 32 x 4 = 256 divides the row; 4 x 32 x 4 = 512 does not.
    assert problem.admits({"subgroups": 2, "thread_loads": 4})
    assert not problem.admits({"subgroups": 4, "thread_loads": 4})
    # A thread loads at most 128 bits at once: 8 f16 elements, not 16.
    assert problem.admits({"subgroups": 1, "thread_loads": 8})
    assert not problem.admits({"subgroups": 1, "thread_loads": 16})
    # At most max_threads_per_workgroup threads: with 128, 4 subgroups of 32 fit and 8 do not.
    small = replace(d, target=replace(d.target, max_threads_per_workgroup=128))
    narrow = pipeline_for(small).build_problem(small)
    assert narrow.admits({"subgroups": 4, "thread_loads": 2})
    assert not narrow.admits({"subgroups": 8, "thread_loads": 1})


def test_the_cpu_reduction_rules_on_hand_counted_configs(ctx):
    d = _of_kind(TORCH_KINDS, "llvm-cpu", "softmax", ctx)  # 8x128x128 f32
    # Fix the ISA: 64-byte vectors (16 f32 lanes), 32 vector registers (AVX-512).
    d = replace(d, target=replace(d.target, native_vector_bytes=64, cpu_features=("+avx512f",)))
    problem = pipeline_for(d).build_problem(d)
    base = {"distribution_outer": 8, "distribution_inner": 16, "vector_common_parallel_inner": 8, "vector_reduction": 16}
    assert problem.admits(base)
    # The vector step sits inside the workgroup tile: 16 rows per step in a tile of 8 rows does not.
    assert not problem.admits({**base, "distribution_inner": 8, "vector_common_parallel_inner": 16})
    # The step's tile fits 32 registers: 8 rows x 64 elements = 8 x 4 vectors = 32 fits, 16 x 4 = 64 does not.
    assert problem.admits({**base, "vector_common_parallel_inner": 8, "vector_reduction": 64})
    assert not problem.admits({**base, "vector_common_parallel_inner": 16, "vector_reduction": 64})


def test_a_reduction_config_whose_other_ops_lost_theirs_is_caught(ctx):
    """The read-back checks every op the config sets, not only the root."""
    d = _of_kind(SOFTMAX_F16, "cuda", "softmax", ctx)
    tiled = generate_candidates(d, pipeline_for(d), 2, ctx, parse_target("cuda").spec_entry)[1]
    c = tiled.config
    fused = c.part(FusedOps).lowering_configs
    assert len(fused) == 2 and c.codegen_spec
    applied = ConfiguredDispatch(d.op_name, c.expect_lowering_config, c.expect_translation_info,
                                 fused_lowering_configs=fused)
    assert check_config(c, applied) == []
    defaults = replace(applied, fused_lowering_configs=tuple(f.default_lowering_config for f in d.fused))
    assert any("other ops carry" in p for p in check_config(c, defaults))


def test_a_gpu_reduction_spec_goes_in_at_the_codegen_stage(ctx):
    """On cuda the spec file holds the preprocessing entry and a @__kernel_config entry with the
    reduction's matcher, and is passed a second time as a transform library (the codegen tuning
    spec flag is not read on cuda in 3.13)."""
    cuda = parse_target("cuda")
    d = _of_kind(SOFTMAX_F16, "cuda", "softmax", ctx)
    tiled = generate_candidates(d, pipeline_for(d), 2, ctx, cuda.spec_entry)[1]
    assert "@__transform_main" in tiled.spec and "@__kernel_config" in tiled.spec
    assert "transform.match.structured.input" in tiled.spec and "apply_fused_op_config_2" in tiled.spec
    flags = cuda.spec_flags("/s.mlir", codegen=True)
    assert flags == ("--iree-preprocessing-transform-spec-filename=/s.mlir",
                     "--iree-codegen-transform-dialect-library=/s.mlir@__kernel_config")
    assert all(cuda.is_spec_flag(f) for f in flags) and not cuda.is_spec_flag("--iree-cuda-target=sm_80")
    assert parse_target("rocm").spec_flags("/s.mlir", codegen=True)[1] == "--iree-codegen-tuning-spec-path=/s.mlir"


KIND_NAMES = ("softmax", "normalization", "reduction", "transpose", "elementwise")


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["llvm-cpu", "cuda", "rocm:gfx942"])
def test_a_sample_of_candidates_of_each_kind_compiles_and_carries_its_config(target_name, ctx, tmp_path):
    """Every dispatch of the kinds file (a softmax, LayerNorm's two reductions, a row sum, a
    transpose, a GELU) gets its first and its second candidate's config in one merged spec each
    (as tune-model merges them); the file compiles with it and every config is read back from
    the compiled executables. One compile per sample instead of one per dispatch and candidate."""
    from tuner.stages.variants import SpecPart, Variant, build_variant

    target = parse_target(target_name)
    dispatches = discover(TORCH_KINDS, target, ctx)
    assert {d.kind.value for d in dispatches} == set(KIND_NAMES)
    picks = []
    for d in dispatches:
        # Three configs asked for: one of them may be the compiler's own (the baseline, dropped).
        candidates = generate_candidates(d, pipeline_for(d), 3, ctx, target.spec_entry)
        assert len(candidates) >= 3 and candidates[0].is_baseline
        for c in candidates[1:3]:
            # Every op the compiler configures gets its config (on the CPU too: the vector tiles).
            fused = c.config.part(FusedOps)
            assert len(fused.lowering_configs if fused else ()) == len(d.fused)
            assert (c.config.expect_lowering_config, c.config.expect_translation_info) != \
                (d.default.lowering_config, d.default.translation_info)
        picks.append(candidates[1:3])
    for i in range(2):
        parts = tuple(SpecPart(d, cs[i].config, cs[i].label) for d, cs in zip(dispatches, picks))
        built = build_variant(TORCH_KINDS, Variant(f"sample-{i}", parts=parts), target, tmp_path / f"v{i}", ctx)
        assert built.ok, built.error


@pytest.mark.slow
def test_a_gpu_softmax_candidate_builds_the_module_that_is_timed_with_its_config(ctx, tmp_path):
    """On GPUs the dispatch is timed alone, from the benchmark module IREE dumps from the
    candidate's compile: that module must carry the config too (build_all checks it)."""
    cuda = parse_target("cuda")
    d = _of_kind(SOFTMAX_F16, "cuda", "softmax", ctx)
    candidates = generate_candidates(d, pipeline_for(d), 3, ctx, cuda.spec_entry)
    built = build_all(LocalBuilder.of(SOFTMAX_F16, cuda, tmp_path, ctx), candidates)
    assert {b.result.label: b.result.error for b in built if not b.result.ok} == {}
    assert all(b.dispatch_vmfb is not None and b.dispatch_vmfb.is_file() for b in built)


@pytest.mark.slow
def test_a_wrong_softmax_result_is_caught_and_a_right_one_passes_at_its_stored_precision(ctx, cpu, tmp_path,
                                                                                         monkeypatch):
    program = discover_program(SOFTMAX_F16, cpu, ctx)
    [d] = program.dispatches
    assert d.kind == DispatchKind.SOFTMAX and d.out_type == "f16"
    candidates = generate_candidates(d, pipeline_for(d), 2, ctx)
    wrong = replace(candidates[2], id=9, config=replace(candidates[2].config, summary="corrupted"))
    corrupt_output(monkeypatch, 9)
    store = ResultStore(tmp_path / "results.sqlite", compiler_version(), runtime_version())
    workload = program.workload(d, SOFTMAX_F16)
    compile_to_manifest([candidates[0], candidates[1], wrong], builder_for(SOFTMAX_F16, cpu, tmp_path, ctx, FAST, workload),
                        workload, tmp_path, store)
    by_id = {r.candidate_id: r for r in benchmark_dir(tmp_path, (), FAST).results}
    assert by_id[0].ok and by_id[1].ok
    assert by_id[9].status == Status.WRONG_NUMERICS and by_id[9].relative_error > 0.1


def test_tune_model_kinds_choose_which_dispatches_it_tunes(ctx, cpu):
    """`--kinds normalization` on a LayerNorm (two dispatches: the mean's reduction and the
    normalization) tunes the normalization and says why not the reduction; a kind that does not
    exist is one clear error naming the kinds."""
    from tuner.errors import InputError
    from tuner.stages import ModelOptions
    from tuner.stages.selection import select_dispatches

    program = discover_program(TORCH_KINDS, cpu, ctx)
    norm = next(d for d in program.dispatches if d.kind == DispatchKind.NORMALIZATION)
    workload = program.entries[norm.name]
    chosen, others = select_dispatches(program, None, workload, 0.0, None, ("normalization",))
    assert [d.name for d, _ in chosen] == [norm.name]
    said = {o.name: o.status for o in others}
    mean = next(d.name for d in program.dispatches if d.kind == DispatchKind.REDUCTION and program.entries[d.name] == workload)
    assert said[mean] == "not tuned: a reduction, not among the kinds asked for (normalization)"
    everything, _ = select_dispatches(program, None, workload, 0.0, None)
    assert {d.name for d, _ in everything} == {norm.name, mean}
    with pytest.raises(InputError, match="--kinds softmx: unknown; the kinds are contraction, .*softmax"):
        ModelOptions(kinds=("softmx",)).checked()


def test_a_dispatchs_profile_time_is_its_calls_per_model_call_summed_and_the_calls_are_said(ctx, cpu):
    """A dispatch the model runs 3 times per call (ResNet-50's 56x56 convolution: 0.137 ms profiled
    beside 0.046 ms for one run in its tuning) has its profile time as the 3 runs summed and
    `calls` 3, so the table's two columns are read apart."""
    from tuner.profiling.timing import DispatchTime, Profile
    from tuner.stages.selection import select_dispatches

    program = discover_program(TORCH_KINDS, cpu, ctx)
    norm = next(d for d in program.dispatches if d.kind == DispatchKind.NORMALIZATION)
    workload = program.entries[norm.name]
    entry = workload.entry
    times = {d.name: DispatchTime(d.name, 0.046, 3 if d is norm else 1, entry) for d in program.dispatches
             if program.entries.get(d.name) == workload}
    chosen, _ = select_dispatches(program, Profile(times, {entry: 1.0}, {}), workload, 0.0, None, ("normalization",))
    [(lead, outcome)] = chosen
    assert lead is norm and outcome.calls == 3 and outcome.profile_ms == pytest.approx(0.138)
    assert outcome.to_json()["calls"] == 3


def test_the_gpu_transpose_rules_on_hand_counted_configs(ctx):
    d = _of_kind(TORCH_KINDS, "cuda", "transpose", ctx)  # 256x512 f32, its input staged in shared memory
    assert pipeline_for(d).name == "llvmgpu_tile_and_fuse_elementwise"
    problem = pipeline_for(d).build_problem(d)
    ok = {"workgroup_outer": 32, "workgroup_inner": 32, "thread_inner": 4}  # 32 x 8 = 256 threads
    assert problem.admits(ok)
    # Whole subgroups: 1 x (64 / 4) = 16 threads is half a subgroup of 32; 2 x 16 = 32 is one.
    assert not problem.admits({**ok, "workgroup_outer": 1, "workgroup_inner": 64})
    assert problem.admits({**ok, "workgroup_outer": 2, "workgroup_inner": 64})
    # At most 1024 threads: 64 x (256 / 4) = 4096 is over (its 64 KiB tile would fit the H100's shared memory).
    assert not problem.admits({**ok, "workgroup_outer": 64, "workgroup_inner": 256})
    # A load is at most 128 bits: 4 f32 elements per thread, not 8.
    assert not problem.admits({**ok, "thread_inner": 8})
    # The staged tile fits shared memory: with 8 KiB, 8 x 256 x 4 bytes = 8 KiB fits, 16 x 256 x 4 does not.
    small = replace(d, target=replace(d.target, max_workgroup_memory_bytes=8192))
    tight = pipeline_for(small).build_problem(small)
    assert tight.admits({**ok, "workgroup_outer": 8, "workgroup_inner": 256})
    assert not tight.admits({**ok, "workgroup_outer": 16, "workgroup_inner": 256})


def test_a_transpose_written_along_another_loop_is_tiled_along_it_on_hand_counted_configs(ctx):
    d = _of_kind(NCHW_TO_NHWC, "cuda", "transpose", ctx)  # loops (n, c, h, w); written (n, h, w, c)
    assert d.loop_bounds == (2, 256, 32, 32)
    problem = pipeline_for(d).build_problem(d)
    assert {k.name for k in problem.knobs} >= {"workgroup_write", "thread_write", "promote_input"}
    # One column of w per thread, 8 channels each (a 16-byte store): 32 w x (64 / 8) c = 256 threads.
    ok = {"workgroup_outer": 1, "workgroup_inner": 32, "thread_inner": 1, "workgroup_write": 64, "thread_write": 8,
          "promote_input": False}
    assert problem.admits(ok)
    assert problem.admits({**ok, "promote_input": True})  # 32 x 64 x 2 bytes staged: 4 KiB
    # 32 x 8 h x (128 / 8) = 4096 threads is over 1024; 32 x 2 x 8 = 512 is fine.
    assert not problem.admits({**ok, "workgroup_outer": 8, "workgroup_write": 128})
    assert problem.admits({**ok, "workgroup_outer": 2})
    # A store is at most 128 bits: 8 f16 channels, not 16.
    assert not problem.admits({**ok, "thread_write": 16, "workgroup_write": 128})
    # The write tile divides into threads: 4 channels cannot be split 8 to a thread.
    assert not problem.admits({**ok, "workgroup_write": 4})
    # Whole subgroups: (32 / 8) x (16 / 8) = 8 threads is a quarter of one.
    assert not problem.admits({**ok, "thread_inner": 8, "workgroup_write": 16})
    # Staged in 8 KiB of shared memory: 32 x 1 x 128 x 2 bytes fit; 32 x 2 x 128 x 2 do not (1024 threads
    # either way, so only the memory rejects it), nor does it unstaged.
    small = replace(d, target=replace(d.target, max_workgroup_memory_bytes=8192))
    tight = pipeline_for(small).build_problem(small)
    big = {**ok, "workgroup_write": 128, "promote_input": True}
    assert tight.admits(big)
    assert not tight.admits({**big, "workgroup_outer": 2})
    assert tight.admits({**big, "workgroup_outer": 2, "promote_input": False})


def test_the_cpu_transpose_rules_on_hand_counted_configs(ctx):
    d = _of_kind(TORCH_KINDS, "llvm-cpu", "transpose", ctx)  # 256x512 f32
    d = replace(d, target=replace(d.target, native_vector_bytes=64, cpu_features=("+avx512f",)))
    assert pipeline_for(d).name == "llvmcpu_elementwise"
    problem = pipeline_for(d).build_problem(d)
    ok = {"distribution_outer": 64, "distribution_inner": 64, "vector_common_parallel_outer": 16,
          "vector_common_parallel_inner": 16}
    # The tile read and written: 2 x 16 rows x 1 vector of 16 = 32 registers fit; 16 rows x 2 vectors do not.
    assert problem.admits(ok)
    assert not problem.admits({**ok, "vector_common_parallel_inner": 32})
    # The vector tile inside the workgroup tile: 16 columns per step in a tile of 8 do not fit.
    assert not problem.admits({**ok, "distribution_inner": 8})


def test_a_matrix_vector_product_is_tuned_as_a_reduction_over_k(ctx, tmp_path):
    """A decoder's projection for one token (1x4096x4096 f16): IREE 3.13 configures it on
    VectorDistribute as a reduction (a lane basis and a partial_reduction over K, no MMA), and
    the contraction pipeline that claimed it had an empty space (M = 1 is no multiple of an MMA
    tile). The reduction pipeline takes it: subgroups per output and loads per thread over K."""
    from tests.conftest import write_matmul

    [d] = discover(write_matmul(tmp_path / "mv.mlir", 1, 4096, 4096, "f16"), parse_target("cuda"), ctx)
    assert d.kind == DispatchKind.CONTRACTION and "partial_reduction = [0, 0, 256]" in d.default.lowering_config
    p = pipeline_for(d)
    assert p.name == "llvmgpu_vector_distribute_reduction"
    assert pipeline_for(d, "llvmgpu_vector_distribute") is p  # named by the alias, still this one
    problem = p.build_problem(d)
    # K = 4096 in passes of S subgroups x 32 lanes x V loads: 16 x 32 x 8 = 4096 divides it,
    # 32 x 32 x 8 = 8192 does not (though 32 x 32 = 1024 threads is within the limit).
    assert problem.admits({"subgroups": 16, "thread_loads": 8})
    assert not problem.admits({"subgroups": 32, "thread_loads": 8})
    config = p.to_config(d, {"subgroups": 4, "thread_loads": 8}, ctx)
    assert "partial_reduction = [0, 0, 1024]" in config.expect_lowering_config  # 4 x 32 x 8
    assert "subgroup_basis = [[1, 1, 4], [0, 1, 2]]" in config.expect_lowering_config
    assert "workgroup_size = [128, 1, 1]" in config.expect_translation_info
    # A contraction the compiler gives MMA tiles stays the contraction pipelines' (4096^3 on rocm).
    [mma] = discover(SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir", parse_target("rocm"), ctx)
    assert pipeline_for(mma, "llvmgpu_vector_distribute").name == "llvmgpu_vector_distribute"


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["cuda", "rocm:gfx942"])
def test_matrix_vector_candidates_compile_and_carry_their_configs(target_name, ctx, tmp_path):
    from tests.conftest import write_matmul
    from tuner.stages.variants import SpecPart, Variant, build_variant

    target = parse_target(target_name)
    path = write_matmul(tmp_path / "mv.mlir", 1, 4096, 4096, "f16")
    [d] = discover(path, target, ctx)
    candidates = generate_candidates(d, pipeline_for(d), 3, ctx, target.spec_entry)
    assert len(candidates) >= 3 and candidates[0].is_baseline
    for i, c in enumerate(candidates[1:3]):
        built = build_variant(path, Variant(f"mv-{i}", parts=(SpecPart(d, c.config, c.label),)), target,
                              tmp_path / f"v{i}", ctx)
        assert built.ok, built.error


def test_a_matrix_vector_product_is_never_timed_alone(tmp_path):
    """IREE 3.13's dumped dispatch benchmark of a matvec does not compile (iree-compile grew to
    24 GB and was killed): a run that would time it alone (rocm, `--gpu-timing alone`) stops with
    one line before compiling anything, and one that may time it in the model builds no dump."""
    from tests.conftest import assert_one_error_line, run_cli, write_matmul

    path = write_matmul(tmp_path / "mv.mlir", 1, 4096, 4096, "f16")
    for target, extra in (("rocm:gfx942", ()), ("cuda:sm_80", ("--gpu-timing", "alone"))):
        out = tmp_path / f"out-{target.replace(':', '-')}"
        result = run_cli("tune", path, "--target", target, "--compile-only", "--budget", "2", "--output", out, *extra)
        assert_one_error_line(result, 2, "a matrix-vector product is timed inside the model only")
        assert not (out / "candidates").exists()


@pytest.mark.slow
def test_a_matrix_vector_product_compiles_for_timing_in_the_model_without_a_dump(tmp_path):
    """On cuda with the default timing the compile-only run builds each candidate for timing
    inside the model (its kernels named) and dumps no dispatch benchmark for the matvec."""
    import json

    from tests.conftest import run_cli, write_matmul

    path = write_matmul(tmp_path / "mv.mlir", 1, 4096, 4096, "f16")
    out = tmp_path / "out"
    result = run_cli("tune", path, "--target", "cuda:sm_80", "--compile-only", "--budget", "2", "--output", out)
    assert result.exit_code == 0, result.output
    built = json.loads((out / "manifest.json").read_text())["candidates"]
    ok = [b for b in built if b["result"]["status"] == "ok"]
    assert len(ok) >= 2 and all(b["kernels"] and b["dispatch_vmfb"] is None for b in ok), built
    assert not list(out.rglob("dispatch.vmfb")) and not list(out.rglob("bench"))


MATVEC_WEIGHT_N_BY_K = """
func.func @main(%a: tensor<1x4096xf16>, %w: tensor<4096x4096xf16>) -> tensor<1x4096xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x4096xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                                      affine_map<(m, n, k) -> (m, n)>]
       ins(%a, %w : tensor<1x4096xf16>, tensor<4096x4096xf16>) outs(%f : tensor<1x4096xf32>) -> tensor<1x4096xf32>
  return %r : tensor<1x4096xf32>
}
"""


def test_a_matrix_vector_product_with_its_weight_stored_n_by_k_is_taken_too(ctx, tmp_path):
    """A linear layer's weight as a model stores it (`x @ W^T`, K contiguous), one token: the
    layout decode runs. IREE 3.13 configures it as a reduction too, and the reduction pipeline
    takes it, its space not empty."""
    from pipelines.llvmgpu_vector_distribute_reduction import matrix_vector

    path = tmp_path / "mvt.mlir"
    path.write_text(MATVEC_WEIGHT_N_BY_K)
    [d] = discover(path, parse_target("cuda"), ctx)
    assert matrix_vector(d) and pipeline_for(d).name == "llvmgpu_vector_distribute_reduction"
    assert pipeline_for(d).untimed_alone(d).startswith("a matrix-vector product is timed inside the model only")
    candidates = generate_candidates(d, pipeline_for(d), 4, ctx, parse_target("cuda").spec_entry)
    assert candidates[0].is_baseline and len(candidates) >= 4  # the default config itself is not offered again
