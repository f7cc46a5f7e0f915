"""Shared fixtures: an MLIR context, the CPU target, sample dispatches, synthetic dispatches."""

from __future__ import annotations

from pathlib import Path

import pytest
from iree.compiler import ir

from pipelines import DefaultConfig, Dispatch, DispatchKind, TargetFacts
from tuner.targets import parse_target

SAMPLES = Path(__file__).resolve().parent.parent / "sample_dispatches"


@pytest.fixture(scope="session")
def ctx() -> ir.Context:
    return ir.Context()


@pytest.fixture(scope="session")
def cpu():
    return parse_target("llvm-cpu")


@pytest.fixture(scope="session")
def samples() -> list[Path]:
    return sorted(SAMPLES.glob("*.mlir"))


def write_matmul(path: Path, m: int, n: int, k: int, dtype: str = "f32") -> Path:
    """A small matmul input file (kept small so that compiling and timing it is quick)."""
    path.write_text(f"""
func.func @mm(%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}> {{
  %z = arith.constant 0.0 : {dtype}
  %e = tensor.empty() : tensor<{m}x{n}x{dtype}>
  %f = linalg.fill ins(%z : {dtype}) outs(%e : tensor<{m}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) outs(%f : tensor<{m}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>
  return %r : tensor<{m}x{n}x{dtype}>
}}
""")
    return path


def rebuild_from_spec(input_path: Path, candidate, target, directory: Path, ctx):
    """Write the candidate's spec as best_spec.mlir, configure INPUT with plain iree-compile and
    the candidate's flags, and return the one configured root op read back."""
    from tuner.discovery import read_configured
    from tuner.compile_stage import candidate_flags
    from tuner.tools import find_tool, run_tool

    spec = directory / "best_spec.mlir"
    spec.write_text(candidate.spec)
    run = run_tool([find_tool("iree-compile"), str(input_path), *candidate_flags(candidate, target, spec),
                    "--compile-to=executable-configurations"], 300)
    assert run.ok, run.stderr
    [configured] = read_configured([run.stdout], ctx)
    return configured


@pytest.fixture
def small_matmul(tmp_path: Path) -> Path:
    return write_matmul(tmp_path / "mm.mlir", 128, 256, 64)


def synthetic_cpu_dispatch(m: int = 1024, n: int = 1024, k: int = 1024, avx512: bool = True,
                           vector_bytes: int = 64) -> Dispatch:
    """A matmul Dispatch built by hand: pipeline tests need no compiler run."""
    features = ("+avx", "+avx2", "+fma") + (("+avx512f",) if avx512 else ())
    return Dispatch(
        name="mm_dispatch_0",
        kind=DispatchKind.CONTRACTION,
        op_name="linalg.matmul",
        loop_bounds=(m, n, k),
        batch_dims=(),
        m_dims=(0,),
        n_dims=(1,),
        k_dims=(2,),
        lhs_type="f32",
        rhs_type="f32",
        out_type="f32",
        indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
        operand_dims=((0, 2), (2, 1), (0, 1)),
        target=TargetFacts(backend="llvm-cpu", arch="synthetic x86_64", cpu_features=features,
                           native_vector_bytes=vector_bytes),
        default=DefaultConfig(
            pipeline="#iree_cpu.pipeline<DoubleTilingExpert>",
            lowering_config="#iree_cpu.lowering_config<distribution = [64, 64, 0], "
                            "vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>",
        ),
    )
