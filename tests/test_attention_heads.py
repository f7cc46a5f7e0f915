"""Attention heads IREE 3.13 cannot lay out on GPUs (Stable Diffusion 1.x's 40): the attention
pipeline declines them, and the GPU's raise-attention pads them to a power of two, exactly."""

import numpy as np
import pytest
from iree.compiler import ir

from pipelines import DispatchKind, pipeline_for
from pipelines.registry import why_untunable
from pipelines.llvmgpu_vector_distribute_attention import lays_out
from tests.conftest import iree_compile, onnx_examples
from tuner.build.builder import LocalBuilder, build_all
from tuner.discovery.program import discover_program
from tuner.evaluation.runtime_tools import ModuleRun, relative_error, run_once
from tuner.input.models import program_source
from tuner.rewrite import RAISE_ATTENTION, REWRITES, rewrite_program
from tuner.rewrite.attention import padded_width, raise_attention
from tuner.specs.candidates import generate_candidates
from tuner.targets import parse_target

HEAD_40 = """
func.func @f(%q: !torch.vtensor<[1,2,8,40],f16>, %k0: !torch.vtensor<[1,8,2,40],f16>, %v: !torch.vtensor<[1,2,8,40],f16>,
             %c: !torch.vtensor<[],f16>) -> !torch.vtensor<[1,2,8,40],f16> {
  %kt = torch.operator "onnx.Transpose"(%k0) {torch.onnx.perm = [0 : si64, 2 : si64, 3 : si64, 1 : si64]} : (!torch.vtensor<[1,8,2,40],f16>) -> !torch.vtensor<[1,2,40,8],f16>
  %s = torch.operator "onnx.MatMul"(%q, %kt) : (!torch.vtensor<[1,2,8,40],f16>, !torch.vtensor<[1,2,40,8],f16>) -> !torch.vtensor<[1,2,8,8],f16>
  %t = torch.operator "onnx.Mul"(%s, %c) : (!torch.vtensor<[1,2,8,8],f16>, !torch.vtensor<[],f16>) -> !torch.vtensor<[1,2,8,8],f16>
  %p = torch.operator "onnx.Softmax"(%t) {torch.onnx.axis = -1 : si64} : (!torch.vtensor<[1,2,8,8],f16>) -> !torch.vtensor<[1,2,8,8],f16>
  %o = torch.operator "onnx.MatMul"(%p, %v) : (!torch.vtensor<[1,2,8,8],f16>, !torch.vtensor<[1,2,8,40],f16>) -> !torch.vtensor<[1,2,8,40],f16>
  return %o : !torch.vtensor<[1,2,8,40],f16>
}
"""


def test_promoted_tiles_lay_out_only_in_whole_vectors_over_lanes_that_divide_a_subgroup_or_fill_whole_ones():
    # f16: a row of 64 is 128 bytes, 8 lanes of 16 bytes, which divide 32; 48 is 6 lanes, 80 is
    # 10, 96 is 12 (every config of those failed to compile on cuda); 40 is 80 bytes, 5 vectors;
    # 512 is 64 lanes, two whole subgroups of cuda's 32 (its configs compile: the test below).
    assert [w for w in (16, 32, 40, 48, 64, 80, 96, 128, 256, 384, 512) if lays_out(w, 2, 32)] == [
        16, 32, 64, 128, 256, 512]
    assert lays_out(32, 4, 32) and not lays_out(24, 4, 32)  # f32: 8 lanes; 6 lanes
    assert lays_out(512, 2, 64) and not lays_out(384, 2, 64)  # 64 lanes are rocm's subgroup; 48 neither way
    assert [padded_width(w) for w in (8, 16, 40, 48, 64, 80, 96, 128, 160)] == [16, 16, 64, 64, 64, 128, 128, 128, 256]


def test_the_gpu_rewrite_pads_a_head_of_40_to_64_and_slices_the_result_back_the_cpu_one_does_not():
    gpu = next(r for r in REWRITES["gpu"] if r.name == "raise-attention")
    with ir.Context():
        module = ir.Module.parse(HEAD_40)
        assert gpu.apply(module) == ["1x2x8x8x40x40 (heads 40/40 padded to 64/64)"]
        lines = str(module).splitlines()
    sdpa = next(line for line in lines if "scaled_dot_product_attention" in line)
    pads = [line for line in lines if "onnx.Pad" in line]
    sliced = next(line for line in lines if "onnx.Slice" in line)
    # Q (scaled), K (transposed back) and V each padded at the end of the head dim, 24 zeros
    assert len(pads) == 3 and all(line.rstrip().endswith(",64],f16>") for line in pads)
    assert all(line.split("=")[0].strip() in sdpa for line in pads)
    assert "-> !torch.vtensor<[1,2,8,64],f16>" in sdpa
    assert sdpa.split("=")[0].strip() in sliced and sliced.rstrip().endswith("[1,2,8,40],f16>")
    assert any("return" in line and sliced.split("=")[0].strip() in line for line in lines)
    with ir.Context():
        module = ir.Module.parse(HEAD_40)
        assert raise_attention(module) == ["1x2x8x8x40x40"] and "onnx.Pad" not in str(module)


def _sd15_style(tmp_path, target):
    """An SD 1.x-style attention block, small: 2 heads of 40, a cross-attention over 77 tokens."""
    pytest.importorskip("onnx")
    import onnx

    onnx.save(onnx_examples().unet_attention_block(batch=1, channels=80, size=8, heads=2, context=77, context_dim=32),
              tmp_path / "sd15.onnx")
    return program_source(tmp_path / "sd15.onnx", tmp_path, parse_target(target))


@pytest.mark.slow
def test_padded_heads_compute_the_spelled_out_attention_on_llvm_cpu(tmp_path):
    imported = _sd15_style(tmp_path, "llvm-cpu")
    gpu = next(r for r in REWRITES["gpu"] if r.name == "raise-attention")
    padded = tmp_path / "padded.mlir"
    assert rewrite_program(imported, gpu, padded) == [
        "1x2x64x64x40x40 (heads 40/40 padded to 64/64)", "1x2x64x77x40x40 (heads 40/40 padded to 64/64)"]
    rng = np.random.default_rng(0)
    inputs = (tmp_path / "x.npy", tmp_path / "context.npy")
    np.save(inputs[0], rng.standard_normal((1, 80, 8, 8)).astype(np.float16))
    np.save(inputs[1], rng.standard_normal((1, 77, 32)).astype(np.float16))
    outputs = {}
    for name, program in (("spelled", imported), ("padded", padded)):
        iree_compile(str(program), *parse_target("llvm-cpu").compile_flags, "-o", str(tmp_path / f"{name}.vmfb"))
        run = run_once(tmp_path / f"{name}.vmfb", ModuleRun("local-task", "unet_attention_block", inputs),
                       tmp_path / f"{name}.npy")
        assert run.ok, run.stderr
        outputs[name] = np.load(tmp_path / f"{name}.npy").astype(np.float32)
    assert relative_error(outputs["padded"], outputs["spelled"]) < 1e-3


@pytest.mark.slow
def test_a_head_of_40_is_declined_unpadded_and_its_padded_attentions_configs_compile_and_take_on_cuda(tmp_path):
    cuda = parse_target("cuda:sm_80")
    imported = _sd15_style(tmp_path, "cuda:sm_80")
    with ir.Context() as ctx:
        plain, padded = tmp_path / "plain.mlir", tmp_path / "padded.mlir"
        rewrite_program(imported, RAISE_ATTENTION, plain)
        rewrite_program(imported, next(r for r in REWRITES["gpu"] if r.name == "raise-attention"), padded)
        unpadded = [d for d in discover_program(plain, cuda, ctx).dispatches if d.kind == DispatchKind.ATTENTION]
        assert len(unpadded) == 2 and all(pipeline_for(d) is None for d in unpadded)
        assert all(why_untunable(d).startswith("a head dim of 40") for d in unpadded)
        attentions = [d for d in discover_program(padded, cuda, ctx).dispatches if d.kind == DispatchKind.ATTENTION]
        assert len(attentions) == 2
        cross = next(d for d in attentions if 77 in d.loop_bounds)
        candidates = generate_candidates(cross, pipeline_for(cross), 3, ctx, cuda.spec_entry)
        built = build_all(LocalBuilder.of(padded, cuda, tmp_path / "c", ctx), candidates)
    assert len(built) == 4 and {b.result.label: b.result.error for b in built if not b.result.ok} == {}


@pytest.mark.slow
def test_a_single_head_of_512_as_in_a_vae_is_tunable_and_its_configs_compile_and_take_on_cuda(tmp_path):
    """A VAE mid-block's attention: one head as wide as its 512 channels, 64 lanes a row (two
    subgroups of 32). It was declined by a rule that asked the lanes to divide a subgroup;
    compiled, its configs take."""
    pytest.importorskip("onnx")
    import onnx

    cuda = parse_target("cuda:sm_80")
    onnx.save(onnx_examples().unet_attention_block(batch=1, channels=512, size=8, heads=1, context=77,
                                                   context_dim=32), tmp_path / "vae.onnx")
    imported = program_source(tmp_path / "vae.onnx", tmp_path, cuda)
    raised = tmp_path / "raised.mlir"
    rewrite_program(imported, next(r for r in REWRITES["gpu"] if r.name == "raise-attention"), raised)
    with ir.Context() as ctx:
        attentions = [d for d in discover_program(raised, cuda, ctx).dispatches if d.kind == DispatchKind.ATTENTION]
        assert len(attentions) == 2 and all(pipeline_for(d) is not None for d in attentions)
        itself = next(d for d in attentions if 77 not in d.loop_bounds)
        candidates = generate_candidates(itself, pipeline_for(itself), 3, ctx, cuda.spec_entry)
        built = build_all(LocalBuilder.of(raised, cuda, tmp_path / "c", ctx), candidates)
    assert len(built) == 4 and {b.result.label: b.result.error for b in built if not b.result.ok} == {}
