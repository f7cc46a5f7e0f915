"""Half-precision reductions accumulated in f32 (tuner.rewrite.f32_reductions): what the rewrite
writes, what it leaves, that (slow) IREE 3.13's own f16 sum on llvm-cpu is far off and the
rewritten one is not, and that (slow) the host reference is built from the rewritten program, on
a CPU target too, so that a default it corrects is seen to be off."""

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import F32_REDUCTIONS, REWRITES, rewrite_program
from tuner.rewrite.f32_reductions import f32_reductions

META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _reduction(op: str, element: str = "f16", n: int = 16384) -> str:
    """`func.func @main_graph` of one onnx.OP over a vector of n values, keeping its one dim."""
    x, y, axes = f"!torch.vtensor<[{n}],{element}>", f"!torch.vtensor<[1],{element}>", "!torch.vtensor<[1],si64>"
    return f"""
func.func @main_graph(%x: {x}) -> {y} attributes {META} {{
  %axes = torch.vtensor.literal(dense<0> : tensor<1xsi64>) : {axes}
  %y = torch.operator "onnx.{op}"(%x, %axes) {{torch.onnx.keepdims = 1 : si64}} : ({x}, {axes}) -> {y}
  return %y : {y}
}}
"""


def _ops(text: str) -> list[str]:
    return [line.split('"onnx.')[1].split('"')[0] for line in text.splitlines() if '"onnx.' in line]


@pytest.mark.parametrize("op", ["ReduceL2", "ReduceSum", "ReduceMean", "ReduceSumSquare"])
def test_an_f16_reduction_that_accumulates_is_computed_in_f32_between_casts(op):
    with ir.Context():
        module = ir.Module.parse(_reduction(op))
        assert f32_reductions(module) == [f"{op} of 16384 f16"]
        text = str(module)
    assert _ops(text) == ["Cast", op, "Cast"]
    assert f'"onnx.{op}"(%1, %0) {{torch.onnx.keepdims = 1 : si64}} : (!torch.vtensor<[16384],f32>' in text
    assert "torch.onnx.to = 1 : si64" in text and "torch.onnx.to = 10 : si64" in text  # to f32, back to f16


@pytest.mark.parametrize("op, element, why", [("ReduceMax", "f16", "a maximum is exact in any precision"),
                                              ("ReduceSum", "f32", "already f32")])
def test_reductions_that_need_no_wider_sum_are_left_alone(op, element, why):
    with ir.Context():
        module = ir.Module.parse(_reduction(op, element))
        before = str(module)
        assert f32_reductions(module) == [], why
        assert str(module) == before


def test_the_rewrite_is_offered_on_every_target():
    assert F32_REDUCTIONS in REWRITES["cpu"] and F32_REDUCTIONS in REWRITES["gpu"]


@pytest.mark.slow
def test_iree_sums_16384_f16_values_far_off_and_the_rewritten_sum_is_right(tmp_path):
    from tests.conftest import iree_compile
    from tuner.evaluation.runtime_tools import ModuleRun, run_once
    from tuner.targets import parse_target

    x = np.random.default_rng(0).uniform(0, 1, 16384).astype(np.float16)
    np.save(tmp_path / "x.npy", x)
    exact = float(x.astype(np.float64).sum())
    (tmp_path / "plain.mlir").write_text(_reduction("ReduceSum"))
    assert rewrite_program(tmp_path / "plain.mlir", F32_REDUCTIONS, tmp_path / "rewritten.mlir")
    sums = {}
    for name in ("plain", "rewritten"):
        iree_compile(str(tmp_path / f"{name}.mlir"), *parse_target("llvm-cpu").compile_flags, "-o",
                     str(tmp_path / f"{name}.vmfb"))
        run = run_once(tmp_path / f"{name}.vmfb", ModuleRun("local-task", "main_graph", (tmp_path / "x.npy",)),
                       tmp_path / f"{name}.npy")
        assert run.ok, run.stderr
        sums[name] = float(np.load(tmp_path / f"{name}.npy")[0])
    # f16's spacing at 8192 is 8: the rewritten sum is rounded once (within half of it); IREE
    # 3.13's own f16 accumulation loses most of what each value adds
    assert abs(sums["rewritten"] - exact) <= 4
    assert abs(sums["plain"] - exact) / exact > 0.01


@pytest.mark.slow
def test_the_host_reference_is_built_with_the_sums_in_f32_on_a_cpu_target_too(tmp_path, ctx):
    from tuner.discovery.program import discover_program
    from tuner.stages.base import StageEnv
    from tuner.stages.host_reference import HOST_REFERENCE, host_output
    from tuner.stages.model_client import model_entry
    from tuner.targets import parse_target

    model = tmp_path / "model.mlir"
    model.write_text(_reduction("ReduceSum"))
    target = parse_target("llvm-cpu")
    program = discover_program(model, target, ctx)
    said = []
    env = StageEnv(model, target, tmp_path / "run", ctx, program, model_entry(program, None), say=said.append)
    out = host_output(env)
    assert out is not None and (tmp_path / "run" / HOST_REFERENCE / "program.mlir").is_file()
    assert any("1 half-precision reduction(s) accumulated in f32" in line for line in said), said
    inputs = sorted((tmp_path / "run" / "model-inputs").glob("*.npy"))
    exact = np.load(inputs[0]).astype(np.float64).sum()
    assert abs(float(out.reshape(-1)[0]) - exact) <= max(4, abs(exact) * 1e-3)
