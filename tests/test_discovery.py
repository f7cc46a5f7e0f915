"""Discovery through the bindings: root ops, kinds, shapes, types, target and default config."""


from pathlib import Path

import pytest

from tuner.api import select_dispatch
from tuner.discovery.program import discover, discover_program, parse_input
from tuner.errors import InputError
from tests.conftest import SAMPLES


def test_matmul_1024(ctx, cpu):
    [d] = discover(SAMPLES / "matmul_1024x1024x1024_f32.mlir", cpu, ctx)
    assert d.op_name == "linalg.matmul"
    assert d.loop_bounds == (1024, 1024, 1024)
    assert (d.batch_dims, d.m_dims, d.n_dims, d.k_dims) == ((), (0,), (1,), (2,))
    assert (d.lhs_type, d.rhs_type, d.out_type) == ("f32", "f32", "f32")
    assert d.target.backend == "llvm-cpu"
    assert d.target.native_vector_bytes in (16, 32, 64)
    assert "DoubleTilingExpert" in d.default.pipeline
    assert d.default.lowering_config.startswith("#iree_cpu.lowering_config<distribution")


def test_transposed_rhs_keeps_its_indexing_map(ctx, cpu):
    [d] = discover(SAMPLES / "matmul_transpose_b_512x2048x768_f32.mlir", cpu, ctx)
    assert d.indexing_maps[1] == "(d0, d1, d2) -> (d1, d2)"
    assert d.sizes(d.m_dims) == (512,) and d.sizes(d.n_dims) == (2048,) and d.sizes(d.k_dims) == (768,)


def test_batch_matmul_and_generic(ctx, cpu):
    [b] = discover(SAMPLES / "batch_matmul_8x256x512x384_f32.mlir", cpu, ctx)
    assert b.op_name == "linalg.batch_matmul" and b.sizes(b.batch_dims) == (8,)
    [g] = discover(SAMPLES / "generic_contraction_bias_relu_384x1000x1200_f32.mlir", cpu, ctx)
    assert g.op_name == "linalg.generic" and g.loop_bounds == (384, 1000, 1200)


def test_workload_reads_the_entry_signature(ctx, cpu):
    path = SAMPLES / "generic_contraction_bias_relu_384x1000x1200_f32.mlir"
    program = discover_program(path, cpu, ctx)
    w = program.workload(program.dispatches[0], path)
    assert w.entry == "linear_relu"
    assert [(s.shape, s.element_type) for s in w.inputs] == [((384, 1200), "f32"), ((1200, 1000), "f32"), ((1000,), "f32")]


def test_not_mlir_is_one_clear_error(ctx, tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("this is not MLIR at all {")
    with pytest.raises(InputError, match="not valid MLIR"):
        parse_input(bad, ctx)
    with pytest.raises(InputError, match="no such file"):
        parse_input(tmp_path / "missing.mlir", ctx)


def test_nothing_tunable_is_one_clear_error(ctx, cpu):
    # An attention on the CPU: no pipeline of this tuner takes it (LinalgExtTileAndVectorize).
    attention = SAMPLES / "attention_8x1024x1024x64_f16.mlir"
    with pytest.raises(InputError, match="nothing this tuner can tune"):
        select_dispatch(discover(attention, cpu, ctx), None, attention)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["llvm-cpu", "cuda"])
def test_dispatches_are_named_by_kind_and_shape_and_each_has_its_pipeline(target):
    """Softmax, LayerNorm, a row sum, a transpose and a GELU (torch ops, one function each):
    `dispatches` names each kind from the whole dispatch (a softmax is three ops; a LayerNorm
    is two dispatches, the mean's reduction and the normalization with its rsqrt), and each
    kind has the pipeline of its target."""
    import json

    from tests.conftest import run_cli

    path = Path(__file__).parent / "fixtures" / "kinds" / "other_kinds.mlir"
    result = run_cli("dispatches", path, "--target", target, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["dispatches"]
    by_entry: dict = {}
    for r in rows:
        by_entry.setdefault(r["entry"], []).append((r["kind"], r["shape"]))
    assert by_entry == {"softmax": [("softmax", "8x128x128_f32")],
                        "layernorm": [("reduction", "256x512_f32"), ("normalization", "256x512_f32")],
                        "rowsum": [("reduction", "256x512_f32")],
                        "transpose": [("transpose", "256x512_f32")],
                        "gelu": [("elementwise", "131072_f32")]}
    pipelines = {"llvm-cpu": ("llvmcpu_reduction", "llvmcpu_elementwise"),
                 "cuda": ("llvmgpu_vector_distribute_reduction", "llvmgpu_tile_and_fuse_elementwise")}[target]
    for r in rows:
        expected = pipelines[0] if r["kind"] in ("softmax", "reduction", "normalization") else pipelines[1]
        assert r["pipeline"] == expected and not r["why_not"], r


UPSAMPLE = """
func.func @upsample(%x: tensor<2x8x4x4xf16>) -> tensor<2x8x8x8xf16> {
  %e = tensor.empty() : tensor<2x8x8x8xf16>
  %r = linalg.generic {indexing_maps = [affine_map<(a, b, c, d) -> (a, b, c, d)>],
                       iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      outs(%e : tensor<2x8x8x8xf16>) {
  ^bb0(%o: f16):
    %i0 = linalg.index 0 : index
    %i1 = linalg.index 1 : index
    %i2 = linalg.index 2 : index
    %i3 = linalg.index 3 : index
    %c2 = arith.constant 2 : index
    %h = arith.divui %i2, %c2 : index
    %w = arith.divui %i3, %c2 : index
    %v = tensor.extract %x[%i0, %i1, %h, %w] : tensor<2x8x4x4xf16>
    linalg.yield %v : f16
  } -> tensor<2x8x8x8xf16>
  return %r : tensor<2x8x8x8xf16>
}
"""


@pytest.mark.parametrize("target", ["llvm-cpu", "cuda:sm_80"])
def test_an_op_with_no_inputs_is_read_with_its_outputs_type(ctx, tmp_path, target):
    """A nearest-neighbour upsample as iree-import-onnx writes ONNX's Resize (diffusers'
    Upsample2D): a linalg.generic with no inputs, reading its source by tensor.extract. Discovery
    read its inputs' types and stopped with an IndexError traceback; it is an elementwise
    dispatch of f16."""
    from tuner.targets import parse_target

    path = tmp_path / "upsample.mlir"
    path.write_text(UPSAMPLE)
    [d] = discover_program(path, parse_target(target), ctx).dispatches
    assert (d.kind.value, d.lhs_type, d.rhs_type, d.out_type) == ("elementwise", "f16", "f16", "f16")
    assert d.loop_bounds == (2 * 8 * 8 * 8,)  # the compiler collapses the four loops into one
