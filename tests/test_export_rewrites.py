"""The model rewrites on real exports (tests/fixtures/exports: transformers and torchvision modules
exported by torch.onnx's dynamo exporter at a tiny size): which sites each rewrite takes in each
family and which it leaves, what it declines in the exporter's own form, that IREE then forms the
dispatches the rewrite is for (2-D matmuls and no broadcast weight; one attention dispatch and
no softmax), and that each rewritten model computes what the export computed (llvm-cpu against
the unrewritten build and against torch eager's output)."""

from pathlib import Path

import numpy as np
import pytest
from iree.compiler import ir

from pipelines import DispatchKind
from tests.conftest import iree_compile
from tuner.rewrite import ND_LINEAR_AS_MATMUL, RAISE_ATTENTION, REWRITES, combined, rewrite_program
from tuner.rewrite.attention import find_attention, raise_attention
from tuner.rewrite.nd_linear import nd_linears_as_matmuls
from tuner.rewrite.sibling_linears import fuse_sibling_linears
from tuner.rewrite.torch_ops import ONNX_OP, onnx_sites, static_shape
from tuner.targets import parse_target

EXPORTS = Path(__file__).parent / "fixtures" / "exports"
FAMILIES = ("llama", "qwen2", "bert", "vit", "whisper", "swin", "convnext")


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Path]:
    """Each export imported as the tuner imports an ONNX model (iree-import-onnx)."""
    pytest.importorskip("onnx")
    from tuner.input.models import program_source

    root = tmp_path_factory.mktemp("exports")
    return {name: program_source(EXPORTS / name / "model.onnx", root / name, parse_target("llvm-cpu"))
            for name in FAMILIES}


def _applied(program: Path, rewrite) -> tuple[list[str], list[str]]:
    """What `rewrite` changes in the program, and the onnx op names of the rewritten function."""
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(program.read_text())
        changed = rewrite(module)
        ops = []

        def visit(op):
            if op.name == ONNX_OP:
                ops.append(ir.StringAttr(op.attributes["name"]).value.removeprefix("onnx."))
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    return changed, ops


# The tiny configs of benchmarks/torch_exports.py: ConvNeXt's two stages (16 then 32 channels,
# 8x8 then 4x4 pixels, MLPs 4x wide, batch 2); Swin's patch merging adds a 64 -> 32 linear.
ND_LINEARS = {
    "convnext": ["2x8x8x16 by 16x64", "2x8x8x64 by 64x16", "2x4x4x32 by 32x128", "2x4x4x128 by 128x32"],
    "swin": ["2x8x8x16 by 16x64", "2x8x8x64 by 64x16", "2x4x4x64 by 64x32", "2x4x4x32 by 32x128",
             "2x4x4x128 by 128x32"],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_nd_linear_takes_the_rank_4_linears_of_each_family_and_leaves_rank_3_ones(imported, family):
    changed, ops = _applied(imported[family], nd_linears_as_matmuls)
    assert changed == ND_LINEARS.get(family, [])
    if changed:  # each MatMul taken reads a Reshape of its activation and is read by a Reshape back
        assert ops.count("Reshape") >= 2 * len(changed)


# batch x heads x queries x keys x head dim x value head dim, per attention of each export: the
# decoders' 4 query heads over 2 KV heads (repeated by the export), BERT's two layers, ViT's 16
# patches and a class token, Swin's 8 windows of 16 tokens (2 heads) then 2 windows (4 heads).
ATTENTIONS = {
    # BERT's and ViT's exports (no attention_mask given) add a constant mask of zeros: dropped
    "llama": ["1x4x16x16x16x16"], "qwen2": ["1x4x16x16x16x16"], "bert": ["1x4x16x16x16x16 (a zero mask dropped)"] * 2,
    "vit": ["2x4x17x17x16x16 (a zero mask dropped)"], "whisper": ["1x4x16x16x16x16"], "swin": ["8x2x16x16x8x8", "2x4x16x16x8x8"],
    "convnext": [],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_raise_attention_takes_every_attention_the_exporter_writes_and_leaves_no_softmax(imported, family):
    changed, ops = _applied(imported[family], raise_attention)
    assert changed == ATTENTIONS[family]
    assert "Softmax" not in ops and "IsNaN" not in ops
    if family in ("llama", "qwen2", "bert", "vit"):  # the SDPA guard gone; the mask still added by the op
        assert "Where" not in ops


@pytest.mark.parametrize("family, masked", [("llama", True), ("bert", False), ("vit", False)])
def test_a_mask_of_constant_zeros_is_dropped_and_a_causal_mask_is_kept(imported, family, masked):
    from tuner.rewrite.attention import SDPA
    from tuner.rewrite.torch_ops import producer, zero_constant

    with ir.Context():
        module = ir.Module.parse(imported[family].read_text())
        [site] = find_attention(module)[:1]
        assert zero_constant(site.mask_value) != masked  # the export's own mask, read from its blob
        raise_attention(module)
        masks = []

        def visit(op):
            if op.name == SDPA:
                masks.append(producer(op.operands[3]).name)
            return ir.WalkResult.ADVANCE

        module.operation.walk(visit)
    assert masks and all((name != "torch.constant.none") == masked for name in masks)


# The tiny exports' linear layers that read one activation: each layer's Q, K and V (biased in
# BERT, ViT and Whisper, Whisper's key without one; GQA's narrower K and V in Llama and Qwen2), and
# the gated MLP's gate and up projections; Swin's QKV is one Linear already, ConvNeXt has none.
SIBLINGS = {
    "bert": ["1x16x64 by 64x64 + 64x64 + 64x64"] * 2,
    "llama": ["1x16x64 by 64x64 + 64x32 + 64x32", "1x16x64 by 64x160 + 64x160"],
    "qwen2": ["1x16x64 by 64x64 + 64x32 + 64x32", "1x16x64 by 64x160 + 64x160"],
    "vit": ["2x17x64 by 64x64 + 64x64 + 64x64"],
    "whisper": ["1x16x64 by 64x64 + 64x64 + 64x64"],
    "swin": [], "convnext": [],
}


@pytest.mark.parametrize("family", FAMILIES)
def test_sibling_linears_are_joined_into_one_matmul_per_group_with_their_biases_where_all_have_one(imported, family):
    before = _applied(imported[family], lambda m: [])[1]
    changed, ops = _applied(imported[family], fuse_sibling_linears)
    assert changed == SIBLINGS[family]
    joined = sum(len(c.split(" + ")) for c in changed)
    assert ops.count("MatMul") == before.count("MatMul") - joined + len(changed)
    assert ops.count("Slice") - before.count("Slice") == joined
    # Biases joined where every sibling has one: BERT's and ViT's Adds go from three to one a group.
    if family in ("bert", "vit"):
        assert before.count("Add") - ops.count("Add") == 2 * len(changed)
        # Q, K and V split into heads: the product is split once and each one sliced by whole heads.
        assert before.count("Reshape") - ops.count("Reshape") == 2 * len(changed)
    if family == "whisper":  # the key projection has no bias: each Add stays after its slice
        assert ops.count("Add") == before.count("Add")


def test_nd_linear_is_offered_first_everywhere_and_raise_attention_only_where_a_pipeline_tunes_attention(ctx):
    from pipelines import pipeline_for
    from tests.conftest import SAMPLES
    from tuner.discovery.program import discover

    for kind in ("cpu", "gpu"):
        assert REWRITES[kind][0].name == "nd-linear-as-matmul"
    assert ND_LINEAR_AS_MATMUL.tunes == (DispatchKind.CONTRACTION,)
    # Its attention is tuned on a GPU; on the CPU no pipeline takes one, so it is not tried there.
    assert "raise-attention" in [r.name for r in REWRITES["gpu"]]
    assert "raise-attention" not in [r.name for r in REWRITES["cpu"]]
    # Joined sibling linears are for the mma.sync kernel (cuda's model pipeline), which takes one
    # matmul, not several sharing A; judged with the matmul they form tuned.
    from tuner.rewrite import JOIN_SIBLING_LINEARS
    assert JOIN_SIBLING_LINEARS in REWRITES["gpu"] and JOIN_SIBLING_LINEARS not in REWRITES["cpu"]
    assert JOIN_SIBLING_LINEARS.tunes == (DispatchKind.CONTRACTION,)
    for target, taken in (("llvm-cpu", False), ("cuda", True)):
        [attention] = discover(SAMPLES / "attention_8x1024x1024x64_f16.mlir", parse_target(target), ctx)
        assert (pipeline_for(attention) is not None) == taken, target


# The dynamo exporter's SDPA, as the Llama export writes it (4 query heads, keys flattened to
# [4, s, d] and transposed, sqrt(scale) on Q and on K^T, a causal mask, the NaN guard).
def _sdpa(guard_reads: str = "%p", extra_result: bool = False, kt_perm: str = "0 : si64, 2 : si64, 1 : si64",
          flat: str = "4,16,8") -> str:
    t = "!torch.vtensor<[1,4,16,8],f32>"
    s = "!torch.vtensor<[1,4,16,16],f32>"
    extra = (", %p", f", {s}") if extra_result else ("", "")
    return f"""
func.func @f(%q: {t}, %k: {t}, %v: {t}, %mask: !torch.vtensor<[1,1,16,16],f32>, %c: !torch.vtensor<[],f32>,
             %zero: !torch.vtensor<[],f32>) -> ({t}{extra[1]}) {{
  %shape3 = torch.vtensor.literal(dense<[4, 16, 8]> : tensor<3xsi64>) : !torch.vtensor<[3],si64>
  %shape4 = torch.vtensor.literal(dense<[1, 4, 8, 16]> : tensor<4xsi64>) : !torch.vtensor<[4],si64>
  %k3 = torch.operator "onnx.Reshape"(%k, %shape3) : ({t}, !torch.vtensor<[3],si64>) -> !torch.vtensor<[{flat}],f32>
  %kt3 = torch.operator "onnx.Transpose"(%k3) {{torch.onnx.perm = [{kt_perm}]}} : (!torch.vtensor<[{flat}],f32>) -> !torch.vtensor<[4,8,16],f32>
  %kt = torch.operator "onnx.Reshape"(%kt3, %shape4) : (!torch.vtensor<[4,8,16],f32>, !torch.vtensor<[4],si64>) -> !torch.vtensor<[1,4,8,16],f32>
  %qs = torch.operator "onnx.Mul"(%q, %c) : ({t}, !torch.vtensor<[],f32>) -> {t}
  %kts = torch.operator "onnx.Mul"(%kt, %c) : (!torch.vtensor<[1,4,8,16],f32>, !torch.vtensor<[],f32>) -> !torch.vtensor<[1,4,8,16],f32>
  %scores = torch.operator "onnx.MatMul"(%qs, %kts) : ({t}, !torch.vtensor<[1,4,8,16],f32>) -> {s}
  %masked = torch.operator "onnx.Add"(%scores, %mask) : ({s}, !torch.vtensor<[1,1,16,16],f32>) -> {s}
  %p = torch.operator "onnx.Softmax"(%masked) {{torch.onnx.axis = -1 : si64}} : ({s}) -> {s}
  %nan = torch.operator "onnx.IsNaN"({guard_reads}) : ({s}) -> !torch.vtensor<[1,4,16,16],i1>
  %g = torch.operator "onnx.Where"(%nan, %zero, %p) : (!torch.vtensor<[1,4,16,16],i1>, !torch.vtensor<[],f32>, {s}) -> {s}
  %o = torch.operator "onnx.MatMul"(%g, %v) : ({s}, {t}) -> {t}
  return %o{extra[0]} : {t}{extra[1]}
}}
"""


def _sdpa_sites(text: str) -> list[str]:
    with ir.Context() as c:
        c.allow_unregistered_dialects = True
        module = ir.Module.parse(text)  # held while the sites' ops are read
        return [s.shape for s in find_attention(module)]


def test_the_exporters_sdpa_form_is_raised_and_what_breaks_it_is_declined():
    assert _sdpa_sites(_sdpa()) == ["1x4x16x16x8x8"]
    # The probabilities read by something else (here returned): the softmax must stay.
    assert _sdpa_sites(_sdpa(extra_result=True)) == []
    # A guard that tests another tensor than the one it passes on is not SDPA's guard.
    assert _sdpa_sites(_sdpa(guard_reads="%masked")) == []
    # The flattened keys not transposed (perm 0, 1, 2 with a [4, 8, 16] reshape): not K^T.
    assert _sdpa_sites(_sdpa(kt_perm="0 : si64, 1 : si64, 2 : si64", flat="4,8,16").replace(
        "dense<[4, 16, 8]>", "dense<[4, 8, 16]>")) == []


def _cpu_output(program: Path, inputs: Path, tmp_path: Path) -> np.ndarray:
    from tuner.evaluation.runtime_tools import ModuleRun, run_once

    vmfb = tmp_path / f"{program.stem}.vmfb"
    iree_compile(str(program), *parse_target("llvm-cpu").compile_flags, "-o", str(vmfb))
    run = run_once(vmfb, ModuleRun("local-task", "main_graph", (inputs,)), tmp_path / f"{program.stem}.npy")
    assert run.ok, run.stderr
    return np.load(tmp_path / f"{program.stem}.npy").astype(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("family", ("bert", "whisper"))
def test_sibling_linears_joined_compute_what_the_export_and_torch_computed(imported, family, tmp_path):
    """BERT (every bias joined) and Whisper (a key without a bias: the Adds stay after the
    slices): the joined program's output on llvm-cpu equals the export's and torch's."""
    rewritten = tmp_path / "joined.mlir"
    from tuner.rewrite import JOIN_SIBLING_LINEARS
    assert rewrite_program(imported[family], JOIN_SIBLING_LINEARS, rewritten) == SIBLINGS[family]
    _assert_computes_what_the_export_and_torch_computed(imported[family], rewritten, family, tmp_path)


def _assert_computes_what_the_export_and_torch_computed(program: Path, rewritten: Path, family: str, tmp_path: Path):
    """The rewritten program's output on llvm-cpu equals the export's and torch's (f32
    throughout: the same sums, at most in another order, as the attention op's online softmax)."""
    inputs = EXPORTS / family / "input0.npy"
    before, after = _cpu_output(program, inputs, tmp_path), _cpu_output(rewritten, inputs, tmp_path)
    torch_output = np.load(EXPORTS / family / "torch_output0.npy")
    scale = float(np.abs(torch_output).max())
    assert scale > 0.01
    np.testing.assert_allclose(after, before, rtol=0, atol=2e-6 * scale)
    np.testing.assert_allclose(after, torch_output, rtol=0, atol=5e-6 * scale)


@pytest.mark.slow
@pytest.mark.parametrize("family", ("llama", "bert", "vit", "swin", "convnext"))
def test_each_rewritten_export_computes_what_the_export_and_torch_computed(imported, family, tmp_path):
    rewritten = tmp_path / "rewritten.mlir"
    changed = rewrite_program(imported[family], combined([ND_LINEAR_AS_MATMUL, RAISE_ATTENTION]), rewritten)
    assert changed == ND_LINEARS.get(family, []) + ATTENTIONS[family]
    _assert_computes_what_the_export_and_torch_computed(imported[family], rewritten, family, tmp_path)


@pytest.mark.slow
def test_iree_forms_2d_matmuls_without_a_broadcast_weight_and_one_attention_dispatch(imported, tmp_path, ctx):
    from tuner.discovery.program import discover_program

    cuda = parse_target("cuda:sm_80")
    convnext = tmp_path / "convnext.mlir"
    rewrite_program(imported["convnext"], ND_LINEAR_AS_MATMUL, convnext)
    before = [d.name for d in discover_program(imported["convnext"], cuda, ctx).dispatches]
    after = [d.name for d in discover_program(convnext, cuda, ctx).dispatches]
    assert any("batch_matmul_16x8x64x16" in n for n in before), before
    assert any("_matmul_128x64x16_" in n for n in after) and not any("batch_matmul" in n for n in after), after
    llama = tmp_path / "llama.mlir"
    rewrite_program(imported["llama"], RAISE_ATTENTION, llama)
    program = discover_program(llama, cuda, ctx)
    assert [d.kind for d in program.dispatches].count(DispatchKind.ATTENTION) == 1
    assert not any("softmax" in kind.kind for kind in program.other_kinds.values())


def test_a_softmax_without_an_axis_is_read_by_its_opset():
    # ONNX Softmax's default axis is -1 from opset 13 on and 1 before: over a rank-4 score the
    # default of opset 12 is not an attention's softmax (issue 60, minor).
    text = _sdpa().replace(" {torch.onnx.axis = -1 : si64}", "")

    def at(opset: int) -> str:
        return text.replace("%zero: !torch.vtensor<[],f32>) -> (", "%zero: !torch.vtensor<[],f32>) -> (", 1).replace(
            "{\n  %shape3", f"attributes {{torch.onnx_meta.opset_version = {opset} : si64}} {{\n  %shape3", 1)

    assert "opset_version = 12" in at(12)
    assert _sdpa_sites(at(20)) == ["1x4x16x16x8x8"] and _sdpa_sites(text) == ["1x4x16x16x8x8"]
    assert _sdpa_sites(at(12)) == []


def _three_linears(path: Path) -> tuple[Path, np.ndarray, list[np.ndarray]]:
    """An ONNX graph of three linear layers reading one activation X[1, 4, 8]: widths 8 (split
    into 2 heads of 4 after it), 8 (into 4 heads of 2) and 6 (no split); its input and numpy's
    outputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4, 8)).astype(np.float32)
    weights = [rng.standard_normal((8, w)).astype(np.float32) for w in (8, 8, 6)]
    heads = [[1, 4, 2, 4], [1, 4, 4, 2], None]
    nodes, inits, outputs, expected = [], [], [], []
    for i, (w, split) in enumerate(zip(weights, heads)):
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}" if split else f"y{i}"]))
        product = x @ w
        if split:
            inits.append(numpy_helper.from_array(np.array(split, np.int64), f"s{i}"))
            nodes.append(helper.make_node("Reshape", [f"m{i}", f"s{i}"], [f"y{i}"]))
            product = product.reshape(split)
        outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, list(product.shape)))
        expected.append(product)
    graph = helper.make_graph(nodes, "three", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8])],
                              outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path, x, expected


@pytest.mark.slow
def test_joined_linears_split_into_heads_of_different_sizes_or_not_at_all_compute_what_numpy_does(tmp_path):
    """Each result is sliced from the product by its own form: whole heads of 4, whole heads of 2
    (the product split twice), plain columns; on llvm-cpu all three equal numpy's products."""
    pytest.importorskip("onnx")
    from tuner.input.models import program_source
    from tuner.rewrite import JOIN_SIBLING_LINEARS

    model, x, expected = _three_linears(tmp_path / "three.onnx")
    program = program_source(model, tmp_path / "imported", parse_target("llvm-cpu"))
    joined = tmp_path / "joined.mlir"
    assert rewrite_program(program, JOIN_SIBLING_LINEARS, joined) == ["1x4x8 by 8x8 + 8x8 + 8x6"]
    text = joined.read_text()
    # Heads of 2 over all 22 columns; 22 is no multiple of 4, so the first result is plain columns.
    assert "[1,4,11,2]" in text and "[1,4,5,4]" not in text
    vmfb = tmp_path / "joined.vmfb"
    iree_compile(str(joined), *parse_target("llvm-cpu").compile_flags, "-o", str(vmfb))
    import iree.runtime as rt

    config = rt.Config("local-task")
    ctx = rt.SystemContext(config=config)
    ctx.add_vm_module(rt.VmModule.mmap(ctx.instance, str(vmfb)))
    results = ctx.modules.module["three"](x)
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(np.asarray(got.to_host()), want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("family, epilogues", [
    # ViT: every linear has a bias; the MLP's first is followed by GELU (q, k, v, out, up, down)
    ("vit", [("bias",)] * 4 + [("bias", "gelu"), ("bias",)]),
    # Llama: no linear has a bias; the MLP's gate is followed by SiLU (x * Sigmoid(x)), which the
    # kernel takes (q, k, v, o, gate, up, down)
    ("llama", [()] * 4 + [("silu",), (), ()]),
])
def test_the_fused_gemm_kernel_takes_each_linears_bias_and_gelu_as_the_export_writes_them(imported, family, epilogues):
    from tuner.rewrite.external_gemm import epilogue_of

    with ir.Context():
        module = ir.Module.parse(imported[family].read_text())
        linears = [op for op in onnx_sites(module, "MatMul", lambda op: len(static_shape(op.operands[1]) or []) == 2)]
        assert [epilogue_of(op)[1] for op in linears] == epilogues

