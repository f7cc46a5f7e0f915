"""Real tiny exports in which benchmarks/rewrite_sweep.py found a fault or a gap (twenty-seventh
session): OPT's layer norms of one problem at two ranks (the kernel's function failed
verification), Falcon's multi-query attention (K and V of one head broadcast by the MatMuls: not
raised), GPT-J's scores computed in f32 from Q and K cast up (not raised), BLOOM's ALiBi
scores over flattened heads (not raised; twenty-eighth session) and DeBERTa-v3's disentangled
scores, relative terms added over flattened heads and a boolean mask (not raised; twenty-ninth). Each is now rewritten,
and (slow) the raised programs compute what the exports computed on llvm-cpu."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tests.conftest import EXPORTS, imported_exports, iree_compile
from tests.test_external_layernorm import _stand_in as layernorm_stand_in
from tuner.evaluation.runtime_tools import ModuleRun, relative_error, run_once
from tuner.rewrite import RAISE_ATTENTION_GPU, rewrite_program
from tuner.rewrite.attention import raise_attention
from tuner.rewrite.external_layernorm import external_layernorms
from tuner.targets import parse_target



@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    return imported_exports(tmp_path_factory, "opt", "falcon", "gptj_f16", "bloom", "deberta")


def test_opts_layer_norms_of_two_ranks_call_one_kernel_function_and_the_module_verifies(imported):
    with ir.Context():
        module = ir.Module.parse(imported["opt"].read_text())
        done = external_layernorms(module, layernorm_stand_in)
        module.operation.verify()
        text = str(module)
    assert done == ["16x64_f32 (128 rows of 64 w4)"] * 3  # one on [1, 16, 64], one on [16, 64], one again
    assert text.count("func.func private @layernorm_16x64_f32(") == 1 and '"onnx.LayerNormalization"' not in text


@pytest.mark.parametrize("family, shape", [("falcon", "1x4x16x16x16x16"), ("gptj_f16", "1x4x16x16x16x16"),
                                           ("bloom", "1x4x16x16x16x16"), ("deberta", "1x4x16x16x16x16")])
def test_falcons_multi_query_gptjs_f32_scores_and_blooms_alibi_are_raised_and_no_softmax_is_left(imported, family,
                                                                                               shape):
    with ir.Context():
        module = ir.Module.parse(imported[family].read_text())
        assert raise_attention(module, pad_heads=True) == [shape]
        text = str(module)
    assert '"onnx.Softmax"' not in text and "torch.aten.scaled_dot_product_attention" in text


def _cpu_output(program: Path, family: str, tmp_path: Path) -> np.ndarray:
    vmfb = tmp_path / f"{program.stem}.vmfb"
    iree_compile(str(program), *parse_target("llvm-cpu").compile_flags, "-o", str(vmfb))
    run = run_once(vmfb, ModuleRun("local-task", "main_graph", (EXPORTS / family / "input0.npy",)),
                   tmp_path / f"{program.stem}.npy")
    assert run.ok, run.stderr
    return np.load(tmp_path / f"{program.stem}.npy").astype(np.float32)


def test_debertas_disentangled_scores_over_flattened_heads_are_per_head_with_the_terms_and_the_where_as_one_mask(
        imported):
    from tuner.rewrite.flattened_scores import unflatten_disentangled_scores

    with ir.Context():
        module = ir.Module.parse(imported["deberta"].read_text())
        before = str(module)
        assert unflatten_disentangled_scores(module) == [
            "1x4x16x16x16 scores per head (a bias of 4x16x16 and a boolean mask as one additive mask)"]
        text = str(module)
    def flat_matmuls(program: str) -> int:  # MatMuls over the 4 heads flattened into the batch
        return sum(1 for line in program.splitlines() if '"onnx.MatMul"' in line and "-> !torch.vtensor<[4,16," in line)

    # the scores' and the probabilities' MatMuls on flattened heads gone; the relative terms' two stay
    assert (flat_matmuls(before), flat_matmuls(text)) == (4, 2)
    assert "(!torch.vtensor<[1,4,16,16],f32>, !torch.vtensor<[1,4,16,16],f32>) -> !torch.vtensor<[1,4,16,16],f32>" in text


def test_blooms_scores_over_flattened_heads_are_computed_per_head_with_the_bias_and_the_mask_as_one_mask(imported):
    from tuner.rewrite.alibi_scores import unflatten_alibi_scores

    with ir.Context():
        module = ir.Module.parse(imported["bloom"].read_text())
        assert unflatten_alibi_scores(module) == ["1x4x16x16x16 scores per head (ALiBi bias 64 values)"]
        text = str(module)
    # no score of the flattened heads is left; the bias [4, 1, 16] per head, summed with the
    # causal mask [1, 1, 16, 16]
    assert "!torch.vtensor<[4,16,16],f32>" not in text
    assert "(!torch.vtensor<[1,4,1,16],f32>, !torch.vtensor<[1,1,16,16],f32>) -> !torch.vtensor<[1,4,16,16],f32>" in text


@pytest.mark.slow
@pytest.mark.parametrize("family, tolerance", [("falcon", 1e-5), ("gptj_f16", 2e-3), ("bloom", 1e-5), ("deberta", 1e-5)])
def test_the_raised_export_computes_what_the_export_and_torch_computed(imported, family, tolerance, tmp_path):
    """Falcon, BLOOM and DeBERTa-v3 in f32 (the same sums in another order), GPT-J in f16 (the
    scores' products are the same; the raised op keeps f32 statistics where the export kept f32
    scores)."""
    raised = tmp_path / "raised.mlir"
    assert rewrite_program(imported[family], RAISE_ATTENTION_GPU, raised) == ["1x4x16x16x16x16"]
    before, after = _cpu_output(imported[family], family, tmp_path), _cpu_output(raised, family, tmp_path)
    torch_output = np.load(EXPORTS / family / "torch_output0.npy").astype(np.float32)
    assert relative_error(after, before) < tolerance
    assert relative_error(after, torch_output) < relative_error(before, torch_output) + tolerance
