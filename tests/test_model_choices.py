"""Model-wide choices of tune-model: the attention rewrite (what it matches, what it leaves
alone, that the rewritten model computes the same result and has one attention dispatch whose
tuned configs take effect), and the flag stage's decision (a choice slower on the model is not
kept, a faster one is and its program is what the result rebuilds from; a rerun reuses a
finished decision). Timings are designed where the test is about the decision, as in
test_tune_model; compiles and numerics are real."""

import json
import re
from dataclasses import replace
from typing import Callable
from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from pipelines import DispatchKind, pipeline_for
from pipelines.model_flags import EARLY_MATERIALIZATION
from tests.conftest import onnx_examples, iree_compile
from tuner.specs.candidates import generate_candidates
from tuner.build.builder import LocalBuilder, build_all
from tuner.discovery.program import discover_program
from tuner.input.models import program_source
from tuner.rewrite import RAISE_ATTENTION, REWRITES, rewrite_program
from tuner.rewrite.attention import find_attention, raise_attention
from tuner.evaluation.runtime_tools import ModuleRun, Timing, relative_error, run_once
from tuner.core.settings import EvalSettings, Listeners, RunOptions
from tuner.stages import ModelOptions, tune_model
from tuner.stages.flag_decision import FLAG_DECISION
from tuner.stages.flags import FlagStage
from tuner.targets import parse_target

REPO = Path(__file__).resolve().parent.parent
FAST = EvalSettings(repetitions=1, min_time_s=0.01, confirm_rounds=1, confirm_top=1, quiet_wait_s=0.0)


@pytest.fixture(scope="module")
def small_bert(tmp_path_factory) -> Path:
    """A BERT-like layer (128 tokens, hidden 256, 4 heads, f32) as ONNX, written with the onnx helper."""
    pytest.importorskip("onnx")
    import onnx

    path = tmp_path_factory.mktemp("bert") / "bert_small.onnx"
    onnx.save(onnx_examples().bert_layer(), path)
    return path


@pytest.fixture(scope="module")
def imported(small_bert, tmp_path_factory) -> Path:
    return program_source(small_bert, tmp_path_factory.mktemp("imported"), parse_target("llvm-cpu"))


ATTENTION = """
func.func @f(%q: !torch.vtensor<[4,8,16],f32>, %k: !torch.vtensor<[4,8,16],f32>, %v: !torch.vtensor<[4,8,16],f32>,
             %c: !torch.vtensor<[],f32>) -> (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,8],f32>) {
  %kt = torch.operator "onnx.Transpose"(%k) {torch.onnx.perm = [0 : si64, 2 : si64, 1 : si64]} : (!torch.vtensor<[4,8,16],f32>) -> !torch.vtensor<[4,16,8],f32>
  %s = torch.operator "onnx.MatMul"(%q, %kt) : (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,16,8],f32>) -> !torch.vtensor<[4,8,8],f32>
  %t = torch.operator "onnx.Div"(%s, %c) : (!torch.vtensor<[4,8,8],f32>, !torch.vtensor<[],f32>) -> !torch.vtensor<[4,8,8],f32>
  %p = torch.operator "onnx.Softmax"(%t) {torch.onnx.axis = AXIS : si64} : (!torch.vtensor<[4,8,8],f32>) -> !torch.vtensor<[4,8,8],f32>
  %o = torch.operator "onnx.MatMul"(%p, %v) : (!torch.vtensor<[4,8,8],f32>, !torch.vtensor<[4,8,16],f32>) -> !torch.vtensor<[4,8,16],f32>
  return %o, EXTRA : !torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,8],f32>
}
"""


def _sites(axis: int, extra: str) -> list:
    with ir.Context():
        module = ir.Module.parse(ATTENTION.replace("AXIS", str(axis)).replace("EXTRA", extra))
        return [s.shape for s in find_attention(module)]


def test_spelled_out_attention_is_found_with_its_shape():
    assert _sites(2, "%s") == []  # the raw scores are also a result: not rewritten
    assert _sites(-1, "%t") == []  # the scaled scores are a result too
    assert _sites(-1, "%p") == []  # the probabilities too
    # A Div scale, softmax over the last axis, the scores used by nothing else: rewritten.
    with ir.Context():
        text = ATTENTION.replace("AXIS", "-1").replace("return %o, EXTRA", "return %o, %o").replace(
            "-> (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,8],f32>)",
            "-> (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,16],f32>)").replace(
            ": !torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,8],f32>\n}", ": !torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,16],f32>\n}")
        module = ir.Module.parse(text)  # (kept alive while its sites are read)
        assert [s.shape for s in find_attention(module)] == ["4x8x8x16x16"]


def test_softmax_over_another_axis_is_not_attention():
    with ir.Context():
        text = ATTENTION.replace("AXIS", "1").replace("return %o, EXTRA", "return %o, %o").replace(
            "-> (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,8],f32>)",
            "-> (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,16],f32>)").replace(
            ": !torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,8],f32>\n}", ": !torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,8,16],f32>\n}")
        module = ir.Module.parse(text)
        assert find_attention(module) == []


MASKED = """
func.func @f(%q: !torch.vtensor<[4,8,16],f32>, %k: !torch.vtensor<[4,8,16],f32>, %v: !torch.vtensor<[4,8,16],f32>,
             %c: !torch.vtensor<[],f32>, %mask: !torch.vtensor<[8,8],f32>) -> !torch.vtensor<[4,8,16],f32> {
  %kt = torch.operator "onnx.Transpose"(%k) {torch.onnx.perm = [0 : si64, 2 : si64, 1 : si64]} : (!torch.vtensor<[4,8,16],f32>) -> !torch.vtensor<[4,16,8],f32>
  %s = torch.operator "onnx.MatMul"(%q, %kt) : (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4,16,8],f32>) -> !torch.vtensor<[4,8,8],f32>
  FIRST
  SECOND
  %p = torch.operator "onnx.Softmax"(%u) {torch.onnx.axis = -1 : si64} : (!torch.vtensor<[4,8,8],f32>) -> !torch.vtensor<[4,8,8],f32>
  %o = torch.operator "onnx.MatMul"(%p, %v) : (!torch.vtensor<[4,8,8],f32>, !torch.vtensor<[4,8,16],f32>) -> !torch.vtensor<[4,8,16],f32>
  return %o : !torch.vtensor<[4,8,16],f32>
}
"""
SCALE = 'torch.operator "onnx.Div"(IN, %c) : (!torch.vtensor<[4,8,8],f32>, !torch.vtensor<[],f32>) -> !torch.vtensor<[4,8,8],f32>'
ADD_MASK = 'torch.operator "onnx.Add"(IN, %mask) : (!torch.vtensor<[4,8,8],f32>, !torch.vtensor<[8,8],f32>) -> !torch.vtensor<[4,8,8],f32>'


def test_an_additive_mask_after_the_scale_is_raised_reshaped_to_the_scores_rank():
    with ir.Context():
        module = ir.Module.parse(MASKED.replace("FIRST", "%t = " + SCALE.replace("IN", "%s"))
                                 .replace("SECOND", "%u = " + ADD_MASK.replace("IN", "%t")))
        assert raise_attention(module) == ["4x8x8x16x16"]
        text = str(module)
    sdpa = next(line for line in text.splitlines() if "scaled_dot_product_attention" in line)
    reshape = next(line for line in text.splitlines() if "onnx.Reshape" in line)
    assert "%arg4" in reshape and "[1,8,8]" in reshape.split("->")[-1]  # the [8,8] mask, made rank 3
    assert reshape.split("=")[0].strip() in sdpa  # and passed as the op's mask
    assert "onnx.Softmax" not in text and "onnx.Add" not in text


def test_a_mask_added_before_the_scale_is_raised_scaled_as_the_scores_are():
    # softmax((QK^T + mask) / c) = softmax(QK^T / c + mask / c): the op's mask is the mask divided
    # by the same scalar (CodeGen's order), and Q is divided as when the mask comes after.
    with ir.Context():
        module = ir.Module.parse(MASKED.replace("FIRST", "%t = " + ADD_MASK.replace("IN", "%s"))
                                 .replace("SECOND", "%u = " + SCALE.replace("IN", "%t")))
        assert raise_attention(module) == ["4x8x8x16x16"]
        text = str(module)
    divs = [line for line in text.splitlines() if '"onnx.Div"' in line]
    assert len(divs) == 2 and any("%arg4, %arg3" in d for d in divs) and any("%arg0, %arg3" in d for d in divs)
    assert "onnx.Softmax" not in text and "onnx.Add" not in text


TORCH_LAYOUT = """
func.func @f(%q: !torch.vtensor<[1,2,8,16],f16>, %k0: !torch.vtensor<[1,8,2,16],f16>, %v: !torch.vtensor<[1,2,8,16],f16>,
             %c: !torch.vtensor<[],f16>) -> !torch.vtensor<[1,2,8,16],f16> {
  %kt = torch.operator "onnx.Transpose"(%k0) {torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]} : (!torch.vtensor<[1,8,2,16],f16>) -> !torch.vtensor<[1,2,16,8],f16>
  %qs = torch.operator "onnx.Mul"(%q, %c) : (!torch.vtensor<[1,2,8,16],f16>, !torch.vtensor<[],f16>) -> !torch.vtensor<[1,2,8,16],f16>
  %ks = torch.operator "onnx.Mul"(%kt, %c) : (!torch.vtensor<[1,2,16,8],f16>, !torch.vtensor<[],f16>) -> !torch.vtensor<[1,2,16,8],f16>
  %s = torch.operator "onnx.MatMul"(%qs, %ks) : (!torch.vtensor<[1,2,8,16],f16>, !torch.vtensor<[1,2,16,8],f16>) -> !torch.vtensor<[1,2,8,8],f16>
  %s32 = torch.operator "onnx.Cast"(%s) {torch.onnx.to = 1 : si64} : (!torch.vtensor<[1,2,8,8],f16>) -> !torch.vtensor<[1,2,8,8],f32>
  %p32 = torch.operator "onnx.Softmax"(%s32) {torch.onnx.axis = -1 : si64} : (!torch.vtensor<[1,2,8,8],f32>) -> !torch.vtensor<[1,2,8,8],f32>
  %p = torch.operator "onnx.Cast"(%p32) {torch.onnx.to = 10 : si64} : (!torch.vtensor<[1,2,8,8],f32>) -> !torch.vtensor<[1,2,8,8],f16>
  %o = torch.operator "onnx.MatMul"(%p, %v) : (!torch.vtensor<[1,2,8,8],f16>, !torch.vtensor<[1,2,8,16],f16>) -> !torch.vtensor<[1,2,8,16],f16>
  return %o : !torch.vtensor<[1,2,8,16],f16>
}
"""


def test_attention_as_torch_exports_it_is_raised_with_k_transposed_back_and_scaled():
    # Rank-4 heads: K^T made from [b, t, h, d] by one transpose; the scale split over Q and K^T
    # (torch's export of scaled_dot_product_attention); the softmax taken in f32 between casts.
    with ir.Context():
        module = ir.Module.parse(TORCH_LAYOUT)
        assert raise_attention(module) == ["1x2x8x8x16x16"]
        text = str(module)
    lines = text.splitlines()
    sdpa = next(line for line in lines if "scaled_dot_product_attention" in line)
    transpose = next(line for line in lines if "onnx.Transpose" in line)
    scaled = next(line for line in lines if "onnx.Mul" in line and transpose.split("=")[0].strip() in line)
    assert "[0 : si64, 2 : si64, 1 : si64, 3 : si64]" in transpose and "[1,2,8,16],f16" in transpose.split("->")[-1]
    assert scaled.split("=")[0].strip() in sdpa  # K: K0 transposed back, then scaled as K^T was
    assert "onnx.Softmax" not in text and "onnx.Cast" not in text and "[1,2,16,8]" not in text


def test_a_softmax_whose_casts_are_used_elsewhere_is_not_raised():
    with ir.Context():
        text = TORCH_LAYOUT.replace("return %o : !torch.vtensor<[1,2,8,16],f16>",
                                    "return %o, %p32 : !torch.vtensor<[1,2,8,16],f16>, !torch.vtensor<[1,2,8,8],f32>")
        text = text.replace("-> !torch.vtensor<[1,2,8,16],f16> {", "-> (!torch.vtensor<[1,2,8,16],f16>, !torch.vtensor<[1,2,8,8],f32>) {")
        assert find_attention(ir.Module.parse(text)) == []


def _relative_error_of_raised(spelled: Path, raised: Path, entry: str, dtype, tmp_path: Path) -> float:
    """Both programs compiled for the CPU and run on one seeded 128x256 input: the raised one's
    relative error against the spelled-out one."""
    cpu = parse_target("llvm-cpu")
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((128, 256)).astype(dtype))
    outputs = {}
    for name, program in (("spelled", spelled), ("raised", raised)):
        vmfb = tmp_path / f"{name}.vmfb"
        iree_compile(str(program), *cpu.compile_flags, "-o", str(vmfb))
        run = run_once(vmfb, ModuleRun("local-task", entry, (x,)), tmp_path / f"{name}.npy")
        assert run.ok, run.stderr
        outputs[name] = np.load(tmp_path / f"{name}.npy").astype(np.float32)
    return relative_error(outputs["raised"], outputs["spelled"])


@pytest.mark.slow
def test_the_raised_model_computes_the_same_result_with_one_attention_dispatch(imported, tmp_path, ctx):
    cpu = parse_target("llvm-cpu")
    raised = tmp_path / "raised.mlir"
    assert rewrite_program(imported, RAISE_ATTENTION, raised) == ["4x128x128x64x64"]
    kinds = {str(d.kind) for d in discover_program(raised, cpu, ctx).dispatches}
    before = {str(d.kind) for d in discover_program(imported, cpu, ctx).dispatches}
    assert str(DispatchKind.ATTENTION) in kinds and str(DispatchKind.ATTENTION) not in before
    assert _relative_error_of_raised(imported, raised, "bert_layer", np.float32, tmp_path) < 1e-4


@pytest.mark.slow
def test_a_causal_decoder_block_raised_computes_the_same_result(tmp_path, ctx):
    # The Llama-style block: rotary embeddings, an additive causal mask, f16.
    pytest.importorskip("onnx")
    import onnx

    cpu = parse_target("llvm-cpu")
    onnx.save(onnx_examples().llama_block(128, 256, 2, 512), tmp_path / "llama.onnx")
    imported = program_source(tmp_path / "llama.onnx", tmp_path, cpu)
    raised = tmp_path / "raised.mlir"
    assert rewrite_program(imported, RAISE_ATTENTION, raised) == ["2x128x128x128x128"]
    assert DispatchKind.ATTENTION in {d.kind for d in discover_program(raised, cpu, ctx).dispatches}
    assert _relative_error_of_raised(imported, raised, "llama_block", np.float16, tmp_path) < 1e-3


@pytest.mark.slow
def test_a_grouped_query_block_as_torch_exports_it_raised_computes_the_same_result(tmp_path, ctx):
    # Rank-4 heads with biases, K and V repeated by Unsqueeze + Expand + Reshape, rotary, a causal mask.
    pytest.importorskip("onnx")
    import onnx

    cpu = parse_target("llvm-cpu")
    onnx.save(onnx_examples().gqa_block(128, 256, 4, 2, 512), tmp_path / "gqa.onnx")
    imported = program_source(tmp_path / "gqa.onnx", tmp_path, cpu)
    raised = tmp_path / "raised.mlir"
    assert rewrite_program(imported, RAISE_ATTENTION, raised) == ["1x4x128x128x64x64"]
    assert DispatchKind.ATTENTION in {d.kind for d in discover_program(raised, cpu, ctx).dispatches}
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).standard_normal((1, 128, 256)).astype(np.float16))
    outputs = {}
    for name, program in (("spelled", imported), ("raised", raised)):
        iree_compile(str(program), *cpu.compile_flags, "-o", str(tmp_path / f"{name}.vmfb"))
        assert run_once(tmp_path / f"{name}.vmfb", ModuleRun("local-task", "gqa_block", (x,)),
                        tmp_path / f"{name}.npy").ok
        outputs[name] = np.load(tmp_path / f"{name}.npy").astype(np.float32)
    assert relative_error(outputs["raised"], outputs["spelled"]) < 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("model", ["bert_f16", "causal_llama_f16", "gqa_f16"])
def test_tuned_attention_configs_take_effect_in_the_raised_model_on_cuda(model, tmp_path, ctx):
    # In a model IREE folds a transpose of V into the attention when it forms the dispatch, so
    # the dispatch's maps differ from the op a preprocessing spec would see; a causal model's
    # attention carries its mask; a grouped-query block's K and V are repeated to the query
    # heads before the attention, a broadcast IREE folds into the op (its batch split into KV
    # heads x queries per KV head) when it forms the dispatch (compile-only).
    pytest.importorskip("onnx")
    import onnx

    cuda = parse_target("cuda:sm_80")
    examples = onnx_examples()
    built_model = {"bert_f16": lambda: examples.bert_layer(256, 256, 4, 512, dtype=np.float16),
                   "causal_llama_f16": lambda: examples.llama_block(128, 256, 2, 512),
                   "gqa_f16": lambda: examples.gqa_block(128, 256, 4, 2, 512)}[model]()
    onnx.save(built_model, tmp_path / f"{model}.onnx")
    imported = program_source(tmp_path / f"{model}.onnx", tmp_path, cuda)
    raised = tmp_path / "raised.mlir"
    rewrite_program(imported, RAISE_ATTENTION, raised)
    [attention] = [d for d in discover_program(raised, cuda, ctx).dispatches if d.kind == DispatchKind.ATTENTION]
    assert len(attention.indexing_maps) == (5 if model == "bert_f16" else 6)
    candidates = generate_candidates(attention, pipeline_for(attention), 3, ctx, cuda.spec_entry)
    built = build_all(LocalBuilder.of(raised, cuda, tmp_path / "c", ctx), candidates)
    assert len(built) == 4 and {b.result.label: b.result.error for b in built if not b.result.ok} == {}


def _timer(faster: str = "", slower: str = ""):
    """The default 1 ms; a variant built in a directory named `faster` 0.5 ms, `slower` 2 ms,
    any other 1 ms (ties never win)."""
    calls = []

    def timer(vmfb: Path, settings) -> Timing:
        name = vmfb.parent.name
        calls.append(name)
        return Timing((0.5 if name == faster else 2.0 if name == slower else 1.0,))
    timer.calls = calls
    return timer


def _flag_stage(model: Path, out: Path, timer, say=lambda text: None, rounds: int = 2):
    """tune-model with the flag stage alone, timed by `timer`."""
    return tune_model(model, "llvm-cpu", out, run=RunOptions(FAST), model=ModelOptions(rounds=rounds, timer=timer),
                      listen=Listeners(say=say), stages=[FlagStage(tune_budget=0)])


def _recording_timer(times: dict, timed: list):
    """A designed timer: each build's time by its directory's name (1.0 ms where not named), each
    timing's directory appended to `timed`."""
    def timer(vmfb, settings):
        timed.append(vmfb.parent.name)
        return Timing((times.get(vmfb.parent.name, 1.0),))

    return timer


@pytest.fixture
def late_data_tiling_only(monkeypatch):
    """The CPU's model-wide flags cut to late data tiling, for tests whose subject is the rewrite
    (each flag set is a whole-model build, twice with the rewrite), and raise-attention offered
    on the CPU as the rewrite that applies to the small BERT layer (the flag stage's logic is the
    same on every target; the tuner offers it on GPUs only, where a pipeline tunes attention)."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.model_flags import DATA_TILING_FLAG

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ((DATA_TILING_FLAG,),))
    monkeypatch.setitem(REWRITES, "cpu", (*REWRITES["cpu"], RAISE_ATTENTION))


@pytest.mark.slow
def test_a_model_wide_choice_slower_on_the_model_is_not_kept(small_bert, tmp_path, late_data_tiling_only):
    out = tmp_path / "out"
    state = _flag_stage(small_bert, out, _timer(slower="flags-raise-attention")).state
    assert state.flags == () and state.rewrites == () and state.source is None
    assert state.flag_trials["raise-attention"] == pytest.approx(0.5)
    data = json.loads((out / "results.json").read_text())
    assert data["rewrites"] == [] and data["input"] == data["model"]


@pytest.mark.slow
def test_a_faster_rewrite_is_kept_rebuilt_by_plain_iree_compile_and_reused_by_a_rerun(small_bert, tmp_path,
                                                                                     late_data_tiling_only):
    out = tmp_path / "out"
    state = _flag_stage(small_bert, out, _timer(faster="flags-raise-attention")).state
    assert state.rewrites == ("raise-attention",) and state.flags == ()
    assert "scaled_dot_product_attention" in state.source.read_text()
    assert state.source.resolve().is_relative_to(out.resolve())  # written inside the run's directory
    data = json.loads((out / "results.json").read_text())
    assert data["input"] == str(state.source.resolve()) and data["rewrites"] == ["raise-attention"]
    iree_compile(data["input"], f"@{out / 'model_flags.txt'}",
                    "-o", str(tmp_path / "m.vmfb"))
    said, timer = [], _timer()  # a rerun on other timings: the finished decision stands
    again = _flag_stage(small_bert, out, timer, say=said.append)
    assert again.state.rewrites == ("raise-attention",) and again.state.source == state.source
    assert any("reusing the decision" in line for line in said), said
    assert timer.calls == [] and (out / FLAG_DECISION).is_file()
    # The decision carried without its rewritten program (to another machine's run directory):
    # still reused, the program written again where it was, the same bytes.
    text = state.source.read_text()
    state.source.unlink()
    said, timer = [], _timer()
    carried = _flag_stage(small_bert, out, timer, say=said.append)
    assert carried.state.source == state.source and state.source.read_text() == text
    assert any("reusing the decision" in line for line in said), said
    assert timer.calls == []


@pytest.mark.slow
@pytest.mark.parametrize("budget", [2, 0])
def test_a_rewrite_is_judged_with_the_dispatches_it_creates_tuned(small_bert, tmp_path, monkeypatch, budget):
    # On the CPU no pipeline takes attention, so the rewrite here is said to create contractions;
    # the tuning itself is designed (the second valid config of the dispatch, "1.5x"): what is
    # checked is which dispatch is tuned and that the rewrite's build carries its winner.
    from tuner.stages.builtin import DispatchStage
    from tuner.stages.variants import SpecPart

    monkeypatch.setitem(REWRITES, "cpu", (replace(RAISE_ATTENTION, tunes=(DispatchKind.CONTRACTION,)),))
    tuned = []

    def designed_tune(self, dispatch, outcome, program, target, env, source, seconds=None):
        tuned.append((dispatch, source, self.budget, self.directory))
        c = [c for c in generate_candidates(dispatch, pipeline_for(dispatch), 3, env.ctx, target.spec_entry)
             if not c.is_baseline and not c.config.flags][1]
        return replace(outcome, status="tuned", speedup=1.5, part=SpecPart(dispatch, c.config, c.label))

    monkeypatch.setattr(DispatchStage, "tune", designed_tune)
    out = tmp_path / "out"
    state = tune_model(small_bert, "llvm-cpu", out, run=RunOptions(FAST), model=ModelOptions(timer=_timer(faster="flags-raise-attention"), rounds=2), stages=[FlagStage(tune_budget=budget, rewrite_tunes=1)]).state
    assert state.rewrites == ("raise-attention",)
    spec = out / "variants" / "flags-raise-attention" / "spec.mlir"
    if budget == 0:
        assert tuned == [] and not spec.exists()
        return
    [(dispatch, source, evaluations, directory)] = [t for t in tuned if t[3] == "flag-dispatches/flags-raise-attention"]
    created = [d for d in discover_program(state.source, parse_target("llvm-cpu"), ir.Context()).dispatches
               if d.kind == DispatchKind.CONTRACTION]
    assert dispatch.flops == max(d.flops for d in created)  # the largest one
    assert source == state.source and evaluations == 2 and directory == "flag-dispatches/flags-raise-attention"
    assert f"match_{dispatch.name}" in spec.read_text()  # built with its winner (read back by build_variant)
    # Data tiling materialized early is judged the same way: its largest mmt4d dispatch tuned
    # under those flags, and the option built with the winner on the mmt4d (read back).
    early = "flags-" + "-".join(f.lstrip("-") for f in EARLY_MATERIALIZATION)
    [(mmt4d, source, evaluations, _)] = [t for t in tuned if t[3] == f"flag-dispatches/{early}"]
    assert mmt4d.op_name == "linalg.mmt4d" and mmt4d.flags == EARLY_MATERIALIZATION and evaluations == 2
    assert f"match_{mmt4d.name}" in (out / "variants" / early / "spec.mlir").read_text()
    # The rewrite with those flags: its dispatches are found in its program under the flags (under
    # the default flags alone the model may be another: the UNet widening block on cuda), and the
    # mmt4d they form alike takes the flag set's winner (no search of its own); its one tuning
    # (rewrite_tunes=1) goes to a dispatch no choice tuned before.
    joined = (out / "variants" / f"flags-raise-attention-{early.removeprefix('flags-')}" / "spec.mlir").read_text()
    assert re.search(r"@match_\S*_mmt4d_" + "x".join(map(str, mmt4d.loop_bounds)), joined)  # by its own name there
    again = [t[0] for t in tuned if t[3].startswith("flag-dispatches/flags-raise-attention-")]
    assert len(again) <= 1 and not [d for d in again if d.loop_bounds in (mmt4d.loop_bounds, dispatch.loop_bounds)]


@pytest.mark.slow
def test_a_choice_whose_untuned_build_computes_another_result_is_refused_before_its_dispatches_are_tuned(
        small_bert, tmp_path, monkeypatch):
    """Every candidate of a dispatch a choice forms is judged on the model's result, so tuning the
    dispatches of a choice that is wrong elsewhere only costs builds (ResNet-50 on cuda: the
    channels-last flag alone, 16 model builds). Designed numerics: the rewrite's untuned build
    is said to be off; the rewrite's dispatches are then never tuned and the trial says why."""
    from tuner.stages import builtin
    from tuner.stages.builtin import DispatchStage
    from tuner.stages.model_timing import Comparison

    from tuner.rewrite import ND_LINEAR_AS_MATMUL

    # nd-linear-as-matmul finds nothing in the model: a trial with its reason, and no build.
    monkeypatch.setitem(REWRITES, "cpu", (ND_LINEAR_AS_MATMUL, replace(RAISE_ATTENTION, tunes=(DispatchKind.CONTRACTION,))))
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())  # the rewrite alone
    tuned, checked = [], []

    def designed_tune(self, dispatch, outcome, program, target, env, source, seconds=None):
        tuned.append(self.directory)
        return replace(outcome, status="no winner")

    def designed_numerics(env, reference, trials, directory, rounds=None):
        if directory not in ("flag-numerics", "flag-untuned"):
            return builtin.compare_on_model(env, reference, trials, directory, rounds)
        checked.extend(t.variant.name for t in trials)
        return Comparison((), {}, {}, failed={t.variant.name: "a different result (relative error 0.97)" for t in trials})

    monkeypatch.setattr(DispatchStage, "tune", designed_tune)
    monkeypatch.setattr("tuner.stages.untuned.compare_on_model", designed_numerics)
    out = tmp_path / "out"
    state = tune_model(small_bert, "llvm-cpu", out, run=RunOptions(FAST),
                       model=ModelOptions(timer=_timer(faster="flags-raise-attention"), rounds=2),
                       stages=[FlagStage(tune_budget=2, rewrite_tunes=1)]).state
    assert checked == ["flags-raise-attention-default-configs"] and tuned == []
    assert state.rewrites == () and state.flag_trials["raise-attention"] == (
        "a different result (relative error 0.97) with the default configs (not tuned)")
    # Said once, not "nd-linear-as-matmul: nd-linear-as-matmul: nothing ..." (issue 63).
    assert state.flag_trials["nd-linear-as-matmul"] == "nothing in the model to rewrite"


@pytest.mark.slow
def test_the_untuned_builds_of_a_rounds_choices_that_tune_are_checked_in_one_comparison(small_bert, tmp_path,
                                                                                      monkeypatch):
    """Two rewrites that tune what they form (raise-attention, join-sibling-linears on the small
    BERT layer): their builds with the compiler's configs are checked against the default side by
    side in one comparison (its runs go at once on a GPU), not one comparison each running the
    default again; each is then refused for its designed result, untuned."""
    from tuner.rewrite import JOIN_SIBLING_LINEARS
    from tuner.stages import builtin
    from tuner.stages.builtin import DispatchStage
    from tuner.stages.model_timing import Comparison
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling

    monkeypatch.setitem(REWRITES, "cpu", (replace(RAISE_ATTENTION, tunes=(DispatchKind.CONTRACTION,)),
                                          replace(JOIN_SIBLING_LINEARS, tunes=(DispatchKind.CONTRACTION,))))
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    comparisons, tuned = [], []

    def designed_numerics(env, reference, trials, directory, rounds=None):
        if directory not in ("flag-numerics", "flag-untuned"):
            return builtin.compare_on_model(env, reference, trials, directory, rounds)
        comparisons.append(sorted(t.variant.name for t in trials))
        return Comparison((), {}, {}, failed={t.variant.name: "a different result (relative error 0.97)" for t in trials})

    monkeypatch.setattr(DispatchStage, "tune", lambda self, *a, **k: tuned.append(self.directory))
    monkeypatch.setattr("tuner.stages.untuned.compare_on_model", designed_numerics)
    state = tune_model(small_bert, "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
                       model=ModelOptions(timer=_timer(faster="none"), rounds=2),
                       stages=[FlagStage(tune_budget=2, rewrite_tunes=1)]).state
    # (then, both wrong alone, the two together: a round of its own)
    assert comparisons == [["flags-join-sibling-linears-default-configs", "flags-raise-attention-default-configs"],
                           ["flags-raise-attention+join-sibling-linears-default-configs"]]
    assert tuned == [] and all(state.flag_trials[n].startswith("a different result")
                               for n in ("raise-attention", "join-sibling-linears")), state.flag_trials


@pytest.mark.slow
def test_a_first_round_choice_that_wins_with_the_compilers_configs_is_judged_so_and_one_that_loses_is_tuned_first(
        small_bert, tmp_path, monkeypatch):
    """Designed times. Two rewrites that tune what they form, timed first with the compiler's
    configs against the default: join-sibling-linears at 0.5 ms of the default's 1 ms is judged
    so, nothing it forms tuned (the dispatch stage tunes what takes the time); raise-attention at
    2 ms has what it forms tuned before it is judged (a raised attention can lose untuned and win
    tuned)."""
    from tuner.rewrite import JOIN_SIBLING_LINEARS
    from tuner.stages.builtin import DispatchStage
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling

    monkeypatch.setitem(REWRITES, "cpu", (replace(RAISE_ATTENTION, tunes=(DispatchKind.CONTRACTION,)),
                                          replace(JOIN_SIBLING_LINEARS, tunes=(DispatchKind.CONTRACTION,))))
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    tuned, timed, said = [], [], []

    def designed_tune(self, dispatch, outcome, program, target, env, source, seconds=None):
        tuned.append(self.directory)
        return replace(outcome, status="no winner")

    monkeypatch.setattr(DispatchStage, "tune", designed_tune)
    times = {"flags-join-sibling-linears-default-configs": 0.5, "flags-raise-attention-default-configs": 2.0}
    state = tune_model(small_bert, "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
                       model=ModelOptions(timer=_recording_timer(times, timed), rounds=2), listen=Listeners(say=said.append),
                       stages=[FlagStage(tune_budget=2, rewrite_tunes=1)]).state
    assert tuned and all("raise-attention" in d for d in tuned), tuned
    assert any("join-sibling-linears: 2.00x the default with the compiler's configs" in line for line in said), said
    assert not any(line.strip().startswith("join-sibling-linears: tuning") for line in said), "\n".join(said)
    assert state.rewrites == ("join-sibling-linears",) and state.flag_trials["join-sibling-linears"] == 2.0
    # Each build timed in the two rounds of its comparison with the compiler's configs, and not
    # again by the step's halving (raise-attention's searches found nothing: its build is that
    # one); then the kept choice is the reference its extension is timed against.
    extension = timed.index("flags-raise-attention+join-sibling-linears-default-configs") - 1  # its reference first
    assert timed[extension] == "flags-join-sibling-linears-default-configs"
    first_round = timed[:extension]
    assert first_round.count("flags-join-sibling-linears-default-configs") == 2, "\n".join(timed)
    assert timed.count("flags-raise-attention-default-configs") == 2, "\n".join(timed)


def test_the_report_marks_the_choice_kept_rewrite_and_flags_together():
    import io

    from rich.console import Console

    from tuner.report.outputs import render_model

    fusion = "--iree-dispatch-creation-enable-aggressive-fusion"
    data = {"flags": [fusion], "rewrites": ["raise-attention"], "dispatches": [], "verdict": "v",
            "flag_trials": {fusion: 0.99, "raise-attention": 1.11, f"raise-attention {fusion}": 1.19,
                            "chain-concats": "nothing in the model to rewrite"}}
    out = io.StringIO()
    render_model(data, Console(file=out, width=200))
    lines = out.getvalue().splitlines()
    chosen = [line for line in lines if "(chosen)" in line]
    # Flags by their short names, and once what each name stands for.
    assert chosen == ["model-wide choice raise-attention aggressive-fusion: 1.19x the default on the whole model (chosen)"]
    # a reason is said as it is, no figure's words after it
    assert "model-wide choice chain-concats: nothing in the model to rewrite" in lines
    assert [line for line in lines if line.startswith("flags by name")] == [f"flags by name: aggressive-fusion = {fusion}"]


@pytest.mark.slow
def test_a_model_wide_flag_that_changes_nothing_is_reported_not_applied_and_never_timed(small_bert, tmp_path,
                                                                                       monkeypatch):
    """`--iree-llvmcpu-enable-ukernels=default` is what the compiler does anyway: its build is the
    default's module byte for byte, so it is no choice; the data-tiling flags do change it."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling

    no_op = ("--iree-llvmcpu-enable-ukernels=default",)
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", (no_op, EARLY_MATERIALIZATION))
    monkeypatch.setitem(REWRITES, "cpu", ())
    timer = _timer(faster="flags-" + "-".join(f.lstrip("-") for f in EARLY_MATERIALIZATION))
    state = _flag_stage(small_bert, tmp_path / "out", timer).state
    assert state.flag_trials[no_op[0]].startswith("not applied: the module is the default's")
    assert not any("ukernels" in name for name in timer.calls)  # never timed
    # Nor when the flag stage adds it to its choice: the module is the choice's, byte for byte.
    assert state.flag_trials[" ".join((*EARLY_MATERIALIZATION, *no_op))].startswith(
        "not applied: the module is the choice's")
    assert state.flags == EARLY_MATERIALIZATION and state.flag_trials[" ".join(EARLY_MATERIALIZATION)] == 2.0


def _marker(name: str):
    """A designed rewrite that applies to any program and changes nothing it computes: it tags
    the function with a unit attribute named after it (the builds differ only by their source)."""
    from tuner.rewrite import Rewrite

    def apply(module: ir.Module) -> list[str]:
        func = module.body.operations[0]
        func.attributes[f"tuner.test_{name}"] = ir.UnitAttr.get()
        return [name]

    return Rewrite(name, apply, f"the designed rewrite {name}")


@pytest.mark.slow
@pytest.mark.parametrize("together_ms, kept", [(0.5, ("a", "b")), (0.9, ("a",))])
def test_the_flag_stage_adds_another_rewrite_to_its_choice_only_where_the_model_beats_the_choice_with_it(
        tmp_path, monkeypatch, together_ms, kept):
    """Designed rewrites and times: `a` alone 0.8 ms and `b` alone 1.0 ms against a 1.0 ms default,
    so `a` is chosen first; `a+b` is then timed against `a` and kept only where it beats it."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b")))
    times = {"flags-a": 0.8, "flags-a+b": together_ms}
    timer = lambda vmfb, settings: Timing((times.get(vmfb.parent.name, 1.0),))  # noqa: E731
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    state = _flag_stage(model, tmp_path / "out", timer, say=said.append).state
    assert state.rewrites == kept
    assert state.flag_trials["a"] == pytest.approx(1.25) and state.flag_trials["b"] == pytest.approx(1.0)
    assert state.flag_trials["a+b"] == pytest.approx(1.25 * 0.8 / together_ms, rel=1e-3)
    if kept == ("a", "b"):
        assert "tuner.test_a" in state.source.read_text() and "tuner.test_b" in state.source.read_text()
        assert any("a+b: 1.60x the choice before it" in line for line in said), said


@pytest.mark.slow
@pytest.mark.parametrize("kernels_ms", [0.5, 1.2])
def test_the_joined_kernels_are_judged_first_and_the_other_choices_then_only_extend_a_winner(
        tmp_path, monkeypatch, kernels_ms):
    """Designed rewrites and times against a 1.0 ms default: `k` stands for the joined external
    kernels (external_together's option), `a` for another rewrite, 0.8 ms alone. Where `k` wins
    (0.5 ms) the first round is `k` alone: `a` is never built or timed alone, only added to `k`
    (0.4 ms: kept). Where `k` loses (1.2 ms), the other choices have a first round of their own
    and `a` is chosen (`k` added to it, 1.0 ms, is not kept)."""
    import tuner.stages.flag_options as flag_options
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP
    from tuner.stages.flag_options import ModelOption

    k, a = _marker("k"), _marker("a")
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (k, a))
    monkeypatch.setattr(flag_options, "EXTERNAL", (k,))
    monkeypatch.setattr(flag_options, "external_together", lambda env: [ModelOption((), k, kernels=True)])
    timed: list[str] = []
    timer = _recording_timer({"flags-k": kernels_ms, "flags-a": 0.8, "flags-k+a": 0.4 if kernels_ms < 1.0 else 1.0},
                             timed)
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    state = _flag_stage(model, tmp_path / "out", timer).state
    if kernels_ms < 1.0:
        assert "flags-a" not in timed and "a" not in state.flag_trials, state.flag_trials
        assert state.flag_trials["k"] == pytest.approx(2.0) and state.rewrites == ("k", "a")
        assert state.flag_trials["k+a"] == pytest.approx(2.0 * 0.5 / 0.4, rel=1e-3)
    else:
        assert state.flag_trials["k"] < 1.0 and state.flag_trials["a"] == pytest.approx(1.25)
        assert state.rewrites == ("a",)


def _designed_numerics(monkeypatch, wrong: Callable[[str], bool], error: float) -> None:
    """The flag stage's whole-model comparisons (its numerics check and its timed rounds) with
    every trial whose build `wrong` names refused for another result (relative error `error`),
    the others compared as they are."""
    from tuner.stages import builtin, halving
    from tuner.stages.model_timing import Comparison

    def designed(env, reference, trials, directory, rounds=None):
        off = {t.variant.name for t in trials if wrong(t.variant.name)}
        right = [t for t in trials if t.variant.name not in off]
        cmp = builtin.compare_on_model(env, reference, right, directory, rounds) if right else Comparison((), {}, {})
        return replace(cmp, failed={**cmp.failed, **{n: f"a different result (relative error {error})" for n in off}},
                       errors={**cmp.errors, **{n: error for n in off}})

    monkeypatch.setattr("tuner.stages.untuned.compare_on_model", designed)
    monkeypatch.setattr(halving, "compare_on_model", designed)


@pytest.mark.slow
@pytest.mark.parametrize("wrong_alone", [("a", "b"), ("a",)])
def test_rewrites_each_wrong_alone_are_tried_together(tmp_path, monkeypatch, wrong_alone):
    """Designed numerics and times: each rewrite in `wrong_alone` computes another result alone
    (as raise-attention and pointwise-conv-as-matmul each leave a part IREE computes wrong in an
    SD 1.x attention block on cuda); `a+b` is right and 0.5 ms against a 1.0 ms default. Where
    both were refused for their result, the two are tried together and kept; where one was
    refused and the other was merely no faster, nothing joins them."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b")))
    off = {f"flags-{name}" for name in wrong_alone}
    _designed_numerics(monkeypatch, lambda name: name in off, 1.1)
    timer = lambda vmfb, settings: Timing(({"flags-a+b": 0.5}.get(vmfb.parent.name, 1.0),))  # noqa: E731
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    state = _flag_stage(model, tmp_path / "out", timer, say=said.append).state
    assert state.flag_trials["a"] == "a different result (relative error 1.1)"
    if wrong_alone == ("a", "b"):
        assert state.rewrites == ("a", "b") and state.flag_trials["a+b"] == pytest.approx(2.0, rel=1e-3)
        assert any("a and b each compute another result alone: trying them together" in line for line in said), said
    else:
        assert state.rewrites == () and "a+b" not in state.flag_trials


@pytest.mark.slow
def test_a_right_choice_slower_than_a_wrong_default_is_chosen_and_extended(tmp_path, monkeypatch):
    """Designed numerics and times, an SDXL attention block on cuda: the default's result is off
    llvm-cpu's; `a` alone computes another result too; `b` alone is right but 1.1 ms against the
    default's 1.0 ms; `a+b` is right and 0.5 ms. `b` is chosen for being right, then `a` is added
    to it and kept for beating it."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP
    from tuner.stages import builtin, halving

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b")))

    def designed_numerics(env, reference, trials, directory, rounds=None):
        right = [t for t in trials if t.variant.name != "flags-a"]
        cmp = builtin.compare_on_model(env, reference, right, directory, rounds)
        wrong = {t.variant.name for t in trials} - {t.variant.name for t in right}
        off = ("the result of default is off llvm-cpu's on this host (relative error 1.1): every build is "
               "checked against llvm-cpu's") if reference.variant.name == "default" else ""
        return replace(cmp, failed={**cmp.failed, **{n: "a different result (relative error 1.1)" for n in wrong}},
                       errors={**cmp.errors, **{n: 1.1 for n in wrong}}, reference_check=off)

    monkeypatch.setattr("tuner.stages.untuned.compare_on_model", designed_numerics)  # the numerics check
    monkeypatch.setattr(halving, "compare_on_model", designed_numerics)  # the timed rounds
    times = {"flags-b": 1.1, "flags-a+b": 0.5}
    timer = lambda vmfb, settings: Timing((times.get(vmfb.parent.name, 1.0),))  # noqa: E731
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    state = _flag_stage(model, tmp_path / "out", timer, say=said.append).state
    assert state.rewrites == ("a", "b")
    assert state.flag_trials["b"] == pytest.approx(1 / 1.1, rel=1e-3)
    assert state.flag_trials["a+b"] == pytest.approx(2.0, rel=1e-3)
    assert any("the fastest choice that computes it right is kept" in line for line in said), said


@pytest.mark.slow
def test_a_rewrite_the_first_round_tried_with_the_chosen_flag_is_not_timed_again(tmp_path, monkeypatch):
    """The data-tiling flag chosen alone (designed 0.5 ms); the rewrite with that flag (0.8 ms)
    was tried in the first round: adding the rewrite to the choice is that same build, so it is
    not timed again."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.model_flags import DATA_TILING_FLAG
    from tests.test_tune_model import MLP
    from tuner.stages.flag_options import ModelOption

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ((DATA_TILING_FLAG,),))
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"),))
    flagged = ModelOption((DATA_TILING_FLAG,)).directory
    together = ModelOption((DATA_TILING_FLAG,), _marker("a")).directory
    timed = []
    timer = _recording_timer({flagged: 0.5, together: 0.8}, timed)
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    state = _flag_stage(model, tmp_path / "out", timer).state
    assert state.flags == (DATA_TILING_FLAG,) and state.rewrites == ()
    assert timed.count(together) == 2  # the first round's 2 rounds, nothing more


@pytest.mark.slow
@pytest.mark.slow
def test_the_flag_stage_shows_its_builds_as_a_progress_phase(tmp_path, monkeypatch):
    """Its builds are most of its time (12 model builds on ResNet-50): a 'choices' phase counts
    them, so the progress bar gives the stage an ETA (issue 39)."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.model_flags import DATA_TILING_FLAG
    from tests.test_tune_model import MLP

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ((DATA_TILING_FLAG,),))
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"),))
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    phases = []
    tune_model(model, "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
               model=ModelOptions(rounds=1, timer=lambda vmfb, s: Timing((1.0,))),
               listen=Listeners(progress=lambda phase, done, total: phases.append((phase, done, total))),
               stages=[FlagStage(tune_budget=0)])
    # Two options (the flag, the rewrite), counted one build at a time; neither won alone, so the
    # two together are never built (issue 62: each rewrite with each flag set was a build).
    assert [p for p in phases if p[0] == "choices"] == [("choices", 1, 2), ("choices", 2, 2)]
    assert sorted(d.name for d in (tmp_path / "out" / "variants").iterdir() if d.name.startswith("flags-")) == [
        "flags-a", "flags-iree-opt-data-tiling"]


@pytest.mark.slow
def test_the_flag_stage_compiles_its_choices_side_by_side_once_each_where_the_machine_has_cores(
        tmp_path, monkeypatch):
    """On a 16-core machine the first builds of the choices run in threads, each compiled once
    (build_once then reads its configs back from the same directory); the decision is the one
    made one build at a time."""
    import threading

    import tuner.stages.builtin as builtin
    import tuner.stages.variants as variants
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.model_flags import DATA_TILING_FLAG
    from tests.test_tune_model import MLP

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ((DATA_TILING_FLAG,),))
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"),))
    compiles = []
    real = variants.run_tool_retrying_a_hang

    def spy(command, timeout_s, cwd=None):
        compiles.append((threading.current_thread().name, Path(cwd).name))
        return real(command, timeout_s, cwd=cwd)

    monkeypatch.setattr(variants, "run_tool_retrying_a_hang", spy)
    decisions = {}
    for cores in (2, 16):
        monkeypatch.setattr(builtin, "usable_cores", lambda: cores)
        compiles.clear()
        model = tmp_path / f"mlp{cores}.mlir"
        model.write_text(MLP)
        state = tune_model(model, "llvm-cpu", tmp_path / f"out{cores}", run=RunOptions(FAST),
                           model=ModelOptions(rounds=1, timer=lambda vmfb, s: Timing(
                               (0.5 if "flags-a" in str(vmfb) else 1.0,))),
                           stages=[FlagStage(tune_budget=0)]).state
        decisions[cores] = (state.flags, state.rewrites)
        built = [d for _, d in compiles]
        assert sorted(built) == sorted(set(built)), compiles  # no build compiled twice
        threaded = {d for t, d in compiles if t.startswith("build")}
        # The default first, alone; then the two choices (the flag, the rewrite) in threads; the
        # rewrite won, so the flag is added to it (both: one build more, after them).
        assert threaded == (set() if cores == 2 else {"flags-a", "flags-iree-opt-data-tiling"}), compiles
        assert "flags-a-iree-opt-data-tiling" in built
    assert decisions[2] == decisions[16] and decisions[16][1] == ("a",)


@pytest.mark.slow
@pytest.mark.parametrize("together_ms, kept", [(0.5, "both"), (0.9, "first")])
def test_the_flag_stage_adds_another_flag_set_to_its_choice_only_where_the_model_beats_the_choice_with_it(
        tmp_path, monkeypatch, together_ms, kept):
    """Designed times: late data tiling alone 0.8 ms, no debug symbols alone 0.9 ms, against a
    1.0 ms default; data tiling is chosen, then the two flag sets together are timed against it
    (as O3 on top of direct convolutions on ResNet-50) and kept only where they beat it."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.model_flags import DATA_TILING_FLAG
    from tests.test_tune_model import MLP
    from tuner.stages.flag_options import ModelOption

    no_symbols = ("--iree-llvmcpu-debug-symbols=false",)
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ((DATA_TILING_FLAG,), no_symbols))
    monkeypatch.setitem(REWRITES, "cpu", ())
    both = (DATA_TILING_FLAG, *no_symbols)
    times = {ModelOption((DATA_TILING_FLAG,)).directory: 0.8, ModelOption(no_symbols).directory: 0.9,
             ModelOption(both).directory: together_ms}
    timer = lambda vmfb, settings: Timing((times.get(vmfb.parent.name, 1.0),))  # noqa: E731
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    state = _flag_stage(model, tmp_path / "out", timer).state
    assert state.flags == (both if kept == "both" else (DATA_TILING_FLAG,))
    assert state.flag_trials[" ".join(both)] == pytest.approx(1.25 * 0.8 / together_ms, rel=1e-3)
    assert state.flag_trials[no_symbols[0]] == pytest.approx(1.0 / 0.9, rel=1e-3)
    # A rerun reuses the decision, the joined flag sets included (it would decide again otherwise).
    again = _flag_stage(model, tmp_path / "out", timer, say=said.append).state
    assert again.flags == state.flags and any("reusing the decision" in line for line in said), said


@pytest.mark.slow
def test_a_flag_set_the_choices_own_dispatches_call_for_is_tried_on_it_and_on_a_reused_decision(tmp_path, monkeypatch):
    """Designed times. The model's pipeline (llvmcpu_mmt4d by name, here) asks for a flag set (no
    debug symbols) for the dispatches early materialization forms (mmt4d), as the mma.sync kernel
    asks for the transposes kept for what channels-last forms: the default's dispatches do not
    call for it, so the first round does not try it alone; on top of the choice it is tried and
    kept where it beats it; a decision recorded before the pipeline asked for it is reused and
    extended by it, and once tried it is not tried again."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.llvmcpu_mmt4d import LLVMCPUMmt4d
    from tests.test_tune_model import MLP
    from tuner.core.settings import SearchSettings
    from tuner.stages.flag_options import ModelOption

    no_symbols = ("--iree-llvmcpu-debug-symbols=false",)
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", (EARLY_MATERIALIZATION,))
    monkeypatch.setitem(REWRITES, "cpu", ())
    # What each build is judged with tuned, by the choice's directory (no search runs here).
    tuned: list[tuple[str, tuple]] = []
    monkeypatch.setattr(FlagStage, "_tuned_parts",
                        lambda self, env, name, kinds, *args, **kwargs: tuned.append((name, kinds)) or ())
    asks = {"on": False}
    monkeypatch.setattr(LLVMCPUMmt4d, "taking_flags", (no_symbols,))
    monkeypatch.setattr(LLVMCPUMmt4d, "flags_to_take",
                        lambda self, d: (no_symbols,) if asks["on"] and "mmt4d" in d.name else ())
    both = (*EARLY_MATERIALIZATION, *no_symbols)
    # Nothing tuned, a choice's build is its build with the default configs (its directory's).
    times = {ModelOption(EARLY_MATERIALIZATION).directory + "-default-configs": 0.8,
             ModelOption(both).directory + "-default-configs": 0.5}
    timer = lambda vmfb, settings: Timing((times.get(vmfb.parent.name, 1.0),))  # noqa: E731
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)

    def flag_stage(out: Path, said: list):
        return tune_model(model, "llvm-cpu", out, run=RunOptions(FAST), model=ModelOptions(rounds=2, timer=timer),
                          listen=Listeners(say=said.append),
                          stages=[FlagStage(tune_budget=1, search=SearchSettings(pipeline="llvmcpu_mmt4d"))]).state

    first_said: list = []
    first = flag_stage(tmp_path / "out", first_said)
    assert first.flags == EARLY_MATERIALIZATION, first.flag_trials
    # 1.25x the default with the compiler's configs: judged so, what it forms not tuned first
    assert tuned == [] and any("1.25x the default with the compiler's configs" in line for line in first_said)
    asks["on"] = True
    said: list = []
    again = flag_stage(tmp_path / "out", said)
    # The reused choice is built again as it was judged (untuned), and the flag on it, 1.60x the
    # choice untuned, is judged so too: nothing tuned in either run.
    assert tuned == [], tuned
    assert any("1.60x the choice before it with the compiler's configs" in line for line in said), said
    assert any("reusing the decision" in line for line in said), said
    assert any("not tried on it" in line and "debug-symbols" in line for line in said), said
    assert any("tried on it: global-data-tiling early-materialization --iree-llvmcpu-debug-symbols=false 2.00x" in line
               for line in said), said
    assert again.flags == both
    assert again.flag_trials[" ".join(both)] == pytest.approx(1.25 * 1.6, rel=1e-3)  # 1/0.8, then 0.8/0.5
    fresh = flag_stage(tmp_path / "fresh", [])
    assert fresh.flags == both and no_symbols[0] not in fresh.flag_trials
    said.clear()
    third = flag_stage(tmp_path / "out", said)
    assert third.flags == both and not any("not tried" in line for line in said), said


class _Stopped(BaseException):
    """What a device's per-call limit does to a run: it ends where it is."""


@pytest.mark.slow
def test_a_flag_stage_stopped_in_its_second_step_resumes_there_without_timing_the_first_again(tmp_path, monkeypatch):
    """Designed times: data tiling 0.8 ms and no debug symbols 0.9 ms alone (the default 1.0), so
    the first step keeps data tiling and the second tries both on it. The run is stopped while
    the second step is timed; the rerun takes the first step as it was judged (neither choice
    alone is timed again) and times the second, and decides as a run never stopped does."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from pipelines.model_flags import DATA_TILING_FLAG
    from tests.test_tune_model import MLP
    from tuner.stages.flag_decision import FLAG_STEPS
    from tuner.stages.flag_options import ModelOption

    no_symbols = ("--iree-llvmcpu-debug-symbols=false",)
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ((DATA_TILING_FLAG,), no_symbols))
    monkeypatch.setitem(REWRITES, "cpu", ())
    tiling, symbols = ModelOption((DATA_TILING_FLAG,)).directory, ModelOption(no_symbols).directory
    both = ModelOption((DATA_TILING_FLAG, *no_symbols)).directory
    times = {tiling: 0.8, symbols: 0.9, both: 0.6}
    timed: list[str] = []
    stop = {"at": both}

    def timer(vmfb, settings):
        if vmfb.parent.name == stop["at"]:
            stop["at"] = None
            raise _Stopped()
        timed.append(vmfb.parent.name)
        return Timing((times.get(vmfb.parent.name, 1.0),))

    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)

    def flag_stage(out: Path, said: list):
        return tune_model(model, "llvm-cpu", out, run=RunOptions(FAST), model=ModelOptions(rounds=2, timer=timer),
                          listen=Listeners(say=said.append), stages=[FlagStage(tune_budget=0)]).state

    with pytest.raises(_Stopped):
        flag_stage(tmp_path / "out", [])
    assert symbols in timed and (tmp_path / "out" / FLAG_STEPS).is_file()
    timed.clear()
    said: list[str] = []
    resumed = flag_stage(tmp_path / "out", said)
    assert symbols not in timed and both in timed, timed
    assert any("flag-runs: as an earlier run judged it" in line for line in said), said
    assert resumed.flags == (DATA_TILING_FLAG, *no_symbols)
    assert not (tmp_path / "out" / FLAG_STEPS).exists()  # the decision holds it now
    never_stopped = flag_stage(tmp_path / "never", [])
    assert never_stopped.flags == resumed.flags
    assert never_stopped.flag_trials == pytest.approx(resumed.flag_trials)


def test_a_decision_joining_two_rewrites_is_reused_where_its_program_was_removed(tmp_path, monkeypatch):
    # A decision carried to another machine's run directory without its rewritten program (the
    # joined rewrites' program is written only when that choice is built): written again where
    # it was, both rewrites applied; one whose rewrites no longer find anything is decided again.
    from types import SimpleNamespace

    from tuner.rewrite import Rewrite
    from tuner.stages import flag_decision
    from tuner.stages.base import ModelState
    from tuner.stages.flag_options import ModelOption

    def tagging(tag):
        def apply(module):
            if tag in module.operation.attributes:
                return []
            module.operation.attributes[tag] = ir.UnitAttr.get()
            return [tag]
        return apply

    a, b = Rewrite("a", tagging("tuner.a"), "tags a"), Rewrite("b", tagging("tuner.b"), "tags b")
    monkeypatch.setitem(REWRITES, "cpu", (a, b))
    model, out = tmp_path / "m.mlir", tmp_path / "out"
    model.write_text("module {\n}\n")
    out.mkdir()
    from tuner.stages.base import RunCache
    from tuner.stages.ledger import Ledger

    env = SimpleNamespace(model=model, output_dir=out, target=parse_target("llvm-cpu"), cache=RunCache(),
                          say=lambda t: None, ledger=Ledger())
    options = [ModelOption((), a), ModelOption((), b)]
    program = out / "imported" / "m.a+b.mlir"
    flag_decision.record_decision(env, options, ModelState(rewrites=("a", "b"), source=program))
    assert not program.exists()
    earlier = flag_decision.earlier_decision(env, options)
    assert earlier is not None and earlier.rewrites == ("a", "b") and earlier.source == program
    text = program.read_text()
    assert "tuner.a" in text and "tuner.b" in text
    # A rewrite that finds nothing now (its code changed since): decided again.
    program.unlink()
    env.cache = RunCache()
    monkeypatch.setitem(REWRITES, "cpu", (a, replace(b, apply=lambda module: [])))
    assert flag_decision.earlier_decision(env, options) is None


def test_a_choice_joining_many_flags_has_a_directory_name_every_file_system_takes():
    # ResNet-50's third flag-stage step on cuda joined two rewrites and four flag sets: a
    # 273-character directory name, ENAMETOOLONG on the H100 machine after 433 s of the stage.
    from tuner.rewrite import POINTWISE_CONV_AS_MATMUL, SUBSAMPLE_STRIDED_1X1, combined
    from tuner.stages.flag_options import ModelOption

    pipeline = "--iree-preprocessing-pass-pipeline=builtin.module(util.func(iree-preprocessing-convert-conv-to-channels-last))"
    rewrite = combined([SUBSAMPLE_STRIDED_1X1, POINTWISE_CONV_AS_MATMUL])
    flags = (pipeline, "--iree-codegen-llvmgpu-use-direct-convolution",
             "--iree-dispatch-creation-enable-aggressive-fusion", "--iree-opt-level=O3")
    long_one, other = ModelOption(flags, rewrite), ModelOption(flags[:3] + ("--iree-opt-level=O2",), rewrite)
    assert len(long_one.directory) <= 120 and len(other.directory) <= 120
    assert long_one.directory != other.directory  # the same first 103 characters, other labels
    assert long_one.directory.startswith("flags-subsample-strided-1x1+pointwise-conv-as-matmul-iree-preprocessing")
    assert ModelOption(("--iree-opt-level=O3",)).directory == "flags-iree-opt-level=O3"  # short ones as they were


def _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said: list[str], text: str = ""):
    """A flag stage's world on cuda for a model of one batch matmul of batch 1 (test_mma_sync's
    UNIT_BATCH; `text`: another program), its dispatch tunings designed: each is 1.5x, and its
    dispatch's name recorded in the list returned beside the env."""
    from tuner.stages.base import StageEnv
    from tuner.stages.builtin import DispatchStage
    from tuner.stages.variants import SpecPart
    from tests.test_mma_sync import UNIT_BATCH

    program = tmp_path / "linear.mlir"
    program.write_text(text or UNIT_BATCH)
    target = parse_target("cuda:sm_80")
    found = discover_program(program, target, ctx)
    tuned_names: list[str] = []

    def tune_or_say(self, dispatch, outcome, *args, **kwargs):
        tuned_names.append(dispatch.name)
        return replace(outcome, status="tuned", speedup=1.5, part=SpecPart(dispatch, None, "designed"))

    monkeypatch.setattr(DispatchStage, "tune_or_say", tune_or_say)
    env = StageEnv(program, target, tmp_path / "run", ctx, found, next(iter(found.entries.values())), say=said.append)
    return env, program, tuned_names


BIG_AND_TINY = """
func.func @main(%a: tensor<512x1024xf16>, %b: tensor<1024x512xf16>, %c: tensor<1x1024xf16>) -> (tensor<512x512xf32>, tensor<1x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<512x512xf32>) -> tensor<512x512xf32>
  %big = linalg.matmul ins(%a, %b : tensor<512x1024xf16>, tensor<1024x512xf16>) outs(%acc : tensor<512x512xf32>) -> tensor<512x512xf32>
  %e1 = tensor.empty() : tensor<1x512xf32>
  %acc1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<1x512xf32>) -> tensor<1x512xf32>
  %tiny = linalg.matmul ins(%c, %b : tensor<1x1024xf16>, tensor<1024x512xf16>) outs(%acc1 : tensor<1x512xf32>) -> tensor<1x512xf32>
  return %big, %tiny : tensor<512x512xf32>, tensor<1x512xf32>
}
"""


@pytest.mark.slow
def test_a_formed_dispatch_far_smaller_than_the_largest_is_not_tuned_before_the_judgement(tmp_path, ctx, monkeypatch):
    """The UNet block's time-embedding projection (1 x 1280 x 1280) was tuned under each choice:
    here a 1 x 512 x 1024 matmul beside a 512 x 512 x 1024 one (1/512 of its FLOPs) is not."""
    said: list[str] = []
    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said, BIG_AND_TINY)
    contractions = [d for d in env.program.dispatches if d.kind == DispatchKind.CONTRACTION]
    assert len(contractions) == 2
    FlagStage(tune_budget=2, rewrite_tunes=2)._tuned_parts(env, "both", (DispatchKind.CONTRACTION,), program)
    [big] = [d.name for d in contractions if d.flops == max(c.flops for c in contractions)]
    assert tuned_names == [big], said


TAKEN_AND_TRANSPOSED = """
func.func @main(%a: tensor<512x1024xf16>, %b: tensor<1024x512xf16>, %w: tensor<768x1024xf16>) -> (tensor<512x512xf32>, tensor<512x768xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<512x512xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<512x512xf32>) -> tensor<512x512xf32>
  %taken = linalg.matmul ins(%a, %b : tensor<512x1024xf16>, tensor<1024x512xf16>) outs(%acc : tensor<512x512xf32>) -> tensor<512x512xf32>
  %e2 = tensor.empty() : tensor<512x768xf32>
  %acc2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<512x768xf32>) -> tensor<512x768xf32>
  %declined = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>,
                                             affine_map<(m, n, k) -> (m, n)>]
      ins(%a, %w : tensor<512x1024xf16>, tensor<768x1024xf16>) outs(%acc2 : tensor<512x768xf32>) -> tensor<512x768xf32>
  return %taken, %declined : tensor<512x512xf32>, tensor<512x768xf32>
}
"""


@pytest.mark.slow
def test_the_dispatches_a_choice_is_judged_with_tuned_are_first_those_the_models_pipeline_takes(tmp_path, ctx,
                                                                                                monkeypatch):
    """What a flag set that has the model's pipeline take more dispatches is for (KEEP_TRANSPOSES
    and the mma.sync kernel): with one tuning before the judgement, the 512 x 512 x 1024 matmul
    the kernel takes goes before the larger 512 x 768 x 1024 one it declines (B stored N x K);
    without a model pipeline, the larger."""
    from tuner.core.settings import SearchSettings

    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, [], TAKEN_AND_TRANSPOSED)
    contractions = {d.loop_bounds: d.name for d in env.program.dispatches if d.kind == DispatchKind.CONTRACTION}
    assert set(contractions) == {(512, 512, 1024), (512, 768, 1024)}
    kinds = (DispatchKind.CONTRACTION,)
    FlagStage(tune_budget=2, rewrite_tunes=1, search=SearchSettings(pipeline="llvmgpu_mma_sync"))._tuned_parts(
        env, "mma", kinds, program)
    assert tuned_names == [contractions[(512, 512, 1024)]]
    tuned_names.clear()
    FlagStage(tune_budget=2, rewrite_tunes=1)._tuned_parts(env, "compilers", kinds, program)
    assert tuned_names == [contractions[(512, 768, 1024)]]


@pytest.mark.slow
def test_a_choice_is_judged_with_every_tuning_that_serves_it_and_its_own_new_dispatches_tuned(tmp_path, ctx,
                                                                                               monkeypatch):
    """A choice that forms the dispatches an earlier choice tuned, and more (O3 with the transposes
    kept: Llama's MLP matmuls as under O3, its head-split projections now 2-D matmuls), is judged
    with the earlier tunings, which cost nothing, and its one tuning (rewrite_tunes=1) goes to a
    dispatch not tuned yet: on the H200 the projections went untuned behind the served MLP and
    the choice lost by 1-2%."""
    from pipelines.model_flags import AGGRESSIVE_FUSION

    said: list[str] = []
    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said, TAKEN_AND_TRANSPOSED)
    contractions = {d.loop_bounds: d.name for d in env.program.dispatches if d.kind == DispatchKind.CONTRACTION}
    stage = FlagStage(tune_budget=2, rewrite_tunes=1)
    kinds = (DispatchKind.CONTRACTION,)
    first = stage._tuned_parts(env, "plain", kinds, program)
    assert tuned_names == [contractions[(512, 768, 1024)]] and len(first) == 1  # the larger one
    # Aggressive fusion forms both alike (it is no codegen flag): the larger one is served.
    second = stage._tuned_parts(env, "fused", kinds, program, AGGRESSIVE_FUSION)
    assert tuned_names == [contractions[(512, 768, 1024)], contractions[(512, 512, 1024)]]
    assert sorted(p.dispatch.loop_bounds for p in second) == [(512, 512, 1024), (512, 768, 1024)]
    assert sum("its tuning there serves" in line for line in said) == 1, said


@pytest.mark.slow
def test_a_dispatch_two_flag_sets_form_alike_is_tuned_once_and_serves_both(tmp_path, ctx, monkeypatch):
    """The flag stage tunes the dispatches a flag set forms before judging it; one that another
    flag set formed alike (the GQA block's matmuls under generalize-matmul alone and with O3:
    four tunings of the same two shapes, 428 s on the H100) is tuned once, and its winner goes
    on this program's dispatch by its own name."""
    from pipelines.model_flags import GENERALIZE_MATMUL, O3

    said: list[str] = []
    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said)
    stage = FlagStage(tune_budget=2)
    first = stage._tuned_parts(env, "generalize", (DispatchKind.CONTRACTION,), program, GENERALIZE_MATMUL)
    second = stage._tuned_parts(env, "generalize-O3", (DispatchKind.CONTRACTION,), program, (*GENERALIZE_MATMUL, *O3))
    assert len(tuned_names) == 1 and len(first) == len(second) == 1
    assert second[0].dispatch.flags == (*GENERALIZE_MATMUL, *O3) and first[0].dispatch.flags == GENERALIZE_MATMUL
    assert any("its tuning there serves" in line for line in said), said


@pytest.mark.slow
def test_a_dispatch_formed_alike_under_another_codegen_flag_is_tuned_again(tmp_path, ctx, monkeypatch):
    """A codegen flag compiles the dispatch a choice forms alike in another way: its winner under
    one does not serve the other (direct convolutions: the UNet ResNet block's direct choice was
    judged with its igemm winner, 1.43x for 1.69x). Flags before codegen still share the tuning,
    and so does the direct-convolution flag for a matmul, which it does not change (the held-out
    UNet block's im2col matmul was tuned again under each choice adding it)."""
    from pipelines.model_flags import AGGRESSIVE_FUSION, DIRECT_CONVOLUTION

    vectorize = ("--iree-codegen-llvmgpu-vectorize-pipeline=false",)
    said: list[str] = []
    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said)
    stage = FlagStage(tune_budget=2)
    kinds = (DispatchKind.CONTRACTION,)
    stage._tuned_parts(env, "plain", kinds, program)
    stage._tuned_parts(env, "other-codegen", kinds, program, vectorize)
    assert len(tuned_names) == 2
    stage._tuned_parts(env, "other-codegen-fused", kinds, program, (*AGGRESSIVE_FUSION, *vectorize))
    stage._tuned_parts(env, "fused", kinds, program, AGGRESSIVE_FUSION)
    assert len(tuned_names) == 2  # each served by the tuning under its own codegen flags
    stage._tuned_parts(env, "direct", kinds, program, DIRECT_CONVOLUTION)
    assert len(tuned_names) == 2  # a matmul: the plain tuning serves
    assert sum("its tuning there serves" in line for line in said) == 3, said


def test_only_codegen_flags_and_the_cpu_opt_level_decide_how_a_formed_dispatch_compiles():
    from pipelines.model_flags import AGGRESSIVE_FUSION, CHANNELS_LAST, DIRECT_CONVOLUTION, O3, codegen_flags

    flags = (*CHANNELS_LAST, *AGGRESSIVE_FUSION, *O3, *DIRECT_CONVOLUTION)
    assert codegen_flags(flags, "cuda") == DIRECT_CONVOLUTION
    assert codegen_flags(flags, "llvm-cpu") == (*O3, *DIRECT_CONVOLUTION)
    assert codegen_flags(AGGRESSIVE_FUSION, "rocm") == ()
    # Direct convolutions change how a convolution compiles, not a matmul (im2col's).
    assert codegen_flags(flags, "cuda", convolution=False) == ()
    assert codegen_flags((*flags, "--iree-codegen-other"), "cuda", convolution=False) == ("--iree-codegen-other",)


@pytest.mark.slow
def test_a_rewrite_with_flags_takes_the_winners_of_the_dispatches_they_form_alike_and_tunes_the_others(
        tmp_path, ctx, monkeypatch):
    """raise-attention with another flag set was judged with the default configs: its attention,
    tuned under the default flags, had another name under those flags (the GQA block: 0.97x). A
    rewrite's dispatches are found under the option's flags: where the flags form them alike,
    the winners go on them by the new names; one they form otherwise is tuned there (under the
    default flags alone the model may be wrong: the UNet widening block's 1x1 shortcut)."""
    from pipelines.model_flags import AGGRESSIVE_FUSION, GENERALIZE_MATMUL

    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, [])
    stage = FlagStage(tune_budget=2)
    kinds = (DispatchKind.CONTRACTION,)
    alone = stage._tuned_parts(env, "rewrite", kinds, program)
    assert len(alone) == 1 and tuned_names == [alone[0].dispatch.name]
    # Aggressive fusion forms the batch matmul alike: its winner, no tuning.
    fused = stage._tuned_parts(env, "rewrite-fused", kinds, program, AGGRESSIVE_FUSION)
    assert len(fused) == 1 and fused[0].dispatch.flags == AGGRESSIVE_FUSION and len(tuned_names) == 1
    # Generalized, it is another op (a plain matmul): tuned under those flags.
    generalized = stage._tuned_parts(env, "rewrite-generalized", kinds, program, GENERALIZE_MATMUL)
    assert len(generalized) == 1 and generalized[0].dispatch.flags == GENERALIZE_MATMUL
    assert len(tuned_names) == 2 and tuned_names[1] == generalized[0].dispatch.name


@pytest.mark.slow
def test_a_tuning_without_a_winner_is_not_served_to_another_choice(tmp_path, ctx, monkeypatch):
    """No winner may be the model's doing: under the default flags the widening block's 1x1
    shortcut is wrong on cuda, and every candidate of its im2col matmuls was refused for it; under
    channels-last the same matmuls are tuned again, on a right model."""
    from pipelines.model_flags import AGGRESSIVE_FUSION
    from tuner.stages.builtin import DispatchStage

    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, [])
    monkeypatch.setattr(DispatchStage, "tune_or_say", lambda self, dispatch, outcome, *a, **k: (
        tuned_names.append(dispatch.name), replace(outcome, status="no winner", part=None))[1])
    stage = FlagStage(tune_budget=2)
    kinds = (DispatchKind.CONTRACTION,)
    assert stage._tuned_parts(env, "plain", kinds, program) == ()
    assert stage._tuned_parts(env, "fused", kinds, program, AGGRESSIVE_FUSION) == ()
    assert len(tuned_names) == 2


def test_a_rewrite_says_each_kind_of_change_once_with_its_count_and_at_most_six_kinds():
    from tuner.stages.flag_options import changes_text

    assert changes_text(["a", "b", "a", "c", "a"]) == "a (3 times), b, c"  # in the order first met
    many = [f"k{i}" for i in range(9)] + ["k0"]
    assert changes_text(many) == "k0 (2 times), k1, k2, k3, k4, k5 and 3 more kinds"
    assert changes_text(["k0"] * 2 + ["k1"] * 6 + [f"k{i}" for i in range(2, 8)]).endswith("k5 and 2 more kinds")
    assert changes_text([f"k{i}" for i in range(7)]).endswith(" and 1 more kind")


def test_a_rewrite_with_a_flag_set_is_judged_with_what_either_forms_tuned():
    # Subsample + channels-last on ResNet-50: the rewrite tunes nothing, channels-last the
    # convolutions; the two together tune the convolutions (the rewrite's kinds alone left them
    # at the compiler's configs).
    from tuner.rewrite import Rewrite
    from tuner.stages.flag_options import ModelOption

    plain = Rewrite("plain", lambda module: [], "tunes nothing")
    forming = Rewrite("forming", lambda module: [], "forms matmuls", tunes=(DispatchKind.CONTRACTION,))
    flags = ModelOption(("--x",), tunes=(DispatchKind.CONVOLUTION,))
    assert replace(flags, rewrite=plain).tuned_kinds == (DispatchKind.CONVOLUTION,)
    assert replace(flags, rewrite=forming).tuned_kinds == (DispatchKind.CONTRACTION, DispatchKind.CONVOLUTION)
    assert ModelOption((), forming).tuned_kinds == (DispatchKind.CONTRACTION,)


@pytest.mark.slow
def test_the_flag_stage_times_a_choice_far_behind_after_one_round_no_further(tmp_path, monkeypatch):
    """Issue 62, successive halving on designed times (default 1.0 ms, 4 rounds): `a` 0.5 ms (2x),
    `b` 0.6 ms (1.67x: within a quarter of the fastest) and `c` 1.6 ms (0.62x: far behind after its
    first round). `c` is timed once and said left behind; `a` and `b` in every round; `a` wins."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b"), _marker("c")))
    timed = []
    timer = _recording_timer({"flags-a": 0.5, "flags-b": 0.6, "flags-c": 1.6}, timed)
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    state = _flag_stage(model, tmp_path / "out", timer, say=said.append, rounds=4).state
    assert state.rewrites == ("a",)
    # The choices' round: every timing before the extension's (`a+b`, `a+c`, against `a`, whose
    # own timing opens it).
    first_round = timed[:next((i for i, n in enumerate(timed) if "+" in n), len(timed)) - 1]
    assert first_round.count("flags-a") == first_round.count("flags-b") == 4 and first_round.count("flags-c") == 1
    assert any("c: 0.62x in its first round, more than 25% behind the fastest (2.00x): not timed further" in line
               for line in said), said
    assert state.flag_trials["c"] == pytest.approx(0.625)


class _Clock:
    """A designed clock: `now` seconds, moved by the test (by each timing, say)."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _budget_clock(monkeypatch, clock: _Clock) -> None:
    """tune-model's time budget read from `clock`."""
    from functools import partial

    from tuner.stages import model_client
    from tuner.stages.time_budget import TimeBudget

    monkeypatch.setattr(model_client, "TimeBudget", partial(TimeBudget, clock=clock))


def test_the_time_budget_gives_the_flag_stage_its_share_and_keeps_the_merges():
    from tuner.stages.time_budget import DISPATCH_FLOOR, FLAG_SHARE, MERGE_SHARE, TimeBudget

    clock = _Clock()
    budget = TimeBudget(600.0, clock=clock)
    clock.now = 100.0  # the import and the profile took 100 s: the flag stage has its share of the 500 left
    budget.begin_flag_stage()
    clock.now = 150.0
    assert budget.flag_stage_left() == pytest.approx(500.0 * FLAG_SHARE - 50.0)
    assert budget.dispatch_stage_seconds() == pytest.approx(600.0 * (1 - MERGE_SHARE) - 150.0)
    assert budget.verdict_text() == ""  # nothing left undone: nothing said
    clock.now = 480.0  # 30 s before the merge's reserve: the dispatch stage still gets its floor
    assert budget.dispatch_stage_seconds() == pytest.approx(600.0 * DISPATCH_FLOOR)
    assert "the dispatch stage began with 30 s left of its share, and was given 60 s" in budget.verdict_text()
    clock.now = 590.0  # past the reserve: the floor, the merge still runs after it
    assert budget.flag_stage_left() < 0 and budget.dispatch_stage_seconds() == pytest.approx(600.0 * DISPATCH_FLOOR)
    budget.skip("tuning d1")
    budget.skip("tuning d1")
    assert budget.verdict_text().startswith("; within the time budget of 600 s (590 s spent) not done: ")
    assert budget.verdict_text().endswith("; tuning d1")
    assert budget.verdict_text().count("tuning d1") == 1


def test_past_its_share_the_dispatch_stage_gets_its_floor_only_for_a_dispatch_worth_overrunning_the_budget_for():
    """Falcon-7B's layer on the H200 overran a 220 s budget by 41 s for two elementwise
    dispatches of 1-2% of its time (1.01x); DINOv2's one of 8.6% made 1.05x in its floor."""
    from tuner.stages.time_budget import DISPATCH_FLOOR, FLOOR_WORTH, TimeBudget

    clock = _Clock()
    budget = TimeBudget(600.0, clock=clock)
    clock.now = 500.0  # 10 s before the merge's reserve: under the floor
    assert budget.dispatch_stage_seconds(largest_share=0.02) == pytest.approx(10.0)
    assert f"its largest dispatch 2.0% of the model's time (under {100 * FLOOR_WORTH:.0f}%" in budget.verdict_text()
    assert budget.dispatch_stage_seconds(largest_share=0.086) == pytest.approx(600.0 * DISPATCH_FLOOR)
    assert budget.dispatch_stage_seconds(largest_share=None) == pytest.approx(600.0 * DISPATCH_FLOOR)  # not known
    clock.now = 590.0  # past the reserve: nothing for a small one
    assert budget.dispatch_stage_seconds(largest_share=0.02) == 0.0
    clock.now = 100.0  # within its share: the share, whatever the dispatches
    assert budget.dispatch_stage_seconds(largest_share=0.01) == pytest.approx(410.0)


def test_a_flag_stage_step_takes_as_many_choices_as_should_end_within_the_share_at_the_pace_so_far():
    from tuner.stages.time_budget import TimeBudget, flag_step_room

    clock = _Clock()
    budget = TimeBudget(600.0, clock=clock)
    clock.now = 100.0
    budget.begin_flag_stage()  # a share of 200 s of the 500 left: until 300 s
    assert budget.flag_step_room() is None  # no pace yet: any step while the share lasts
    clock.now = 160.0
    budget.note_flag_step(60.0, 3)  # 20 s a choice; 140 s of the share left
    assert budget.flag_step_room() == 7
    clock.now = 290.0
    assert budget.flag_step_room() == 0  # 10 s left: not one more choice
    assert flag_step_room(None) is None  # no budget: every step


@pytest.mark.slow
@pytest.mark.parametrize("timing_s, why, tried", [
    (10.0, "is spent: not tried on a: a+b, a+c", ()),
    (2.5, "would be spent before 2 more choices are judged at the pace so far: trying a+b; not tried on a: a+c",
     ("a+b",))])
def test_the_flag_stage_extends_its_choice_by_the_most_promising_choices_its_share_of_the_time_budget_holds(
        tmp_path, monkeypatch, timing_s, why, tried):
    """Designed rewrites, times and clock (a budget of 100 s gives the flag stage 40 s). Each
    timing 10 s: the first round (the default and `a`, `b`, `c`, 2 rounds) takes more than 40 s.
    Each 2.5 s: it takes most of the 40 s but not all, and the step that would add `b` and `c` to
    `a` would need more than is left at the first round's pace (ResNet-50 under 190 s on the H200
    began such a step of six choices and held its flag stage past the whole run's budget): it
    takes the one that fits, `b`, whose first round (1.25x) beat `c`'s (1.11x). Either way `a`,
    the fastest, is kept (a+b runs as fast as `a`): what was not tried is said on the screen and
    in results.json."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b"), _marker("c")))
    clock = _Clock()
    _budget_clock(monkeypatch, clock)
    times = {"flags-a": 0.5, "flags-b": 0.8, "flags-c": 0.9}

    def timer(vmfb, settings):
        clock.now += timing_s
        return Timing((times.get(vmfb.parent.name, 1.0),))

    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    tuning = tune_model(model, "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
                        model=ModelOptions(rounds=2, timer=timer, time_budget_s=100.0),
                        listen=Listeners(say=said.append), stages=[FlagStage(tune_budget=0)])
    assert tuning.state.rewrites == ("a",)
    assert any(f"share of the time budget {why}" in line for line in said), said
    assert [label for label in tuning.state.flag_trials if "+" in label] == list(tried)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["time_budget"]["undone"] == [f"model-wide choice a+{x}" for x in "bc" if f"a+{x}" not in tried]
    assert "within the time budget of 100 s" in results["verdict"]


@pytest.mark.slow
def test_a_flag_stage_whose_share_is_spent_before_it_starts_builds_no_choice(tmp_path, monkeypatch):
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tuner.stages.time_budget import NOT_TRIED
    from tests.test_tune_model import MLP

    from tuner.rewrite import Rewrite

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    # `none` finds nothing to rewrite in the model: said so, not "not tried", with no time left.
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b"), Rewrite("none", lambda module: [], "nothing")))
    clock = _Clock()
    _budget_clock(monkeypatch, clock)

    def profile_then_timer(vmfb, settings):
        clock.now += 1000.0  # the default's own timing alone outlasts the budget
        return Timing((1.0,))

    from tuner.stages import flags as flag_stage

    real_build_once = flag_stage.build_once

    def slow_default(env, variant):
        clock.now += 50.0  # the default's build: past the flag stage's 40 of 100 s
        return real_build_once(env, variant)

    monkeypatch.setattr(flag_stage, "build_once", slow_default)
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    tuning = tune_model(model, "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
                        model=ModelOptions(rounds=2, timer=profile_then_timer, time_budget_s=100.0),
                        stages=[FlagStage(tune_budget=0)])
    assert tuning.state.rewrites == () and tuning.state.flag_trials == {
        "a": NOT_TRIED, "b": NOT_TRIED, "none": "nothing in the model to rewrite"}
    assert tuning.state.verdict.count("model-wide choice") == 2  # a and b are what the budget cut
    assert not (tmp_path / "out" / "variants" / "flags-a").exists()  # not even built


@pytest.mark.slow
def test_choices_built_before_the_flag_stages_share_ran_out_are_still_timed_and_the_rest_not_tried(tmp_path,
                                                                                                    monkeypatch):
    """Swin-T on the H200: its choices were compiled side by side, then the share ran out while
    the first was judged, and nd-linear-as-matmul, built, went untimed: the run kept the default.
    Here `a` and `b` are built side by side (taking the share's 40 s of 100); each is timed as
    built and `a` kept; `c`, never built, is not tried."""
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP
    from tuner.stages import flags as flag_stage
    from tuner.stages.time_budget import NOT_TRIED

    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", (_marker("a"), _marker("b"), _marker("c")))
    clock = _Clock()
    _budget_clock(monkeypatch, clock)

    def side_by_side(env, variants, phase="builds"):
        for variant in variants:
            if variant.name != "flags-c":  # `c` was still compiling when the share ran out
                flag_stage.build_once(env, variant)
        clock.now += 50.0

    monkeypatch.setattr(flag_stage, "prebuild", side_by_side)
    times = {"flags-a": 0.5, "flags-b": 0.8}
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    tuning = tune_model(model, "llvm-cpu", tmp_path / "out", run=RunOptions(FAST),
                        model=ModelOptions(rounds=2, timer=lambda vmfb, s: Timing((times.get(vmfb.parent.name, 1.0),)),
                                           time_budget_s=100.0),
                        stages=[FlagStage(tune_budget=0)])
    trials = tuning.state.flag_trials
    assert tuning.state.rewrites == ("a",) and trials["c"] == NOT_TRIED
    assert trials["a"] == pytest.approx(2.0) and trials["b"] == pytest.approx(1.25)


def test_a_stopped_run_resumed_goes_on_with_what_it_left_of_its_time_budget(tmp_path):
    """A run with 600 s whose flag stage began at 50 s, stopped after 150 s (its record written
    when the budget was last consulted); the run resumed in the same directory starts 150 s in,
    its flag stage with the share it began with, says so where it leaves something undone, and
    once finished leaves no record: the next run has a budget of its own."""
    from tuner.stages.time_budget import FLAG_SHARE, RECORD, TimeBudget

    record = tmp_path / RECORD
    clock = _Clock()
    first = TimeBudget(600.0, clock=clock, record=record)
    clock.now = 50.0
    first.begin_flag_stage()
    clock.now = 150.0
    first.dispatch_stage_seconds()  # consulted: 150 s written
    later = _Clock()  # the resumed process's clock starts anywhere
    later.now = 5000.0
    resumed = TimeBudget(600.0, clock=later, record=record)
    assert resumed.spent() == pytest.approx(150.0)
    resumed.begin_flag_stage()  # its flag stage goes on with the share it began with at 50 s
    assert resumed.flag_stage_left() == pytest.approx(50.0 + 550.0 * FLAG_SHARE - 150.0)
    later.now += 250.0
    resumed.skip("tuning d1")
    assert resumed.verdict_text() == ("; within the time budget of 600 s (400 s spent, 150 s of them by the run this "
                                      "one resumed) not done: tuning d1")
    resumed.finish()
    assert not record.exists() and TimeBudget(600.0, clock=later, record=record).spent() == 0.0
    record.write_text("not json")  # a record that cannot be read: the budget starts whole
    assert TimeBudget(600.0, clock=later, record=record).spent() == 0.0


def test_the_dispatch_stage_takes_what_the_time_budget_leaves_less_the_merges_share(tmp_path, ctx, monkeypatch):
    """On a designed clock, a budget of 100 s: at 20 s the dispatch stage's one dispatch is searched
    for the 65 s left before the merge's 15; at 95 s for the stage's floor (10 s), the overrun
    said; with no floor it is not tuned, and the budget says so."""
    from tuner.stages import time_budget
    from tuner.stages.base import ModelState
    from tuner.stages.builtin import DispatchStage
    from tuner.stages.time_budget import TimeBudget

    said: list[str] = []
    env, _, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said)
    seconds = []
    designed = DispatchStage.tune_or_say

    def recording(self, dispatch, outcome, program, target, env, source, seconds_given=None):
        seconds.append(seconds_given)
        return designed(self, dispatch, outcome, program, target, env, source)

    monkeypatch.setattr(DispatchStage, "tune_or_say", recording)
    clock = _Clock()
    budget = TimeBudget(100.0, clock=clock)
    clock.now = 20.0
    state = DispatchStage(budget=2, top=1).run(ModelState(), replace(env, budget=budget))
    [outcome] = state.dispatches
    # The stage reads the real clock twice: a little real time passes between the readings.
    assert outcome.status == "tuned" and seconds == [pytest.approx(65.0, abs=1.0)] and budget.undone == []
    clock.now = 95.0  # past the merge's reserve: the stage still gets its floor, 10 s, and the verdict says so
    state = DispatchStage(budget=2, top=1).run(ModelState(), replace(env, budget=budget))
    [outcome] = state.dispatches
    assert outcome.status == "tuned" and seconds[1] == pytest.approx(10.0, abs=1.0)
    assert budget.undone == ["keeping to the budget: the dispatch stage began with 0 s left of its share, and was given 10 s"]
    monkeypatch.setattr(time_budget, "DISPATCH_FLOOR", 0.0)  # no floor: nothing is tuned
    state = DispatchStage(budget=2, top=1).run(ModelState(), replace(env, budget=budget))
    [outcome] = state.dispatches
    assert outcome.status == "not tuned: the dispatch stage's 0 s were spent" and len(seconds) == 2
    assert budget.undone[-1] == f"tuning {outcome.name}"


@pytest.mark.slow
def test_a_choice_is_judged_without_tuning_what_it_forms_once_the_flag_stages_share_is_spent(tmp_path, ctx,
                                                                                             monkeypatch):
    """With time left, the matmul a choice forms is tuned before the choice is judged (as in the
    test above); with the flag stage's share of the budget spent, it is not, and the budget says so."""
    from tuner.stages.time_budget import TimeBudget

    said: list[str] = []
    env, program, tuned_names = _unit_batch_flag_env(tmp_path, ctx, monkeypatch, said, BIG_AND_TINY)
    clock = _Clock()
    budget = TimeBudget(100.0, clock=clock)
    budget.begin_flag_stage()
    clock.now = 50.0  # past the flag stage's 40 s
    parts = FlagStage(tune_budget=2, rewrite_tunes=2)._tuned_parts(replace(env, budget=budget), "spent",
                                                                    (DispatchKind.CONTRACTION,), program)
    assert parts == () and tuned_names == []
    [big] = [d.name for d in env.program.dispatches if d.kind == DispatchKind.CONTRACTION
             and d.flops == max(c.flops for c in env.program.dispatches)]
    assert budget.undone == [f"tuning {big} before judging spent"]
    clock.now = 10.0
    FlagStage(tune_budget=2, rewrite_tunes=2)._tuned_parts(replace(env, budget=budget), "in-time",
                                                           (DispatchKind.CONTRACTION,), program)
    assert tuned_names == [big]


@pytest.mark.slow
def test_joined_kernels_that_compute_another_result_are_tried_without_each_kernel_in_turn(tmp_path, monkeypatch):
    """Designed numerics and times: `k1+k2+k3` stands for the joined external kernels, and every
    build with `k2` computes another result (one kernel wrong on an export it was not written
    against). The joined option is refused; each of the three without one kernel is judged, and
    `k1+k3`, right and 0.5 ms against a 1.0 ms default, is kept, `k2`'s fault said."""
    import tuner.stages.flag_options as flag_options
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling
    from tests.test_tune_model import MLP
    from tuner.rewrite import combined
    from tuner.stages.flag_options import ModelOption

    kernels = [_marker(n) for n in ("k1", "k2", "k3")]
    monkeypatch.setattr(LLVMCPUDoubleTiling, "model_flags", ())
    monkeypatch.setitem(REWRITES, "cpu", tuple(kernels))
    monkeypatch.setattr(flag_options, "EXTERNAL", tuple(kernels))
    monkeypatch.setattr(flag_options, "external_together",
                        lambda env: [ModelOption((), combined(kernels), kernels=True)])

    _designed_numerics(monkeypatch, lambda name: "k2" in name.split("-", 1)[-1].split("+"), 0.9)
    timer = lambda vmfb, settings: Timing(({"flags-k1+k3": 0.5}.get(vmfb.parent.name, 1.0),))  # noqa: E731
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    said = []
    state = _flag_stage(model, tmp_path / "out", timer, say=said.append).state
    assert state.flag_trials["k1+k2+k3"] == "a different result (relative error 0.9)"
    assert state.flag_trials["k2+k3"] == state.flag_trials["k1+k2"] == "a different result (relative error 0.9)"
    assert state.rewrites == ("k1", "k3") and state.flag_trials["k1+k3"] == pytest.approx(2.0, rel=1e-3)
    assert any("k1+k2+k3: another result than the reference's; each of its kernels left out in turn" in line
               for line in said), said


def test_a_program_is_discovered_once_a_run_whichever_stage_asks_for_it(tmp_path, monkeypatch):
    """Falcon-7B's layer on the H200: the merge's carry-over discovered again the chosen program
    the dispatch stage had read (12 s of a 261 s run). Each program and flags is now read once a
    run, for the flag stage's formed dispatches and the stages after it alike."""
    from types import SimpleNamespace

    from tuner.stages import base
    from tuner.stages.base import RunCache, discovered_program
    from tuner.stages.flag_options import formed_dispatches
    from tuner.stages.ledger import Ledger

    asked = []

    def discover(program, target, ctx, flags=()):
        asked.append((program.name, flags))
        return SimpleNamespace(dispatches=[f"{program.name} {' '.join(flags)}"])

    monkeypatch.setattr(base, "discover_program", discover)
    env = SimpleNamespace(target=None, ctx=None, cache=RunCache(), ledger=Ledger())
    chosen, other = tmp_path / "chosen.mlir", tmp_path / "other.mlir"
    assert formed_dispatches(env, chosen, ("--x",)) == ("chosen.mlir --x",)  # the flag stage's
    assert discovered_program(env, chosen, ("--x",)).dispatches == ["chosen.mlir --x"]  # the dispatch stage's
    assert formed_dispatches(env, chosen, ("--x",)) == ("chosen.mlir --x",)  # the merge's carry-over
    formed_dispatches(env, chosen, ())
    formed_dispatches(env, other, ("--x",))
    assert asked == [("chosen.mlir", ("--x",)), ("chosen.mlir", ()), ("other.mlir", ("--x",))]
