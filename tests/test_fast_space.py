"""The whole valid space of real pipelines' problems, fast (constraints.fast_enumerate): exactly
the solutions the solver enumerates, with no solver call per solution."""

from pathlib import Path

import pytest
from iree.compiler import ir

from constraints import enumerate_solutions
from constraints.fast_enumerate import enumerate_space
from pipelines import pipeline_for
from tuner.discovery.program import discover
from tuner.targets import parse_target

SAMPLES = Path(__file__).resolve().parent.parent / "sample_dispatches"


@pytest.mark.parametrize("sample, target, pipeline", [
    ("attention_8x1024x1024x64_f16.mlir", "cuda", None),
    ("matmul_skinny_32x4096x2048_f32.mlir", "rocm", "llvmgpu_vector_distribute"),
], ids=["attention-cuda-vector-distribute", "skinny-matmul-rocm-vector-distribute"])
@pytest.mark.slow
def test_the_fast_space_of_a_pipeline_is_the_solvers_whole_space(sample, target, pipeline):
    dispatch = discover(SAMPLES / sample, parse_target(target), ir.Context())[0]
    problem = pipeline_for(dispatch, pipeline).build_problem(dispatch)
    fast = [tuple(sorted(s.items())) for s in enumerate_space(problem)]
    solver = {tuple(sorted(s.items())) for s in enumerate_solutions(problem, 100_000)}
    assert fast and len(fast) == len(set(fast)) and set(fast) == solver
