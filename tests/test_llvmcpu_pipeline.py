"""The llvm-cpu DoubleTilingExpert pipeline: its problem, and the attributes its solutions become."""

import pytest
import z3
from iree.compiler import ir
from iree.compiler.dialects import iree_codegen

from constraints import enumerate_solutions
from pipelines import pipeline_for
from pipelines.llvmcpu_common import vector_registers
from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
from tests.conftest import synthetic_cpu_dispatch

PIPE = LLVMCPUDoubleTiling()


def test_registry_picks_it_for_cpu_contractions():
    assert pipeline_for(synthetic_cpu_dispatch()).name == "llvmcpu_double_tiling"


@pytest.mark.parametrize("avx512, fits, spills", [
    # AVX-512: 32 registers of 16 f32. An 8x32 accumulator tile is 8 rows x 2 registers = 16, plus
    # 2 for a row of B and 1 broadcast of A: 19 fit. 16x64 is 16 x 4 = 64 accumulators: no.
    (True, (8, 32), (16, 64)),
    # AVX2: 16 registers of 8 f32. 4x16 is 4 x 2 = 8 (+ 2 + 1 = 11): fits. 8x32 is 8 x 4 = 32: no.
    (False, (4, 16), (8, 32)),
])
def test_the_register_file_admits_and_refuses_hand_counted_tiles(avx512, fits, spills):
    d = synthetic_cpu_dispatch(avx512=avx512, vector_bytes=64 if avx512 else 32)
    assert vector_registers(d) == (32 if avx512 else 16)
    p = PIPE.build_problem(d)
    sols = list(enumerate_solutions(p, 50))
    base = next(s for s in sols if not s["data_tiling"])

    def tile(m, n):
        return {**base, "vector_common_parallel_m": m, "vector_common_parallel_n": n, "distribution_m": 64,
                "distribution_n": 128}

    # The refused tile is refused for its registers: each of its sizes is in its knob's domain.
    assert spills[0] in p.knob("vector_common_parallel_m").domain
    assert spills[1] in p.knob("vector_common_parallel_n").domain
    assert p.admits(tile(*fits)) and not p.admits(tile(*spills))


def test_problem_sat_then_unsat_when_the_register_tile_overflows():
    d = synthetic_cpu_dispatch()
    p = PIPE.build_problem(d)
    s = z3.Solver()
    s.add(*p.constraints)
    assert s.check() == z3.sat
    # Force a 32x64 f32 accumulator tile (128 AVX-512 registers) on a tiled config.
    s.add(z3.Not(p.knob("data_tiling").var), p.knob("vector_common_parallel_m").var == 32,
          p.knob("vector_common_parallel_n").var == 64)
    assert s.check() == z3.unsat


def test_data_tiling_is_a_flag_only_config(ctx):
    d = synthetic_cpu_dispatch()
    sols = list(enumerate_solutions(PIPE.build_problem(d), 5))
    assert sols[0]["data_tiling"] is True  # the most important preference
    config = PIPE.to_config(d, sols[0], ctx)
    assert config.compilation_info is None
    assert config.flags == ("--iree-opt-data-tiling",)
    assert config.expect_root_op == "linalg.mmt4d"


def test_tiled_solution_becomes_typed_compilation_info(ctx):
    d = synthetic_cpu_dispatch()
    solution = {"data_tiling": False, "distribution_m": 64, "distribution_n": 128,
                "vector_common_parallel_m": 8, "vector_common_parallel_n": 32, "vector_reduction_k": 1}
    config = PIPE.to_config(d, solution, ctx)
    with ctx:
        info = ir.Attribute.parse(config.compilation_info)
        assert isinstance(info, iree_codegen.CompilationInfoAttr)
        assert str(info.lowering_config) == (
            "#iree_cpu.lowering_config<distribution = [64, 128, 0], "
            "vector_common_parallel = [8, 32, 0], vector_reduction = [0, 0, 1]>")
        translation = iree_codegen.TranslationInfoAttr(info.translation_info)
        assert str(translation.pass_pipeline) == "#iree_cpu.pipeline<DoubleTilingExpert>"
    assert config.expect_lowering_config == str(info.lowering_config)
    assert config.summary == "wg 64x128 vec 8x32 k1"


def test_batch_and_outer_dims_get_unit_tiles(ctx):
    from dataclasses import replace

    d = replace(synthetic_cpu_dispatch(), loop_bounds=(4, 256, 512, 128), batch_dims=(0,), m_dims=(1,),
                n_dims=(2,), k_dims=(3,), op_name="linalg.batch_matmul")
    solution = {"data_tiling": False, "distribution_m": 32, "distribution_n": 64,
                "vector_common_parallel_m": 8, "vector_common_parallel_n": 32, "vector_reduction_k": 4}
    config = PIPE.to_config(d, solution, ctx)
    assert config.expect_lowering_config == (
        "#iree_cpu.lowering_config<distribution = [1, 32, 64, 0], "
        "vector_common_parallel = [1, 8, 32, 0], vector_reduction = [0, 0, 0, 4]>")


def test_unaligned_shapes_still_have_tiled_solutions():
    d = synthetic_cpu_dispatch(m=384, n=1000, k=1200)
    sols = [s for s in enumerate_solutions(PIPE.build_problem(d), 50) if not s["data_tiling"]]
    assert sols
    # M divides cleanly, so the first tiled solutions should use whole M tiles.
    assert 384 % sols[0]["distribution_m"] == 0
