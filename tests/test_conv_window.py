"""Convolutions and pools that leave input unread at a one-pixel output (tuner.rewrite.conv_window),
which IREE 3.13 does not compile: cut to what their windows read at import
(tuner.input.models.repaired_import), and (slow) the cut program compiles and computes the
convolution as its definition does, where the program as exported does not compile."""

import numpy as np
import pytest
from iree.compiler import ir

from tests.conftest import iree_compile
from tuner.input.models import repaired_import
from tuner.rewrite.conv_window import fit_conv_windows

META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"


def _t(*dims: int) -> str:
    return f"!torch.vtensor<[{','.join(map(str, dims))}],f32>"


def _conv(n: int, k: int, s: int, p: int, out: int) -> str:
    x, w, y = _t(2, 8, n, n), _t(16, 8, k, k), _t(2, 16, out, out)
    return f"""
func.func @f(%x: {x}, %w: {w}) -> {y} attributes {META} {{
  %y = torch.operator "onnx.Conv"(%x, %w) {{torch.onnx.dilations = [1 : si64, 1 : si64], torch.onnx.group = 1 : si64, torch.onnx.kernel_shape = [{k} : si64, {k} : si64], torch.onnx.pads = [{p} : si64, {p} : si64, {p} : si64, {p} : si64], torch.onnx.strides = [{s} : si64, {s} : si64]}} : ({x}, {w}) -> {y}
  return %y : {y}
}}
"""


def _pool(n: int, out: int, ceil: int = 0) -> str:
    x, y = _t(2, 8, n, n), _t(2, 8, out, out)
    return f"""
func.func @f(%x: {x}) -> {y} attributes {META} {{
  %y = torch.operator "onnx.MaxPool"(%x) {{torch.onnx.ceil_mode = {ceil} : si64, torch.onnx.kernel_shape = [3 : si64, 3 : si64], torch.onnx.pads = [0 : si64, 0 : si64, 0 : si64, 0 : si64], torch.onnx.strides = [2 : si64, 2 : si64]}} : ({x}) -> {y}
  return %y : {y}
}}
"""


def _fitted(program: str) -> tuple[list[str], str]:
    with ir.Context():
        module = ir.Module.parse(program)
        return fit_conv_windows(module), str(module)


def test_a_resnet_at_32_pixels_last_strided_conv_loses_the_padding_no_window_reaches():
    # layer4's 3x3 stride-2 convolution on a 2x2 map, padding 1: one pixel out, 3 of 4 read
    done, text = _fitted(_conv(2, 3, 2, 1, 1))
    assert done == ["Conv 2x8x2x2 by 3x3: 1 of 4 and 1 of 4 unread dropped"]
    assert "torch.onnx.pads = [1 : si64, 1 : si64, 0 : si64, 0 : si64]" in text and '"onnx.Slice"' not in text


@pytest.mark.parametrize("program, sliced", [(_conv(4, 3, 2, 0, 1), "[2,8,3,3]"), (_conv(6, 3, 4, 0, 1), "[2,8,3,3]"),
                                             (_pool(4, 1), "[2,8,3,3]")])
def test_unpadded_input_no_window_reads_is_sliced_off(program, sliced):
    done, text = _fitted(program)
    assert len(done) == 1 and '"onnx.Slice"' in text
    assert f"-> !torch.vtensor<{sliced},f32>" in next(line for line in text.splitlines() if '"onnx.Slice"' in line)


@pytest.mark.parametrize("program, why", [
    (_conv(6, 3, 2, 0, 2), "two pixels out: IREE compiles it (one unread column, as a 6 -> 2 window at stride 2)"),
    (_conv(3, 3, 2, 0, 1), "the window reads every input pixel"),
    (_conv(4, 1, 2, 0, 2), "a 1-wide window"),
    (_pool(4, 2, ceil=1), "ceil_mode: the output's size is rounded up"),
])
def test_what_reads_all_it_is_given_or_compiles_is_left_alone(program, why):
    assert _fitted(program)[0] == [], why


def test_the_import_is_repaired_in_place_and_says_what_it_dropped(tmp_path):
    program = tmp_path / "model.mlir"
    program.write_text(_conv(2, 3, 2, 1, 1))
    assert repaired_import(program) == ("fit-conv-windows: Conv 2x8x2x2 by 3x3: 1 of 4 and 1 of 4 unread dropped",)
    assert "torch.onnx.pads = [1 : si64, 1 : si64, 0 : si64, 0 : si64]" in program.read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.mlir"]
    assert repaired_import(program) == ()  # nothing left to repair


@pytest.mark.slow
@pytest.mark.parametrize("n, k, s, p", [(2, 3, 2, 1), (4, 3, 2, 0), (5, 3, 3, 0)])
def test_the_cut_convolution_compiles_and_computes_the_definition_where_the_export_does_not_compile(
        tmp_path, n, k, s, p):
    from tuner.evaluation.runtime_tools import ModuleRun, relative_error, run_once
    from tuner.targets import parse_target

    flags = parse_target("llvm-cpu").compile_flags
    program = tmp_path / "model.mlir"
    program.write_text(_conv(n, k, s, p, 1))
    with pytest.raises(Exception):  # IREE 3.13 as exported
        iree_compile(str(program), *flags, "-o", str(tmp_path / "as_exported.vmfb"))
    assert repaired_import(program)
    iree_compile(str(program), *flags, "-o", str(tmp_path / "cut.vmfb"))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 8, n, n)).astype(np.float32), rng.standard_normal((16, 8, k, k)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "w.npy", w)
    run = run_once(tmp_path / "cut.vmfb", ModuleRun("local-task", "f", (tmp_path / "x.npy", tmp_path / "w.npy")),
                   tmp_path / "y.npy")
    assert run.ok, run.stderr
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    definition = np.einsum("ncij,fcij->nf", padded[:, :, :k, :k], w).reshape(2, 16, 1, 1)  # the one window at 0, 0
    assert relative_error(np.load(tmp_path / "y.npy"), definition) < 1e-5


def test_an_import_with_pools_and_no_convolution_is_repaired_too(tmp_path):
    program = tmp_path / "model.mlir"
    program.write_text(_pool(4, 1))
    assert repaired_import(program) == ("fit-conv-windows: MaxPool 2x8x4x4 by 3x3: 1 of 4 and 1 of 4 unread dropped",)
    assert '"onnx.Slice"' in program.read_text()
