"""The transform-dialect mma.sync kernel (pipelines/llvmgpu_mma_sync.py): its rules on
hand-counted configs, which dispatches it takes, the spec that carries its strategy, and (slow)
its candidates compiled for sm_80 with the kernel read back from the PTX."""

import re
from dataclasses import replace

import pytest
from iree.compiler import ir

from pipelines import pipeline_for
from constraints import enumerate_solutions
from pipelines.llvmgpu_mma_sync import LLVMGPUMmaSync
from pipelines.llvmgpu_mma_sync_strategy import MmaSyncTiles, compilation_info, strategy
from pipelines.llvmgpu_tile_and_fuse import LLVMGPUTileAndFuse
from pipelines.parts import TransformSequences, StoredThrough
from tuner.discovery.program import discover
from tuner.specs.candidates import candidate_for
from tuner.specs.transform import build_spec
from tuner.targets import parse_target
from tests.conftest import SAMPLES, iree_compile, run_cli

PIPE = LLVMGPUMmaSync()
KNOBS = ("block_m", "block_n", "block_k", "warps_m", "warps_n", "stages")


@pytest.fixture(scope="module")
def square():
    [d] = discover(SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir", parse_target("cuda:sm_80"), ir.Context())
    return d


def admits(problem, *values) -> bool:
    return problem.admits(dict(zip(KNOBS, values)))


def test_hand_counted_configs_are_admitted_or_refused_for_their_reason(square):
    p = PIPE.build_problem(square)
    # 8 warps of 64x64; shared 2*(128*40 + 32*264)*3 = 81,408 bytes of 166,912.
    assert admits(p, 128, 256, 32, 2, 4, 3)
    # 16 warps of 64x64: (128 accumulators + 64) * 512 threads = 98,304 registers, over 65,536.
    assert not admits(p, 256, 256, 32, 4, 4, 3)
    # 16 warps of 32x64 on 128x256: (64 + 64) * 512 = 65,536 registers, just within.
    assert admits(p, 128, 256, 32, 4, 4, 3)
    # Shared memory: 2*(128*72 + 64*264)*5 = 261,120 bytes.
    assert not admits(p, 128, 256, 64, 2, 4, 5)
    # Accumulators: 256*256 / (4 warps * 32 lanes) = 512 per thread, over 128.
    assert not admits(p, 256, 256, 32, 2, 2, 3)
    # Copies: the 64x32 A tile is 2,048 halves; 16 warps copy 4,096 at a time.
    assert not admits(p, 64, 64, 32, 4, 4, 3)
    # Whole MMAs: a 64-row tile over 8 warps leaves 8 rows a warp, under 16.
    assert not admits(p, 64, 256, 32, 8, 1, 3)


def test_a_tile_that_does_not_divide_the_shape_is_refused(square):
    odd = replace(square, loop_bounds=(4096, 2816, 4096))  # 2816 = 11 * 256
    p = PIPE.build_problem(odd)
    assert admits(p, 128, 256, 32, 2, 4, 3)
    narrow = replace(square, loop_bounds=(4096, 2688, 4096))  # 2688 = 21 * 128, not a multiple of 256
    p = PIPE.build_problem(narrow)
    assert not admits(p, 128, 256, 32, 2, 4, 3) and admits(p, 128, 128, 32, 2, 2, 3)


def test_it_takes_plain_f16_matmuls_by_name_only_and_declines_a_stored_transposed_b(square):
    assert PIPE.supports(square)
    assert pipeline_for(square).name == "llvmgpu_tile_and_fuse"  # the compiler's choice stays the default
    assert pipeline_for(square, "llvmgpu_mma_sync").name == "llvmgpu_mma_sync"
    m, n, k = square.m_dims[0], square.n_dims[0], square.k_dims[0]
    transposed = replace(square, operand_dims=((m, k), (n, k), (m, n)))
    assert not PIPE.supports(transposed) and "wrong result" in PIPE.declines(transposed)
    assert not PIPE.supports(replace(square, lhs_type="f32", rhs_type="f32"))
    assert not PIPE.supports(replace(square, target=replace(square.target, backend="rocm")))


def test_a_config_names_its_kernel_and_the_spec_carries_each_kernel_once(square, ctx):
    solution = dict(zip(KNOBS, (128, 256, 32, 2, 4, 3)))
    config = PIPE.to_config(square, solution, ctx)
    name = MmaSyncTiles(128, 256, 32, 2, 4, 3).name
    assert f"codegen_spec = @{name}" in config.expect_translation_info
    assert config.expect_lowering_config == "#iree_codegen.lowering_config<tile_sizes = [[128, 256, 32]]>"
    assert config.codegen_spec
    assert config.part(TransformSequences).sequences == strategy(MmaSyncTiles(128, 256, 32, 2, 4, 3))
    other = PIPE.to_config(square, {**solution, "stages": 4}, ctx)
    # Three dispatches of a model: two take the same kernel, one another.
    second = replace(square, name=square.name + "_b", loop_bounds=(2048, 4096, 4096))
    third = replace(square, name=square.name + "_c", loop_bounds=(1024, 4096, 4096))
    text = str(build_spec([(square, config), (second, config), (third, other)], ctx))
    assert len(re.findall(rf"transform.named_sequence @{name}\(", text)) == 1
    assert len(re.findall(r"transform.named_sequence @mma_sync_128x256x32_w2x4_s4\(", text)) == 1
    assert "__kernel_config" in text and "compilation_info" in text


def test_a_spec_of_another_pipelines_config_holds_no_strategy(square, ctx):
    tile_and_fuse = LLVMGPUTileAndFuse()
    solution = next(iter(enumerate_solutions(tile_and_fuse.build_problem(square), 1)))
    text = str(build_spec([(square, tile_and_fuse.to_config(square, solution, ctx))], ctx))
    assert "compilation_info" in text and "transform_dialect_codegen" not in text and "mma_sync" not in text


@pytest.mark.slow
def test_candidates_compile_for_sm80_and_their_kernels_use_ldmatrix_and_cp_async(tmp_path):
    out = tmp_path / "run"
    result = run_cli("tune", str(SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir"), "--target", "cuda:sm_80",
                     "--pipeline", "llvmgpu_mma_sync", "--budget", "2", "--compile-only", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "compiled 3 of 3 candidates" in result.output
    for cid in ("0001", "0002"):
        ptx = "\n".join(p.read_text() for p in (out / "candidates" / cid / "binaries").glob("*.ptx"))
        # The strategy ran: its kernel, not TileAndFuse's (which has neither).
        assert "ldmatrix" in ptx and "cp.async" in ptx and "mma.sync" in ptx
        # The accumulators start as zeros in registers: nothing is read from global memory but
        # the A and B tiles, by cp.async (the fill spread over threads wrote C and read it back).
        assert "ld.global" not in ptx
    baseline = "\n".join(p.read_text() for p in (out / "candidates" / "0000" / "binaries").glob("*.ptx"))
    assert "ldmatrix" not in baseline


VIT_MLP_UP = """
func.func @main(%x: tensor<1576x768xf16>, %w: tensor<768x3072xf16>) -> tensor<1576x3072xf16> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1576x3072xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<1576x3072xf32>) -> tensor<1576x3072xf32>
  %y = linalg.matmul ins(%x, %w : tensor<1576x768xf16>, tensor<768x3072xf16>) outs(%acc : tensor<1576x3072xf32>) -> tensor<1576x3072xf32>
  %e16 = tensor.empty() : tensor<1576x3072xf16>
  %n = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                       iterator_types = ["parallel", "parallel"]} ins(%y : tensor<1576x3072xf32>) outs(%e16 : tensor<1576x3072xf16>) {
  ^bb0(%v: f32, %o: f16):
    %t = arith.truncf %v : f32 to f16
    linalg.yield %t : f16
  } -> tensor<1576x3072xf16>
  return %n : tensor<1576x3072xf16>
}
"""


@pytest.mark.slow
def test_candidates_for_rows_no_tile_divides_compile_to_the_padded_kernel(tmp_path):
    """ViT-B's MLP at batch 8 (1576 rows), narrowed to f16 in its dispatch: each candidate's
    kernel is the padded one, with ldmatrix, mma.sync, and A's tiles copied by cp.async with a
    source size (zero fill for the rows past M) and the loop pipelined (the wait lets groups stay
    in flight). Its results were checked on the H200 (docs/benchmarks/mma-sync-kernel.md)."""
    program = tmp_path / "vit.mlir"
    program.write_text(VIT_MLP_UP)
    out = tmp_path / "run"
    result = run_cli("tune", str(program), "--target", "cuda:sm_80", "--pipeline", "llvmgpu_mma_sync",
                     "--budget", "2", "--compile-only", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "compiled 3 of 3 candidates" in result.output
    for cid in ("0001", "0002"):
        config = "\n".join(p.read_text() for p in (out / "candidates" / cid / "configs").glob("*.mlir"))
        assert re.search(r"codegen_spec = @mma_sync_\w+_epilogue_padded>", config), config[:3000]
        ptx = "\n".join(p.read_text() for p in (out / "candidates" / cid / "binaries").glob("*.ptx"))
        assert "ldmatrix" in ptx and "mma.sync" in ptx
        assert re.search(r"cp\.async\.cg\.shared\.global \[[^]]+\], \[[^]]+\], 16, %r\d+;", ptx)  # zero fill
        assert re.search(r"cp\.async\.wait_group\s+[1-9]", ptx)  # pipelined: groups left in flight


TWO_MATMULS = """
func.func @main(%a: tensor<256x512xf16>, %b: tensor<512x256xf16>, %c: tensor<256x512xf16>, %d: tensor<512x256xf16>)
    -> (tensor<256x256xf32>, tensor<256x256xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
  %plain = linalg.matmul ins(%a, %b : tensor<256x512xf16>, tensor<512x256xf16>) outs(%acc : tensor<256x256xf32>) -> tensor<256x256xf32>
  %other = linalg.matmul ins(%c, %d : tensor<256x512xf16>, tensor<512x256xf16>) outs(%acc : tensor<256x256xf32>) -> tensor<256x256xf32>
  %relu = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>, affine_map<(i, j) -> (i, j)>],
                          iterator_types = ["parallel", "parallel"]} ins(%other : tensor<256x256xf32>) outs(%e : tensor<256x256xf32>) {
  ^bb0(%x: f32, %o: f32):
    %r = arith.maximumf %x, %zero : f32
    linalg.yield %r : f32
  } -> tensor<256x256xf32>
  return %plain, %relu : tensor<256x256xf32>, tensor<256x256xf32>
}
"""


def _kernel_dispatches(run) -> list[str]:
    """The dispatches of candidate 1's build whose translation_info names a codegen strategy."""
    configs = sorted((run / "candidates" / "0001" / "configs").glob("*.mlir"))
    return [p.name for p in configs if "transform_dialect_codegen" in p.read_text()]


@pytest.mark.slow
def test_each_kernel_goes_only_on_a_dispatch_with_what_it_was_written_for_after_its_matmul(tmp_path):
    program = tmp_path / "two.mlir"
    program.write_text(TWO_MATMULS)
    dispatches = discover(program, parse_target("cuda:sm_80"), ir.Context())
    [plain] = [d for d in dispatches if not d.other_ops]
    [relu] = [d for d in dispatches if d.other_ops]
    assert relu.other_ops == ("linalg.generic",)
    assert PIPE.supports(plain) and PIPE.supports(relu)
    for tuned, other in ((plain, relu), (relu, plain)):
        out = tmp_path / ("relu" if tuned.other_ops else "plain")
        result = run_cli("tune", str(program), "--target", "cuda:sm_80", "--pipeline", "llvmgpu_mma_sync",
                         "--dispatch", tuned.name, "--budget", "1", "--compile-only", "--output", str(out))
        assert result.exit_code == 0, result.output
        assert "compiled 2 of 2 candidates" in result.output
        # The same-shaped matmul in the other dispatch keeps the compiler's pipeline.
        [configured] = _kernel_dispatches(out)
        number = re.search(r"dispatch_\d+", tuned.name).group(0)
        assert configured.endswith(f"{number}.mlir"), (configured, tuned.name)
        ptx = "\n".join(p.read_text() for p in (out / "candidates" / "0001" / "binaries").glob("*.ptx"))
        assert "ldmatrix" in ptx and "mma.sync" in ptx


def test_the_epilogue_tile_counts_against_shared_memory_and_two_fused_ops_are_declined(square):
    epilogue = replace(square, other_ops=("linalg.generic",))
    p = PIPE.build_problem(epilogue)
    # 81,408 bytes of A and B tiles + the 128x(256+4) f32 result tile, 133,120: 214,528 > 166,912.
    assert not admits(p, 128, 256, 32, 2, 4, 3)
    # 75,776 (4 stages of 128x32 and 32x128) + 128x(128+4) f32, 67,584: 143,360.
    assert admits(p, 128, 128, 32, 2, 2, 4)
    assert PIPE.to_config(epilogue, dict(zip(KNOBS, (128, 128, 32, 2, 2, 4))), ir.Context()).summary.endswith("epilogue")
    two = replace(square, other_ops=("linalg.generic", "linalg.generic"))
    assert not PIPE.supports(two) and "at most one elementwise op" in PIPE.declines(two)


def test_rows_no_tile_divides_are_padded_only_with_an_epilogue_and_n_and_k_never(square):
    # 2308 = 4 x 577 rows (ViT-L's 577 tokens at batch 4): no 32-row tile divides them.
    vit = replace(square, loop_bounds=(2308, 4096, 1024))
    assert not PIPE.supports(vit) and "pads rows only where an elementwise op follows" in PIPE.declines(vit)
    assert pipeline_for(vit, "llvmgpu_mma_sync") is None
    assert PIPE.supports(replace(square, loop_bounds=(2304, 4096, 1024)))  # 36 x 64
    # With the narrowing to f16 after it (every exported linear layer's dispatch): taken, any
    # tile admitted for M, each config's kernel padded where its tile does not divide M.
    narrowed = replace(vit, other_ops=("linalg.generic",))
    assert PIPE.supports(narrowed) and PIPE.declines(narrowed) is None
    p = PIPE.build_problem(narrowed)
    assert admits(p, 128, 128, 32, 2, 2, 3) and admits(p, 64, 128, 32, 2, 2, 3)
    config = PIPE.to_config(narrowed, dict(zip(KNOBS, (128, 128, 32, 2, 2, 3))), ir.Context())
    assert "@mma_sync_128x128x32_w2x2_s3_epilogue_padded>" in config.expect_translation_info
    # Rows a tile divides keep the aligned kernel, under the same problem.
    aligned = PIPE.to_config(replace(narrowed, loop_bounds=(2304, 4096, 1024)), dict(zip(KNOBS, (128, 128, 32, 2, 2, 3))),
                             ir.Context())
    assert "@mma_sync_128x128x32_w2x2_s3_epilogue>" in aligned.expect_translation_info
    # N or K no tile divides: declined for that, epilogue or not.
    odd_n = replace(narrowed, loop_bounds=(2308, 4100, 1024))
    assert not PIPE.supports(odd_n) and "does not pad N or K" in PIPE.declines(odd_n)
    # A batch dim: not padded.
    b, m, n, k = 0, 1, 2, 3
    batched = replace(narrowed, op_name="linalg.batch_matmul", loop_bounds=(2, 577, 4096, 1024), batch_dims=(b,),
                      m_dims=(m,), n_dims=(n,), k_dims=(k,), operand_dims=((b, m, k), (b, k, n), (b, m, n)))
    assert not PIPE.supports(batched)


def test_padded_rows_are_searched_from_64_row_tiles_on_two_by_two_warps_first(square, ctx):
    """The preference measured on five held-out linear layers with bias and GELU (H200): 64-row
    tiles on 2x2 warps ran 1.28-1.58x the default, 128x128 ones 0.92-1.16x; the aligned kernel
    keeps its own order (8 warps on wide tiles, issue 38's shapes)."""
    from tuner.specs.candidates import generate_candidates

    def first_labels(dispatch):
        return [c.label for c in generate_candidates(dispatch, PIPE, 6, ctx)[1:]]

    padded = replace(square, loop_bounds=(1028, 4096, 1024), other_ops=("linalg.generic",))
    labels = first_labels(padded)
    assert labels and all("wg 64x" in label and "warps 2x2" in label and "rows padded" in label for label in labels)
    aligned = first_labels(replace(square, other_ops=("linalg.generic",)))
    assert not any("rows padded" in label for label in aligned) and any("warps 2x4" in l or "warps 4x2" in l for l in aligned[:1])


def test_the_padded_kernel_pads_the_contraction_rows_masks_a_and_pipelines_two_copy_groups():
    """The padded kernel's strategy (pipelines.llvmgpu_mma_sync_padded): the contraction padded
    on its rows alone with A's pad kept (nofold) and fused into the K loop, A's copy spread over
    the threads as [4, 8] pieces and vectorized with masks, the epilogue's loop marked, and the
    simple pipelining schedule (the tensor-core one takes one copy group a stage)."""
    kernel = MmaSyncTiles(128, 128, 32, 2, 2, 3, epilogue=True, padded=True)
    text = strategy(kernel)
    assert "padding_dimensions = [0], nofold_flags = [1, 0, 0]" in text
    assert "fuse_into_containing_op %a_pad into %loop" in text
    assert "num_threads [32, 4]" in text and "vectorize %a_t vector_sizes [4, 8]" in text
    assert 'transform.annotate %e_forall "mma_sync_epilogue"' in text
    assert "<{depth = 3 : i64}>" in text and "use_mma_sync}>" not in text.split("pipeline_shared_memory_copies")[1]
    assert "depth = 3 : i64, use_mma_sync" in strategy(replace(kernel, padded=False))
    # Its rules drop M's divisibility alone.
    assert kernel.fits(1576, 3072, 768, 166912) and not replace(kernel, padded=False).fits(1576, 3072, 768, 166912)
    assert not kernel.fits(1576, 3000, 768, 166912)


def test_tune_model_with_the_pipeline_tunes_same_shaped_matmuls_apart_by_what_follows_them(tmp_path, ctx):
    """Without --pipeline the two matmuls of TWO_MATMULS are one TileAndFuse tuning (one matcher
    serves both); with llvmgpu_mma_sync they are two, each kernel written for what follows its
    matmul, and a dispatch the pipeline does not take keeps the compiler's choice's."""
    from tuner.discovery.program import discover_program
    from tuner.stages.selection import select_dispatches, tuning_pipeline

    program_path = tmp_path / "two.mlir"
    program_path.write_text(TWO_MATMULS)
    program = discover_program(program_path, parse_target("cuda:sm_80"), ctx)
    matmuls = [d for d in program.dispatches if d.kind.value == "contraction"]
    workload = program.entries[matmuls[0].name]
    together, _ = select_dispatches(program, None, workload, 0.0, None)
    assert [tuning_pipeline(d).name for d, _ in together if d in matmuls] == ["llvmgpu_tile_and_fuse"]
    apart, _ = select_dispatches(program, None, workload, 0.0, None, (), "llvmgpu_mma_sync")
    assert sorted(d.name for d, _ in apart if d in matmuls) == sorted(d.name for d in matmuls)
    assert {tuning_pipeline(d, "llvmgpu_mma_sync").name for d in matmuls} == {"llvmgpu_mma_sync"}
    narrow = replace(matmuls[0], loop_bounds=(100, 256, 512))
    assert tuning_pipeline(narrow, "llvmgpu_mma_sync").name == "llvmgpu_tile_and_fuse"


def test_tune_model_refuses_an_unknown_pipeline_in_one_line(tmp_path):
    from tests.conftest import assert_one_error_line

    program = tmp_path / "two.mlir"
    program.write_text(TWO_MATMULS)
    result = run_cli("tune-model", program, "--target", "cuda:sm_80", "--pipeline", "llvmgpu_mma_sink",
                     "--compile-only", "--output", tmp_path / "run")
    assert_one_error_line(result, 2, "--pipeline llvmgpu_mma_sink: unknown; known: llvmcpu_double_tiling")


def test_a_kernel_config_is_matched_only_through_the_ops_after_the_root_it_was_made_for(square, ctx):
    """The kernel's matchers require the ops between the root and the store
    (Pipeline.matches_ops_after, the rule that also groups a model's dispatches): each candidate's
    config says how many (StoredThrough), and its spec walks from the root to the store through
    them. TileAndFuse's configs carry no such part and their matchers stop at the root."""
    cuda = parse_target("cuda:sm_80")
    epilogue = replace(square, other_ops=("linalg.generic",))
    knobs = dict(zip(KNOBS, (128, 128, 32, 2, 2, 4)))
    alone, fused = (candidate_for(1, d, PIPE, knobs, ctx, cuda.spec_entry) for d in (square, epilogue))
    assert alone.config.part(StoredThrough) == StoredThrough(0)
    assert fused.config.part(StoredThrough) == StoredThrough(1)
    store = '"iree_tensor_ext.dispatch.tensor.store"]'
    assert store in alone.spec and store in fused.spec
    step = re.compile(r'transform.match.operation_name %\d+ \["linalg.generic"\]')  # an op after the root
    assert len(step.findall(fused.spec)) == 1 and not step.findall(alone.spec)
    tile_and_fuse = LLVMGPUTileAndFuse()
    solution = next(iter(enumerate_solutions(tile_and_fuse.build_problem(square), 1)))
    other = candidate_for(1, square, tile_and_fuse, solution, ctx, cuda.spec_entry)
    assert other.config.part(StoredThrough) is None and store not in other.spec


@pytest.mark.slow
def test_a_model_spec_with_two_kernels_compiles_and_each_dispatch_takes_its_own(tmp_path, ctx):
    """The merge's spec for TWO_MATMULS tuned with the pipeline: one kernel without an epilogue,
    one with, in one file; plain iree-compile with the flags the model's outputs name puts each
    kernel on its own dispatch (read back from the dumped configurations)."""
    from tuner.specs.transform import uses_codegen_stage

    target = parse_target("cuda:sm_80")
    program = tmp_path / "two.mlir"
    program.write_text(TWO_MATMULS)
    dispatches = discover(program, target, ctx)
    [plain] = [d for d in dispatches if not d.other_ops]
    [relu] = [d for d in dispatches if d.other_ops]
    configs = [(d, candidate_for(1, d, PIPE, dict(zip(KNOBS, knobs)), ctx, target.spec_entry).config)
               for d, knobs in ((plain, (128, 128, 32, 2, 2, 3)), (relu, (64, 128, 32, 2, 2, 2)))]
    spec = tmp_path / "model_spec.mlir"
    spec.write_text(str(build_spec(configs, ctx, target.spec_entry)))
    flags = [*target.compile_flags, *target.spec_flags(str(spec), uses_codegen_stage([c for _, c in configs]))]
    # Retried where it hangs at exit (IREE 3.13 does now and then: this test once stalled CI 300 s).
    iree_compile(program, *flags, "-o", tmp_path / "m.vmfb", f"--iree-hal-dump-executable-configurations-to={tmp_path / 'configs'}")
    texts = {p.name: p.read_text() for p in (tmp_path / "configs").glob("*.mlir")}
    for dispatch, kernel in ((plain, "@mma_sync_128x128x32_w2x2_s3>"), (relu, "@mma_sync_64x128x32_w2x2_s2_epilogue>")):
        number = re.search(r"dispatch_\d+", dispatch.name).group(0)
        [text] = [t for name, t in texts.items() if name.endswith(f"{number}.mlir")]
        assert kernel in text, (dispatch.name, text[:2000])


UNIT_BATCH = """
func.func @main(%x: tensor<1x256x512xf16>, %w: tensor<1x512x256xf16>) -> tensor<1x256x256xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1x256x256xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<1x256x256xf32>) -> tensor<1x256x256xf32>
  %y = linalg.batch_matmul ins(%x, %w : tensor<1x256x512xf16>, tensor<1x512x256xf16>) outs(%acc : tensor<1x256x256xf32>) -> tensor<1x256x256xf32>
  return %y : tensor<1x256x256xf32>
}
"""


@pytest.mark.slow
def test_a_batch_matmul_of_batch_one_is_offered_generalized_and_then_the_kernel_takes_it(tmp_path, ctx, square):
    """A linear layer on rank-3 activations, as exporters write it (batch_matmul 1xMxNxK):
    TileAndFuse offers the model `--iree-opt-generalize-matmul`, judged with the matmuls it forms
    tuned first; under it the unit batch folds away. The kernel takes it either way (one batch
    dim, outermost in A, B and C)."""
    from pipelines.model_flags import GENERALIZE_MATMUL

    program = tmp_path / "linear.mlir"
    program.write_text(UNIT_BATCH)
    target = parse_target("cuda:sm_80")
    [batched] = discover(program, target, ctx)
    assert batched.batch_dims and PIPE.supports(batched)
    tile_and_fuse = pipeline_for(batched)
    assert GENERALIZE_MATMUL in tile_and_fuse.model_flags_for(batched)
    assert tile_and_fuse.tuned_model_flags_for(batched) == (GENERALIZE_MATMUL,)
    batch16 = replace(batched, loop_bounds=(16, *batched.loop_bounds[1:]))
    assert GENERALIZE_MATMUL not in tile_and_fuse.model_flags_for(batch16)
    assert GENERALIZE_MATMUL not in tile_and_fuse.model_flags_for(square)  # no batch at all
    [plain] = discover(program, target, ctx, GENERALIZE_MATMUL)
    assert not plain.batch_dims and plain.loop_bounds == (256, 256, 512)
    assert PIPE.supports(plain)


def test_a_batch_dim_outermost_in_every_operand_is_taken_and_tiled_by_one_entry_a_workgroup(square):
    """The batch matmuls of conv-as-im2col-matmul (the filter broadcast over the images, the
    patches, the NCHW result): b2 x M640 x N4096 x K5760 on the UNet ResNet block."""
    b, m, n, k = 0, 1, 2, 3
    batched = replace(square, op_name="linalg.batch_matmul", loop_bounds=(2, 640, 4096, 5760), batch_dims=(b,),
                      m_dims=(m,), n_dims=(n,), k_dims=(k,), operand_dims=((b, m, k), (b, k, n), (b, m, n)))
    assert PIPE.supports(batched)
    # The batch not outermost in B (a transposed store), or two batch dims: declined.
    assert not PIPE.supports(replace(batched, operand_dims=((b, m, k), (k, b, n), (b, m, n))))
    two = replace(batched, loop_bounds=(2, 2, 640, 4096, 5760), batch_dims=(0, 1), m_dims=(2,), n_dims=(3,),
                  k_dims=(4,), operand_dims=((0, 1, 2, 4), (0, 1, 4, 3), (0, 1, 2, 3)))
    assert not PIPE.supports(two) and "at most one batch dim" in PIPE.declines(two)
    kernel = MmaSyncTiles(128, 128, 32, 2, 4, 4, epilogue=True, batch=True)
    assert kernel.tile_sizes() == [1, 128, 128, 32] and kernel.name.endswith("_epilogue_batch")
    assert "tile_sizes = [[1, 128, 128, 32]]" in compilation_info(kernel)
    text = strategy(kernel)
    # One batch entry's tile a workgroup (block z), the K loop and the warps leave the batch
    # alone, and the unit dim is cast away from the vectors before the MMA conversion.
    assert "tile_sizes [1, 128, 128] (mapping = [#gpu.block<z>, #gpu.block<y>, #gpu.block<x>])" in text
    assert "tile_sizes [0, 0, 0, 32]" in text and "tile_sizes [0, 64, 32] (mapping = [#gpu.warp<y>, #gpu.warp<x>])" in text
    assert "vector.cast_away_vector_leading_one_dim" in text
    # The rules are the 2-D kernel's on M, N and K: 256 rows do not divide M = 640.
    p = PIPE.build_problem(batched)
    assert admits(p, 128, 128, 32, 2, 4, 4) and not admits(p, 256, 128, 32, 4, 2, 4)


def test_tune_model_takes_the_kernel_by_default_on_cuda_only_and_a_named_pipeline_first():
    from tuner.stages.model_client import model_pipeline

    assert model_pipeline(parse_target("cuda:sm_80"), None) == "llvmgpu_mma_sync"
    assert model_pipeline(parse_target("cuda"), None) == "llvmgpu_mma_sync"
    assert model_pipeline(parse_target("cuda:sm_80"), "llvmgpu_tile_and_fuse") == "llvmgpu_tile_and_fuse"
    assert model_pipeline(parse_target("rocm:gfx942"), None) is None
    assert model_pipeline(parse_target("llvm-cpu"), None) is None


def test_a_pipelined_loop_never_loads_more_k_steps_ahead_than_it_has(square):
    """The prologue loads `stages - 1` K steps unguarded: ResNet-50's 25088x256x64 expand
    convolution (two steps of k32) computed wrong with 4 and 5 stages on the H100, right with 3."""
    expand = replace(square, loop_bounds=(25088, 256, 64), other_ops=("linalg.generic",))
    p = PIPE.build_problem(expand)
    assert admits(p, 128, 64, 32, 4, 2, 3)  # 2 steps loaded ahead of a loop of 2
    assert not admits(p, 128, 64, 32, 4, 2, 4)  # 3 ahead of 2
    assert admits(p, 128, 128, 16, 4, 2, 5)  # four steps of k16: 4 ahead of 4
    # 6272x512x128 (four steps of k32) was right with 5 stages.
    assert admits(PIPE.build_problem(replace(expand, loop_bounds=(6272, 512, 128))), 128, 64, 32, 4, 2, 5)


def test_tiles_of_32_rows_take_resnets_14x14_stage(square):
    """M = 8 images x 196 pixels = 1568 = 49 x 32: no tile of 64 or more rows divides it."""
    stage = replace(square, loop_bounds=(1568, 1024, 256), other_ops=("linalg.generic",))
    assert PIPE.supports(stage)
    p = PIPE.build_problem(stage)
    # 4 warps of 16x64; each thread copies 16 bytes of the 32x32 A tile (1,024 halves, 128 threads).
    assert admits(p, 32, 128, 32, 2, 2, 3)
    assert not admits(p, 64, 128, 32, 2, 2, 3)  # 1568 = 24.5 x 64
    assert not admits(p, 32, 128, 32, 4, 1, 3)  # 8 rows a warp, under one MMA's 16


def test_a_stored_transposed_b_asks_for_the_transposes_kept_where_the_kernel_would_take_it_then(square):
    from pipelines import flags_to_take
    from pipelines.model_flags import KEEP_TRANSPOSES

    m, n, k = square.m_dims[0], square.n_dims[0], square.k_dims[0]
    transposed = replace(square, operand_dims=((m, k), (n, k), (m, n)))
    assert PIPE.flags_to_take(transposed) == (KEEP_TRANSPOSES,)
    assert flags_to_take(transposed, "mma_sync") == (KEEP_TRANSPOSES,)  # by its alias too
    assert flags_to_take(transposed, "llvmgpu_tile_and_fuse") == ()
    assert PIPE.flags_to_take(square) == ()  # taken already
    # Transposed, but what else the kernel needs is missing: no flag makes it take it.
    assert PIPE.flags_to_take(replace(transposed, loop_bounds=(4096, 1000, 4096))) == ()  # N = 1000
    assert PIPE.flags_to_take(replace(transposed, lhs_type="f32", rhs_type="f32")) == ()
    assert PIPE.flags_to_take(replace(transposed, operand_dims=((k, m), (n, k), (m, n)))) == ()  # A stored K x M


def _pointwise_conv_nchw() -> str:
    """A 1x1 NCHW convolution with a constant filter, bias, ReLU and the narrowing to f16, as an
    ONNX Conv -> Relu imports: 2 x 64 x 16 x 16 by 128 x 64; between channels-last neighbours
    (its input and output transposed from and to NHWC, as a convolution inside a CNN sits between
    others), so that under channels-last no transpose is left at its edges."""
    import numpy as np

    rng = np.random.default_rng(0)
    w = rng.standard_normal((128, 64, 1, 1)).astype(np.float16)
    hexed = "0x" + w.tobytes().hex().upper()
    return f"""
func.func @main(%x_nhwc: tensor<2x16x16x64xf16>, %b: tensor<128xf32>) -> tensor<2x16x16x128xf16> {{
  %xe = tensor.empty() : tensor<2x64x16x16xf16>
  %x = linalg.transpose ins(%x_nhwc : tensor<2x16x16x64xf16>) outs(%xe : tensor<2x64x16x16xf16>) permutation = [0, 3, 1, 2]
  %w = arith.constant dense<"{hexed}"> : tensor<128x64x1x1xf16>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<2x128x16x16xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<2x128x16x16xf32>) -> tensor<2x128x16x16xf32>
  %y = linalg.conv_2d_nchw_fchw {{dilations = dense<1> : tensor<2xi64>, strides = dense<1> : tensor<2xi64>}}
      ins(%x, %w : tensor<2x64x16x16xf16>, tensor<128x64x1x1xf16>) outs(%acc : tensor<2x128x16x16xf32>) -> tensor<2x128x16x16xf32>
  %h = tensor.empty() : tensor<2x128x16x16xf16>
  %r = linalg.generic {{indexing_maps = [affine_map<(n, c, i, j) -> (n, c, i, j)>, affine_map<(n, c, i, j) -> (c)>,
                                         affine_map<(n, c, i, j) -> (n, c, i, j)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}}
      ins(%y, %b : tensor<2x128x16x16xf32>, tensor<128xf32>) outs(%h : tensor<2x128x16x16xf16>) {{
  ^bb0(%v: f32, %bias: f32, %o: f16):
    %s = arith.addf %v, %bias : f32
    %m = arith.maximumf %s, %zero : f32
    %t = arith.truncf %m : f32 to f16
    linalg.yield %t : f16
  }} -> tensor<2x128x16x16xf16>
  %re = tensor.empty() : tensor<2x16x16x128xf16>
  %out = linalg.transpose ins(%r : tensor<2x128x16x16xf16>) outs(%re : tensor<2x16x16x128xf16>) permutation = [0, 2, 3, 1]
  return %out : tensor<2x16x16x128xf16>
}}
"""


def test_channels_last_pointwise_convolutions_read_their_filter_k_by_n_with_the_transposes_kept(tmp_path, ctx):
    """Under channels-last a 1x1 convolution is a matmul over the pixels whose B is the filter as
    stored, [F, C]: N x K, which the kernel declines and asks KEEP_TRANSPOSES for. Under both
    flags the compiler stores the constant filter transposed once (a hoisted global) and the
    dispatch reads B K x N, which the kernel takes, its bias and ReLU as the epilogue."""
    from pipelines.model_flags import CHANNELS_LAST, KEEP_TRANSPOSES

    program = tmp_path / "pointwise.mlir"
    program.write_text(_pointwise_conv_nchw())
    target = parse_target("cuda:sm_80")
    [cl] = [d for d in discover(program, target, ctx, CHANNELS_LAST) if d.kind.value == "contraction"]
    m, n, k = cl.m_dims[0], cl.n_dims[0], cl.k_dims[0]
    assert cl.sizes((m, n, k)) == (512, 128, 64) and cl.operand_dims[1] == (n, k)
    assert not PIPE.supports(cl) and PIPE.flags_to_take(cl) == (KEEP_TRANSPOSES,)
    [kept] = [d for d in discover(program, target, ctx, (*CHANNELS_LAST, *KEEP_TRANSPOSES))
              if d.kind.value == "contraction"]
    m, n, k = kept.m_dims[0], kept.n_dims[0], kept.k_dims[0]
    assert kept.sizes((m, n, k)) == (512, 128, 64) and kept.operand_dims[1] == (k, n)
    assert PIPE.supports(kept) and kept.other_ops == ("linalg.generic",)


def _linear_then_transpose_onnx(path, kind: str) -> None:
    """The two ways an export folds a transpose into a linear layer, in the exporter's ops (f16):
    `heads`, an attention's projection split into heads ([1, 64, 256] x [256, 256] -> Reshape
    [1, 64, 4, 64] -> Transpose (0, 2, 1, 3), then a rotary-like Mul); `nchw`, ConvNeXt's MLP on
    channels-last pixels whose second matmul goes back to NCHW before the residual add (its rank-4
    MatMuls as the nd-linear rewrite leaves them, 2-D, as tune-model keeps them on ConvNeXt)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.05).astype(np.float16), name)

    f16 = TensorProto.FLOAT16
    if kind == "heads":
        inits = [weight("W", 256, 256), weight("cos", 1, 1, 64, 64),
                 numpy_helper.from_array(np.array([1, 64, 4, 64], np.int64), "shape")]
        nodes = [helper.make_node("MatMul", ["x", "W"], ["lin"]), helper.make_node("Reshape", ["lin", "shape"], ["view"]),
                 helper.make_node("Transpose", ["view"], ["t"], perm=[0, 2, 1, 3]),
                 helper.make_node("Mul", ["t", "cos"], ["y"])]
        x, y = [1, 64, 256], [1, 4, 64, 64]
    else:
        inits = [weight("W1", 64, 256), weight("W2", 256, 64)]
        nodes = [helper.make_node("Transpose", ["x"], ["nhwc"], perm=[0, 2, 3, 1]),
                 helper.make_node("MatMul", ["nhwc", "W1"], ["l1"]), helper.make_node("Relu", ["l1"], ["r"]),
                 helper.make_node("MatMul", ["r", "W2"], ["l2"]),
                 helper.make_node("Transpose", ["l2"], ["back"], perm=[0, 3, 1, 2]),
                 helper.make_node("Add", ["back", "x"], ["y"])]
        x = y = [2, 64, 4, 4]
    graph = helper.make_graph(nodes, kind, [helper.make_tensor_value_info("x", f16, x)],
                              [helper.make_tensor_value_info("y", f16, y)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]), path)


@pytest.mark.parametrize("kind", ["heads", "nchw"])
def test_a_linear_with_a_transpose_folded_in_asks_for_the_transposes_kept_and_is_then_taken(kind, tmp_path, ctx):
    """Under O3 the compiler folds the head split (or the way back to NCHW) into the linear layer:
    the heads become a second N dim (the images a second M dim), which the kernel declines; it
    asks for KEEP_TRANSPOSES, under which the same program's linear is a 2-D matmul the kernel
    takes (the transpose left to the op after it)."""
    pytest.importorskip("onnx")
    from pipelines.model_flags import KEEP_TRANSPOSES, O3
    from tuner.input.models import program_source
    from tuner.rewrite import ND_LINEAR_AS_MATMUL, rewrite_program

    model = tmp_path / f"{kind}.onnx"
    _linear_then_transpose_onnx(model, kind)
    target = parse_target("cuda:sm_80")
    program = program_source(model, tmp_path, target)
    if kind == "nchw":
        assert rewrite_program(program, ND_LINEAR_AS_MATMUL, tmp_path / "nchw.nd-linear.mlir")
        program = tmp_path / "nchw.nd-linear.mlir"
    contractions = [d for d in discover(program, target, ctx, O3) if d.kind.value == "contraction"]
    folded = [d for d in contractions if len(d.m_dims) + len(d.n_dims) > 2]
    assert len(folded) == 1, [d.name for d in contractions]
    [d] = folded
    assert not PIPE.supports(d) and PIPE.flags_to_take(d) == (KEEP_TRANSPOSES,)
    assert "transposes kept" in PIPE.declines(d)
    kept = [d for d in discover(program, target, ctx, (*O3, *KEEP_TRANSPOSES)) if d.kind.value == "contraction"]
    # heads: 64 tokens x 256 (4 heads of 64) x 256; nchw: both MLP matmuls, 32 pixels x 256 x 64 and back.
    sizes = {"heads": [(64, 256, 256)], "nchw": [(32, 256, 64), (32, 64, 256)]}[kind]
    assert sorted(x.sizes((*x.m_dims, *x.n_dims, *x.k_dims)) for x in kept) == sorted(sizes)
    assert all(PIPE.supports(x) and PIPE.flags_to_take(x) == () for x in kept), [x.name for x in kept]


def test_a_linear_with_a_transpose_folded_in_is_not_offered_flags_where_no_tile_divides_it(square):
    from pipelines.model_flags import KEEP_TRANSPOSES

    m, n, k = square.m_dims[0], square.n_dims[0], square.k_dims[0]
    # C (heads, tokens, head dim) from A (tokens, K), B (K, heads, head dim): loops (h, m, n, k).
    heads = replace(square, loop_bounds=(32, 1024, 64, 2048), batch_dims=(), m_dims=(1,), n_dims=(0, 2), k_dims=(3,),
                    operand_dims=((1, 3), (3, 0, 2), (0, 1, 2)))
    assert not PIPE.supports(heads) and PIPE.flags_to_take(heads) == (KEEP_TRANSPOSES,)
    assert PIPE.flags_to_take(replace(heads, loop_bounds=(32, 1000, 64, 2048))) == ()  # 1000 tokens: no M tile
    assert PIPE.flags_to_take(replace(heads, lhs_type="f32", rhs_type="f32")) == ()
    assert PIPE.flags_to_take(replace(heads, other_ops=("linalg.generic", "linalg.generic"))) == ()
    # A true batch dim (in A, B and C) is not a folded transpose: attention's Q Kᵀ is not offered it.
    batched = replace(heads, batch_dims=(0,), n_dims=(2,), operand_dims=((0, 1, 3), (0, 3, 2), (0, 1, 2)))
    assert PIPE.flags_to_take(batched) == ()
    del m, n, k
