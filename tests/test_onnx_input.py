"""ONNX models as users bring them (built by examples/onnx_models.py with the onnx package):
imported through iree-import-onnx into the run's own directory, every dispatch listed, and a
tuning that reaches a timed baseline on the model's own entry function, with no flags beyond
--target."""

import importlib.util
import json
from pathlib import Path

import pytest

from tests.conftest import run_cli

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "onnx_models.py"


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("onnx_models", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {p.stem: p for p in module.write_models(tmp_path_factory.mktemp("onnx"), only=("cnn_b4", "bert_layer"))}


@pytest.mark.slow
def test_every_dispatch_of_an_onnx_cnn_is_listed(models):
    result = run_cli("dispatches", models["cnn_b4"], "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["dispatches"]
    convs = [r for r in rows if r["kind"] == "convolution"]
    # Three 3x3 convs of 4 images, each tunable on the CPU; the classifier's Gemm too.
    assert sorted(r["shape"] for r in convs) == ["b4_m16x16_n64_k32x3x3_f32f32f32", "b4_m32x32_n32_k16x3x3_f32f32f32",
                                                 "b4_m64x64_n16_k3x3x3_f32f32f32"]
    assert all(r["pipeline"] == "llvmcpu_conv_tile_and_decompose" and r["entry"] == "cnn_b4" for r in convs)
    assert any(r["kind"] == "contraction" and r["shape"] == "m4_n10_k64_f32f32f32" for r in rows)
    assert all(r["why_not"] for r in rows if not r["pipeline"])


@pytest.mark.slow
def test_an_onnx_model_is_tuned_on_its_own_entry(models, tmp_path):
    out = tmp_path / "out"
    result = run_cli("tune", models["bert_layer"], "--num-candidates", "1", "--repetitions", "1",
                     "--confirm-rounds", "1", "--output", out)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # Seven matmuls, the softmax, a transpose and LayerNorm's two reductions, all tunable: the one
    # with the largest measured share (an MLP matmul, 25-36%) is tuned.
    assert "tuning bert_layer$async_dispatch_" in text and "the largest measured share of 11 tunable dispatches" in text
    assert "_matmul_" in text.split("tuning bert_layer$async_dispatch_")[1].split(":")[0]
    data = json.loads((out / "results.json").read_text())
    assert data["entry"] == "bert_layer" and all(c["status"] == "ok" for c in data["candidates"])
    # The import lives in the run's directory; the identity is the ONNX file's.
    assert (out / "imported" / "bert_layer.mlir").is_file()
    assert json.loads((out / "run.json").read_text())["input"].endswith("bert_layer.onnx")


def _batch_symbolic(model, name: str = "N"):
    """The model as torch.onnx.export writes it with a dynamic batch: the first dimension of
    every input and output a symbolic one."""
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = name
    return model


def test_an_onnx_models_symbolic_input_dims_are_fixed_and_its_shapes_inferred_again(tmp_path):
    import onnx

    from tests.conftest import onnx_examples
    from tuner.input.onnx_dims import fix_symbolic_dims, symbolic_inputs

    onnx.save(onnx_examples().small_cnn(4), tmp_path / "cnn_b4.onnx")
    dynamic = _batch_symbolic(onnx_examples().small_cnn(4))
    onnx.save(dynamic, tmp_path / "dyn.onnx")
    assert symbolic_inputs(dynamic) == [("image", 0, "N")]
    assert fix_symbolic_dims(tmp_path / "dyn.onnx", 3, tmp_path / "fixed.onnx") == ["image[0]: N -> 3"]
    fixed = onnx.load(str(tmp_path / "fixed.onnx"))
    assert symbolic_inputs(fixed) == []
    assert [d.dim_value for d in fixed.graph.output[0].type.tensor_type.shape.dim] == [3, 10]  # inferred again
    # A model with no symbolic input dimension is not copied.
    assert fix_symbolic_dims(tmp_path / "cnn_b4.onnx", 3, tmp_path / "none.onnx") == []
    assert not (tmp_path / "none.onnx").exists()


@pytest.mark.slow
def test_a_dynamic_batch_onnx_model_is_tunable_at_the_size_given(models, tmp_path):
    """As exporters write it (dynamic_axes), every convolution of the CNN has dynamic shapes and
    none is tunable; with --dynamic-size 4 the batch is fixed at import, the convolutions are the
    4-image ones and tunable, and the listing says what was fixed."""
    import onnx

    path = tmp_path / "cnn_dynamic.onnx"
    onnx.save(_batch_symbolic(onnx.load(str(models["cnn_b4"]))), path)
    as_is = json.loads(run_cli("dispatches", path, "--json").stdout)
    assert not any(r["pipeline"] for r in as_is["dispatches"]) and as_is["fixed"] == ""
    assert any("fixed at import by --dynamic-size N" in r["why_not"] for r in as_is["dispatches"])
    result = run_cli("dispatches", path, "--json", "--dynamic-size", "4")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    convs = [r for r in data["dispatches"] if r["kind"] == "convolution"]
    assert len(convs) == 3 and all(r["shape"].startswith("b4_") and r["pipeline"] for r in convs)
    assert data["fixed"].startswith("symbolic dimensions fixed at import (--dynamic-size): image[0]: N -> 4")
