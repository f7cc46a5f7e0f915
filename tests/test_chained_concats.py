"""The chain-concats rewrite (tuner.rewrite.chained_concats): a DenseNet block's concatenations of
growing lists become each the one before it and what it adds, the rest are left, the result is
the same, and for cuda IREE then copies in a dispatch or two a concatenation, not one an operand."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from tuner.rewrite import CHAIN_CONCATS, REWRITES
from tuner.rewrite.chained_concats import chain_concats


def _t(c: int) -> str:
    return f"!torch.vtensor<[2,{c},4,4],f16>"


def _concat(out: str, operands: list[tuple[str, int]], axis: int = 1) -> str:
    total = sum(c for _, c in operands)
    return (f'%{out} = torch.operator "onnx.Concat"({", ".join(n for n, _ in operands)}) {{torch.onnx.axis = {axis} : si64}} : '
            f'({", ".join(_t(c) for _, c in operands)}) -> {_t(total)}')


# A block's concatenations as the exporter writes them (x, then x with a, then x, a, b), one that
# takes the same features in another order, and one along another axis: only the third is chained.
PROGRAM = f"""
func.func @f(%x: {_t(8)}, %a: {_t(4)}, %b: {_t(4)}) -> ({_t(12)}, {_t(16)}, {_t(16)}, !torch.vtensor<[2,8,8,4],f16>) {{
  {_concat("c1", [("%x", 8), ("%a", 4)])}
  {_concat("c2", [("%x", 8), ("%a", 4), ("%b", 4)])}
  {_concat("c3", [("%a", 4), ("%x", 8), ("%b", 4)])}
  %c4 = torch.operator "onnx.Concat"(%x, %x) {{torch.onnx.axis = 2 : si64}} : ({_t(8)}, {_t(8)}) -> !torch.vtensor<[2,8,8,4],f16>
  return %c1, %c2, %c3, %c4 : {_t(12)}, {_t(16)}, {_t(16)}, !torch.vtensor<[2,8,8,4],f16>
}}
"""


def test_a_concatenation_that_extends_an_earlier_one_is_made_from_it_and_the_others_are_left():
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        assert chain_concats(module) == ["3 -> 2 operands, 2x16x4x4"]
        block = module.body.operations[0].regions[0].blocks[0]
        concats = [op for op in block.operations if op.name == "torch.operator"]
        first, chained = concats[0], concats[1]
        assert list(chained.operands) == [first.result, block.arguments[2]]
        # the reordered one and the other axis's keep their operands as written
        assert [len(op.operands) for op in concats] == [2, 2, 3, 2]


def test_it_is_offered_on_every_target():
    assert all(CHAIN_CONCATS in rewrites for rewrites in REWRITES.values())


def _dense_block(path: Path) -> None:
    """A DenseNet block of three layers as torch exports it (f32, batch 2): each layer a 3x3
    convolution of the concatenation of the block's input and every earlier layer's output."""
    from onnx import helper, numpy_helper

    from tests.conftest import save_onnx

    rng = np.random.default_rng(0)
    inits, nodes, features = [], [], ["x"]
    for i in range(3):
        channels = 8 + 4 * i
        inits.append(numpy_helper.from_array(rng.standard_normal((4, channels, 3, 3)).astype(np.float32), f"w{i}"))
        source = "x"
        if len(features) > 1:
            source = f"cat{i}"
            nodes.append(helper.make_node("Concat", list(features), [source], axis=1))
        nodes.append(helper.make_node("Conv", [source, f"w{i}"], [f"y{i}"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]))
        features.append(f"y{i}")
    nodes.append(helper.make_node("Concat", list(features), ["out"], axis=1))
    save_onnx(path, nodes, inits, [2, 8, 6, 6], ("out", [2, 20, 6, 6]))


@pytest.mark.slow
def test_a_chained_dense_block_computes_the_same_result_and_copies_less_often_for_cuda(tmp_path):
    pytest.importorskip("onnx")
    from tests.conftest import iree_compile, rewrite_matches_onnx
    from tuner.targets import parse_target

    _dense_block(tmp_path / "block.onnx")
    x = np.random.default_rng(1).standard_normal((2, 8, 6, 6)).astype(np.float32)
    changed, imported, chained = rewrite_matches_onnx(tmp_path / "block.onnx", CHAIN_CONCATS, x, tmp_path)
    assert changed == ["3 -> 2 operands, 2x16x6x6", "4 -> 2 operands, 2x20x6x6"]
    # for cuda: a copy dispatch per operand of each concatenation (2 + 3 + 4), then two each (2 +
    # 2 + 2); the block's other copies (the padded images) as they were
    cuda = parse_target("cuda")
    copies = {}
    for name, program in {"as exported": imported, "chained": chained}.items():
        dump = tmp_path / f"sources-{name}"
        iree_compile(str(program), *cuda.compile_flags, f"--iree-hal-dump-executable-sources-to={dump}",
                     "-o", str(tmp_path / f"{name}.vmfb"))
        copies[name] = sum("slow_memcpy" in p.read_text() for p in dump.glob("*.mlir"))
    assert copies["as exported"] - copies["chained"] == 3, copies


@pytest.mark.slow
def test_a_dense_block_has_in_place_copies_that_concatenations_made_outermost_remove_and_its_result_stays(
        tmp_path, ctx):
    """Discovery names the block's copies into slices (Program.in_place_copies, for which the flag
    stage offers OUTER_DIM_CONCAT); under the flag the cuda build has fewer of them, and the CPU
    build computes what onnx's reference evaluator does."""
    pytest.importorskip("onnx")
    import onnx
    from onnx.reference import ReferenceEvaluator

    from pipelines.model_flags import OUTER_DIM_CONCAT
    from tuner.discovery.program import discover_program
    from tuner.evaluation.runtime_tools import ModuleRun, read_output, run_once
    from tuner.input.models import program_source
    from tuner.targets import parse_target
    from tests.conftest import iree_compile

    _dense_block(tmp_path / "block.onnx")
    cuda, cpu = parse_target("cuda"), parse_target("llvm-cpu")
    imported = program_source(tmp_path / "block.onnx", tmp_path, cuda)
    copies = {flags: discover_program(imported, cuda, ctx, flags).in_place_copies for flags in ((), OUTER_DIM_CONCAT)}
    assert all("slow_memcpy" in name for name in copies[()]) and len(copies[()]) >= 9, copies
    assert len(copies[OUTER_DIM_CONCAT]) < len(copies[()]), copies
    x = np.random.default_rng(2).standard_normal((2, 8, 6, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    iree_compile(str(imported), *cpu.compile_flags, *OUTER_DIM_CONCAT, "-o", str(tmp_path / "outer.vmfb"))
    run = ModuleRun("local-task", onnx.load(tmp_path / "block.onnx").graph.name, (tmp_path / "x.npy",), outputs=1,
                    checked=0)
    assert run_once(tmp_path / "outer.vmfb", run, tmp_path / "y.npy").ok
    expected = ReferenceEvaluator(str(tmp_path / "block.onnx")).run(None, {"x": x})[0]
    np.testing.assert_allclose(read_output(tmp_path / "y.npy", run), expected, rtol=1e-4, atol=1e-4)
