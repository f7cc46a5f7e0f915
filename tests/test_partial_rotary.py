"""A rotary embedding on part of each head as one elementwise product over the whole head
(tuner.rewrite.partial_rotary), on real tiny exports (f16): Phi-2's (8 of 16 head dims rotated)
and GPT-NeoX's (4 of 16), each rewritten for Q and K with no concatenation along the head left;
Llama's full rotary left alone; and (slow) the rewritten Phi computing bit for bit what the
export computed, on llvm-cpu."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tests.conftest import EXPORTS, imported_exports, iree_compile
from tuner.evaluation.runtime_tools import ModuleRun, run_once
from tuner.rewrite import FUSE_PARTIAL_ROTARY, REWRITES, rewrite_program
from tuner.rewrite.partial_rotary import fuse_partial_rotaries
from tuner.targets import parse_target



@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    return imported_exports(tmp_path_factory, "phi", "gptneox", "llama")


def _rewritten(program: Path) -> tuple[list[str], str]:
    with ir.Context():
        module = ir.Module.parse(program.read_text())
        done = fuse_partial_rotaries(module)
        return done, str(module)


def _head_concats(text: str) -> int:
    """onnx.Concat ops along the last axis of a rank-4 (batch, heads, tokens, head) tensor."""
    return sum(1 for line in text.splitlines() if '"onnx.Concat"' in line and "axis = -1" in line
               and line.rsplit("->", 1)[-1].count(",") == 4)


@pytest.mark.parametrize("name, rotated", [("phi", "8 of 16"), ("gptneox", "4 of 16")])
def test_a_partial_rotary_on_q_and_k_becomes_one_gather_and_product_over_the_whole_head(imported, name, rotated):
    before = imported[name].read_text()
    assert _head_concats(before) == 4  # rotate-half and the pass-through, for Q and for K
    done, text = _rewritten(imported[name])
    assert done == [f"{rotated} rotated, 1x4x16x16"] * 2
    assert _head_concats(text) == 0 and text.count('"onnx.Gather"') == before.count('"onnx.Gather"') + 2
    assert text.count('"onnx.Neg"') == 2  # the sin table's first half negated, for Q and K; X's slices gone


def test_a_rotary_over_the_whole_head_is_left_as_it_is(imported):
    done, _ = _rewritten(imported["llama"])
    assert done == []


def test_the_rotary_rewrite_is_offered_on_gpus_alone():
    assert FUSE_PARTIAL_ROTARY in REWRITES["gpu"] and FUSE_PARTIAL_ROTARY not in REWRITES["cpu"]


@pytest.mark.slow
def test_the_rewritten_phi_computes_bit_for_bit_what_the_export_computes_on_llvm_cpu(imported, tmp_path):
    cpu = parse_target("llvm-cpu")
    rewritten = tmp_path / "rotary.mlir"
    assert rewrite_program(imported["phi"], FUSE_PARTIAL_ROTARY, rewritten)
    outputs = []
    for program in (imported["phi"], rewritten):
        vmfb = tmp_path / f"{program.stem}.vmfb"
        iree_compile(program, *cpu.compile_flags, "-o", vmfb)
        run = run_once(vmfb, ModuleRun("local-task", "main_graph", (EXPORTS / "phi" / "input0.npy",)),
                       tmp_path / f"{program.stem}.npy")
        assert run.ok, run.stderr
        outputs.append(np.load(tmp_path / f"{program.stem}.npy"))
    assert np.array_equal(outputs[0], outputs[1])
    torch_out = np.load(EXPORTS / "phi" / "torch_output0.npy").astype(np.float32)
    assert np.abs(outputs[1].astype(np.float32) - torch_out).max() / np.abs(torch_out).max() < 2e-3
