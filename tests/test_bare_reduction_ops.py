"""A GPU reduction dispatch whose compiler config leaves one of its ops bare, so that IREE 3.13
cannot compile it ("failed to distribute"): Swin-T's first LayerNorm under O3 or aggressive
fusion on the H200 (docs/benchmarks/real-exports.md), reproduced here from the same ONNX ops at
one 224x224 image: a 4x4 patch convolution, NHWC, two LayerNorms, the 7x7 window partition and
the QKV linear. The tuner reads the bare op as one it configures, and its configs build the
dispatch that the compiler's own does not."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines import DispatchKind, pipeline_for
from tuner.discovery.program import discover_program
from tuner.specs.candidates import generate_candidates
from tuner.stages.variants import SpecPart, Variant, build_variant, compile_variant
from tuner.targets import parse_target

O3 = ("--iree-opt-level=O3",)


def _swin_stem(path: Path) -> Path:
    """The ONNX model: 224x224 image, 96 channels, 56x56 patches (3136 rows of 96)."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def f16(name: str, values) -> "onnx.TensorProto":
        return numpy_helper.from_array(np.asarray(values, np.float16), name)

    weights = [f16("W", rng.standard_normal((96, 3, 4, 4)) * 0.1), f16("B", rng.standard_normal(96) * 0.1),
               f16("g", np.ones(96)), f16("b", np.zeros(96)), f16("g2", np.full(96, 1.1)), f16("b2", np.full(96, 0.1)),
               f16("Wq", rng.standard_normal((96, 288)) * 0.1), f16("Bq", rng.standard_normal(288) * 0.1),
               numpy_helper.from_array(np.array([1, 8, 7, 8, 7, 96], np.int64), "windows"),
               numpy_helper.from_array(np.array([64, 49, 96], np.int64), "tokens")]
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], strides=[4, 4], kernel_shape=[4, 4]),
             helper.make_node("Transpose", ["c"], ["t"], perm=[0, 2, 3, 1]),
             helper.make_node("LayerNormalization", ["t", "g", "b"], ["u"], axis=-1, epsilon=1e-5),
             helper.make_node("LayerNormalization", ["u", "g2", "b2"], ["v"], axis=-1, epsilon=1e-5),
             helper.make_node("Reshape", ["v", "windows"], ["r"]),
             helper.make_node("Transpose", ["r"], ["p"], perm=[0, 1, 3, 2, 4, 5]),
             helper.make_node("Reshape", ["p", "tokens"], ["w"]),
             helper.make_node("MatMul", ["w", "Wq"], ["q"]),
             helper.make_node("Add", ["q", "Bq"], ["y"])]
    graph = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 3, 224, 224])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [64, 49, 288]),
                               helper.make_tensor_value_info("u", TensorProto.FLOAT16, [1, 56, 56, 96])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save(model, path)
    return path


@pytest.mark.slow
def test_a_reduction_the_compiler_leaves_an_op_of_bare_builds_with_the_tuners_config(ctx, tmp_path):
    from tuner.input.models import program_source

    cuda = parse_target("cuda")
    program = program_source(_swin_stem(tmp_path / "stem.onnx"), tmp_path, cuda)
    # IREE's own configs: the model does not build, and the compiler names the dispatch.
    default = compile_variant(program, Variant("o3", O3), cuda, tmp_path / "o3")
    assert not default.ok and "failed to distribute" in default.error

    dispatches = discover_program(program, cuda, ctx, O3).dispatches
    bare = [d for d in dispatches if any(not f.default_lowering_config for f in d.fused)]
    assert len(bare) == 1
    (d,) = bare
    assert d.kind == DispatchKind.REDUCTION and d.name in default.error
    # The bare op is the centred values, stored and reduced again; the compiler configures the
    # other reduction (the mean's).
    assert [bool(f.default_lowering_config) for f in d.fused] == [True, False]

    candidates = generate_candidates(d, pipeline_for(d), 4, ctx, cuda.spec_entry)
    assert len(candidates) >= 2, "a config with the bare op configured is not the compiler's own"
    config = candidates[1].config
    built = build_variant(program, Variant("o3-configured", O3, (SpecPart(d, config, candidates[1].label),)), cuda,
                          tmp_path / "o3-configured", ctx)
    # Built, and the read-back found the config on the dispatch (build_variant checks it).
    assert built.ok, built.error


def test_a_bare_op_is_given_the_config_the_compiler_gives_a_softmaxs_division(ctx):
    """The serial tile is the root's row tile, the lanes, subgroups and thread tile its own, and
    no workgroup tile (the root's distributes the rows)."""
    from pipelines.llvmgpu_vector_distribute_reduction import elementwise_like

    root = ("#iree_gpu.lowering_config<{lane_basis = [[1, 32], [0, 1]], partial_reduction = [0, 64], "
            "subgroup_basis = [[1, 2], [0, 1]], thread = [0, 1], workgroup = [1, 0]}>")
    with ctx:
        assert elementwise_like(root) == ("#iree_gpu.lowering_config<{lane_basis = [[1, 32], [0, 1]], serial = [0, 64], "
                                           "subgroup_basis = [[1, 2], [0, 1]], thread = [0, 1]}>")


@pytest.mark.slow
def test_a_choice_that_fails_in_one_dispatch_is_repaired_with_a_config_that_every_build_of_it_carries(ctx, tmp_path):
    """tune-model's repair (tuner.stages.repair) on the same model, compile only: O3 fails in the
    LayerNorm's dispatch; the dispatch is found as O3 forms it and a config of the tuner's
    pinned; the choice's builds with it compile, and a target carrying it builds the model too."""
    from tuner.stages.model_client import model_entry
    from tuner.stages.base import StageEnv
    from tuner.stages.builtin import build_once, with_flags
    from tuner.stages.repair import pins_for

    cuda = parse_target("cuda")
    from tuner.input.models import program_source

    program = program_source(_swin_stem(tmp_path / "stem.onnx"), tmp_path, cuda)
    found = discover_program(program, cuda, ctx)
    said: list[str] = []
    env = StageEnv(program, cuda, tmp_path / "run", ctx, found, model_entry(found, None), say=said.append)
    failed = build_once(env, Variant("o3", O3))
    assert not failed.ok
    # Under the pipeline tune-model names on cuda (the mma.sync kernel's, which takes no
    # reduction): the dispatch is repaired by the pipeline for the compiler's choice.
    (pin,) = pins_for(env, Variant("o3", O3), "llvmgpu_mma_sync")
    assert pin.dispatch.name == failed.failing and "reduction_3136x96" in pin.dispatch.name
    assert pin.dispatch.name in said[0] and "pinned" in said[0]
    pins = (pin,)
    assert build_once(env, Variant("o3-tuned-later", O3, pinned=pins)).ok
    # As the dispatch stage and the merge see it: a target whose every build carries the pin.
    pinned_env = StageEnv(program, with_flags(cuda, (), pins), tmp_path / "run2", ctx, found, model_entry(found, None))
    assert build_once(pinned_env, Variant("o3", O3)).ok
    # A choice that builds as it is needs nothing pinned.
    assert pins_for(env, Variant("default")) == ()
