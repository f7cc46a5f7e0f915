"""Means, sums and instance norms over lengths IREE's GPU reduction pipeline cannot split, padded
with zeros (tuner.rewrite.pad_reductions): what the rewrite writes and leaves, that (slow) IREE
3.13 configures the padded reductions VectorDistribute on CUDA where it gives the plain ones
TileAndFuse, and that (slow) the padded program computes what numpy does on llvm-cpu."""

import re

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import PAD_REDUCTIONS, REWRITES, rewrite_program
from tuner.rewrite.pad_reductions import pad_reductions

META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _t(shape: list[int], element: str = "f32") -> str:
    return f"!torch.vtensor<[{','.join(map(str, shape))}],{element}>"


def _reduce(op: str, x: list[int], axes: list[int], y: list[int], element: str = "f32", keepdims: int = 1) -> str:
    """`func.func @main_graph` of one onnx.OP of `x` over `axes`, as iree-import-onnx writes it."""
    a = _t([len(axes)], "si64")
    return f"""
func.func @main_graph(%x: {_t(x, element)}) -> {_t(y, element)} attributes {META} {{
  %axes = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<{axes}> : tensor<{len(axes)}xsi64>}} : () -> {a}
  %y = torch.operator "onnx.{op}"(%x, %axes) {{torch.onnx.keepdims = {keepdims} : si64}} : ({_t(x, element)}, {a}) -> {_t(y, element)}
  return %y : {_t(y, element)}
}}
"""


def _instance_norm(x: list[int], element: str = "f16") -> str:
    c = [x[1]]
    return f"""
func.func @main_graph(%x: {_t(x, element)}, %s: {_t(c, element)}, %b: {_t(c, element)}) -> {_t(x, element)} attributes {META} {{
  %y = torch.operator "onnx.InstanceNormalization"(%x, %s, %b) {{torch.onnx.epsilon = 9.99999974E-6 : f32}} : ({_t(x, element)}, {_t(c, element)}, {_t(c, element)}) -> {_t(x, element)}
  return %y : {_t(x, element)}
}}
"""


def _ops(text: str) -> list[str]:
    return [line.split('"onnx.')[1].split('"')[0] for line in text.splitlines() if '"onnx.' in line]


def _rewritten(program: str) -> tuple[list[str], str]:
    with ir.Context():
        module = ir.Module.parse(program)
        done = pad_reductions(module)
        return done, str(module)


def test_a_pool_over_28_by_28_is_a_sum_of_rows_padded_to_832_times_one_over_784():
    done, text = _rewritten(_reduce("ReduceMean", [8, 144, 28, 28], [2, 3], [8, 144, 1, 1]))
    assert done == ["ReduceMean of 8x144x28x28: 784 -> 832"]
    assert _ops(text) == ["Constant", "Reshape", "Pad", "ReduceSum", "Mul", "Reshape"]
    assert "-> !torch.vtensor<[8,144,832],f32>" in text  # the pad: 48 zeros after each row
    assert "dense<[0, 0, 0, 0, 0, 48]>" in text
    scale = re.search(r"dense<([0-9.eE+-]+)> : tensor<f32>", text)
    assert scale and float(scale.group(1)) == pytest.approx(1 / 784, rel=1e-6)  # the true length, not 832
    assert "-> !torch.vtensor<[8,144,1,1],f32>" in text.split('"onnx.Reshape"')[-1]


def test_a_sum_without_kept_dims_and_negative_axes_is_padded_alike():
    done, text = _rewritten(_reduce("ReduceSum", [4, 7, 7], [-2, -1], [4], keepdims=0))
    assert done == ["ReduceSum of 4x7x7: 49 -> 64"]
    assert _ops(text) == ["Constant", "Reshape", "Pad", "ReduceSum", "Reshape"]  # no scale for a sum
    assert "-> !torch.vtensor<[4,64],f32>" in text and "-> !torch.vtensor<[4],f32>" in text


@pytest.mark.parametrize("x, axes, why", [
    ([8, 64, 56, 56], [2, 3], "3136 is 49 x 64: IREE splits it already"),
    ([8, 144, 28, 28], [1], "the channels, not the trailing axes"),
    ([8, 144, 28, 28], [1, 3], "axes that are not trailing ones"),
])
def test_reductions_over_a_multiple_of_64_or_not_over_trailing_axes_are_left_alone(x, axes, why):
    y = [1 if i in axes else d for i, d in enumerate(x)]
    program = _reduce("ReduceMean", x, axes, y)
    done, text = _rewritten(program)
    assert done == [], why
    assert _ops(text) == ["Constant", "ReduceMean"]


def test_an_instance_norm_is_two_padded_means_in_f32_between_casts():
    done, text = _rewritten(_instance_norm([1, 512, 3199]))
    assert done == ["InstanceNormalization of 1x512x3199: 3199 -> 3200"]
    ops = _ops(text)
    assert "InstanceNormalization" not in ops and ops.count("Pad") == 2 and ops.count("ReduceSum") == 2
    assert ops[0] == "Cast" and ops[-1] == "Cast"  # in f32, back to f16
    assert text.count("-> !torch.vtensor<[1,512,3200],f32>") == 2


def test_the_rewrite_is_offered_on_gpus_only():
    assert PAD_REDUCTIONS in REWRITES["gpu"] and PAD_REDUCTIONS not in REWRITES["cpu"]


def _pipelines(program, tmp_path, name: str) -> list[str]:
    """The pipelines plain iree-compile gives `program`'s reductions on cuda (sm_80)."""
    from tests.conftest import iree_compile
    from tuner.targets import parse_target

    dump = tmp_path / f"configs_{name}"
    iree_compile(str(program), *parse_target("cuda").compile_flags,
                 f"--iree-hal-dump-executable-configurations-to={dump}", "-o", str(tmp_path / f"{name}.vmfb"))
    found = []
    for path in sorted(dump.iterdir()):
        text = path.read_text()
        if re.search(r"@\S+_reduction_", text):
            found.append(re.search(r"pipeline = #iree_gpu.pipeline<(\w+)>", text).group(1))
    return found


@pytest.mark.slow
def test_iree_configures_the_padded_rows_vector_distribute_where_it_gives_the_plain_ones_tile_and_fuse(tmp_path):
    plain = tmp_path / "plain.mlir"
    plain.write_text(_reduce("ReduceMean", [512, 3199], [1], [512, 1]))
    assert rewrite_program(plain, PAD_REDUCTIONS, tmp_path / "padded.mlir")
    assert _pipelines(plain, tmp_path, "plain") == ["TileAndFuse"]
    assert _pipelines(tmp_path / "padded.mlir", tmp_path, "padded") == ["VectorDistribute"]


@pytest.mark.slow
def test_the_padded_mean_and_instance_norm_compute_what_numpy_does(tmp_path):
    from tests.conftest import iree_compile
    from tuner.evaluation.runtime_tools import ModuleRun, run_once
    from tuner.targets import parse_target

    rng = np.random.default_rng(0)
    x = rng.normal(1.0, 2.0, (2, 6, 7, 7)).astype(np.float16)
    s, b = rng.normal(size=6).astype(np.float16), rng.normal(size=6).astype(np.float16)
    for path, value in (("x", x), ("s", s), ("b", b)):
        np.save(tmp_path / f"{path}.npy", value)
    wide = x.astype(np.float64)
    mean = wide.mean(axis=(2, 3), keepdims=True)
    want = {"mean": mean,
            "norm": (wide - mean) / np.sqrt(wide.var(axis=(2, 3), keepdims=True) + 1e-5) * s.reshape(1, 6, 1, 1)
            + b.reshape(1, 6, 1, 1)}
    programs = {"mean": (_reduce("ReduceMean", [2, 6, 7, 7], [2, 3], [2, 6, 1, 1], "f16"), ("x",)),
                "norm": (_instance_norm([2, 6, 7, 7]), ("x", "s", "b"))}
    for name, (program, inputs) in programs.items():
        (tmp_path / f"{name}.mlir").write_text(program)
        assert rewrite_program(tmp_path / f"{name}.mlir", PAD_REDUCTIONS, tmp_path / f"{name}_padded.mlir")
        iree_compile(str(tmp_path / f"{name}_padded.mlir"), *parse_target("llvm-cpu").compile_flags, "-o",
                     str(tmp_path / f"{name}.vmfb"))
        run = run_once(tmp_path / f"{name}.vmfb",
                       ModuleRun("local-task", "main_graph", tuple(tmp_path / f"{i}.npy" for i in inputs)),
                       tmp_path / f"{name}_out.npy")
        assert run.ok, run.stderr
        got = np.load(tmp_path / f"{name}_out.npy").astype(np.float64)
        # f16 output: within a few of its rounding steps of the exact value
        assert np.abs(got - want[name]).max() <= 4e-3 * np.abs(want[name]).max(), name
