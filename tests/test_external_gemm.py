"""External Hopper kernels (tuner.external, tuner.rewrite.external_gemm): Triton's PTX brought to
IREE's launch ABI, the tiles chosen per problem, which MatMuls the rewrite takes, and (slow) that
plain iree-compile of the rewritten program embeds the kernel's PTX as a dispatch of its own.

The fixture is the PTX Triton 3.9 wrote for `tuner.external.triton_gemm`'s kernel at 16x128x64
without an epilogue (64x64x64 tiles, 4 warps, 2 stages) for sm_90a: six pointer parameters, A, B,
C, the bias slot (unread without a bias) and Triton's two scratch buffers, unread. Nothing here needs Triton or a GPU; the kernels ran on the H200
(docs/benchmarks/external-kernels.md)."""

import re
from pathlib import Path

import pytest
from iree.compiler import ir

from tuner.external.abi import ExternKernel, KernelAbiError, for_iree
from tuner.external.gemm_kernel import GemmProblem, GemmTiles, tiles_for
from tuner.rewrite import EXTERNAL_GEMM, REWRITES, rewrite_program
from tuner.rewrite.external_gemm import external_gemms

PTX = (Path(__file__).parent / "fixtures" / "external" / "triton_gemm_16x128x64.ptx").read_text()


def _params(ptx: str, entry: str) -> list[str]:
    header = re.search(r"\.entry\s+" + entry + r"\s*\((.*?)\)", ptx, re.S).group(1)
    return [p.split()[-1] for p in header.split(",")]


def test_for_iree_renames_the_entry_and_keeps_only_the_binding_parameters():
    assert _params(PTX, "_gemm") == [f"_gemm_param_{i}" for i in range(6)]
    out = for_iree(PTX, "_gemm", "gemm_16x128x64_f16", 3)
    assert re.findall(r"\.entry\s+(\w+)", out) == ["gemm_16x128x64_f16"]
    assert _params(out, "gemm_16x128x64_f16") == [f"gemm_16x128x64_f16_param_{i}" for i in range(3)]
    assert "_gemm_param_" not in out
    # every load of a parameter reads one that is still declared
    loaded = set(re.findall(r"\[(gemm_16x128x64_f16_param_\d+)\]", out))
    assert loaded == {f"gemm_16x128x64_f16_param_{i}" for i in range(3)}
    assert out.count("wgmma.mma_async") == PTX.count("wgmma.mma_async") > 0


def test_for_iree_refuses_a_kernel_that_reads_a_parameter_beyond_its_bindings():
    reads_scratch = PTX.replace("ld.param.b64", "ld.param.b64 \t%rd99, [_gemm_param_3];\n\tld.param.b64", 1)
    with pytest.raises(KernelAbiError, match="_gemm_param_3"):
        for_iree(reads_scratch, "_gemm", "k", 3)
    with pytest.raises(KernelAbiError, match="expected one entry"):
        for_iree(PTX, "other", "k", 3)
    with pytest.raises(KernelAbiError, match="fewer than its 7 bindings"):
        for_iree(PTX, "_gemm", "k", 7)


@pytest.mark.parametrize("mnk, expected", [
    ((1500, 3072, 768), GemmTiles(128, 128, 64, 8, 3)),  # 12 x 24 = 288 workgroups: a wave
    ((1576, 768, 3072), GemmTiles(64, 128, 64, 4, 4)),   # 13 x 6 = 78 at 128x128; 25 x 6 = 150
    ((512, 768, 768), GemmTiles(64, 64, 64, 4, 4)),      # no tiles fill a wave: the most workgroups, 8 x 12
    ((100, 192, 64), GemmTiles(64, 64, 64, 4, 4)),       # N = 192: no 128-wide column tile; 2 x 3 beats 1 x 3
    ((16, 128, 64), GemmTiles(128, 64, 64, 4, 4)),       # 1 x 2 workgroups, as many as 64x64's: the earlier
])
def test_tiles_fill_a_wave_of_workgroups_where_they_can(mnk, expected):
    assert tiles_for(GemmProblem(*mnk)) == expected


def test_narrow_tiles_only_where_n_or_k_is_a_multiple_of_32_and_not_of_64():
    assert tiles_for(GemmProblem(25088, 384, 96)) == GemmTiles(128, 128, 32, 8, 3)  # Swin-T's first MLP up
    assert tiles_for(GemmProblem(25088, 96, 384)) == GemmTiles(128, 32, 32, 4, 4)   # ... and down
    assert tiles_for(GemmProblem(256, 96, 64)) == GemmTiles(64, 32, 32, 4, 4)      # 4 x 3 workgroups, the most
    assert tiles_for(GemmProblem(512, 768, 768)).bk == 64                           # aligned: the measured tiles


def test_a_column_count_no_tile_divides_is_masked_in_its_last_tile():
    # A classifier's 1000 classes (ResNet-50's, MobileNet's heads): the aligned tiles' rule, the
    # last column tile masked; 16 workgroups at 64x64 or 128x64 fill no wave, the most of the
    # four; of those two, 64x64 pads the 8 rows least.
    assert tiles_for(GemmProblem(8, 1000, 1280)) == GemmTiles(64, 64, 64, 4, 4)
    assert GemmTiles(128, 64, 64, 4, 4).blocks(GemmProblem(8, 1000, 1280)) == 16
    assert not GemmTiles(64, 64, 64, 4, 4).lays_out(GemmProblem(8, 1000, 1280))  # unmasked, it does not
    # 16 columns: of the tiles with the most workgroups, the narrowest (Swin's 16-channel layers)
    assert tiles_for(GemmProblem(512, 16, 16)) == GemmTiles(64, 32, 16, 4, 4)


def test_k_steps_of_16_where_k_is_no_multiple_of_32_and_steps_of_32_the_last_masked_where_it_is_none_of_16():
    assert tiles_for(GemmProblem(256, 128, 48)) == GemmTiles(64, 32, 16, 4, 4)  # 4 x 4 workgroups, the most
    # K = 40: steps of 32, the second masked; 8 x 4 workgroups at 64x32, the most, no wave
    assert tiles_for(GemmProblem(256, 128, 40)) == GemmTiles(64, 32, 32, 4, 4)
    assert not GemmTiles(64, 32, 32, 4, 4).lays_out(GemmProblem(256, 128, 40), masked=True)
    assert GemmTiles(64, 32, 32, 4, 4).lays_out(GemmProblem(256, 128, 40), masked=True, masked_k=True)
    # MLP-Mixer-B's token mixing, 8 images x 768 channels by 196 tokens to 384: 128x128 fills a wave (144)
    assert tiles_for(GemmProblem(6144, 384, 196)) == GemmTiles(128, 128, 32, 8, 3)
    assert tiles_for(GemmProblem(256, 100, 64)) == GemmTiles(64, 64, 64, 4, 4)  # 4 x 2, the last 36 wide


def _program(x: str, w: str, element: str = "f16", n: int = 128) -> str:
    xt, wt = f"!torch.vtensor<[{x}],{element}>", f"!torch.vtensor<[{w}],{element}>"
    out = f"!torch.vtensor<[{x.rsplit(',', 1)[0]},{n}],{element}>"
    return f"""
func.func @f(%x: {xt}, %w: {wt}, %b: !torch.vtensor<[{n}],{element}>) -> {out}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.MatMul"(%x, %w) : ({xt}, {wt}) -> {out}
  %z = torch.operator "onnx.Add"(%y, %b) : ({out}, !torch.vtensor<[{n}],{element}>) -> {out}
  return %z : {out}
}}
"""


def _fixture_kernel(problem: GemmProblem, tiles: GemmTiles) -> ExternKernel:
    """The fixture's kernel for any problem (its PTX is never run here)."""
    bindings = 4 if "bias" in problem.epilogue else 3
    return ExternKernel(problem.name, for_iree(PTX, "_gemm", problem.name, bindings), bindings, 128, 16384,
                        (problem.n // tiles.bn, -(-problem.m // tiles.bm), 1), tiles.label)


def test_a_rank_3_linear_becomes_a_call_of_one_extern_dispatch_between_reshapes():
    with ir.Context():
        module = ir.Module.parse(_program("2,8,64", "64,128"))
        assert external_gemms(module, _fixture_kernel, fuse=False) == ["16x128x64 f16 (128x64x64 w4 s4)"]
        text = str(module)
    assert '"onnx.MatMul"' not in text and text.count('"onnx.Reshape"') == 2
    assert text.count("hal.dispatch.extern") == 1 and "call @gemm_16x128x64_f16" in text
    assert "workgroup_size = [128 : index, 1 : index, 1 : index], workgroup_local_memory = 16384" in text
    assert '"onnx.Add"' in text  # fuse=False: what follows the MatMul stays in the program
    # the function carries the ONNX input's opset, as the import's functions do
    assert re.search(r"func.func private @gemm_16x128x64_f16\(.*torch.onnx_meta.opset_version = 20", text)


def test_layers_of_one_shape_call_one_function():
    t = "!torch.vtensor<[16,64],f16>"
    program = f"""
func.func @f(%x: {t}, %w: !torch.vtensor<[64,64],f16>) -> {t}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.MatMul"(%x, %w) : ({t}, !torch.vtensor<[64,64],f16>) -> {t}
  %z = torch.operator "onnx.MatMul"(%y, %w) : ({t}, !torch.vtensor<[64,64],f16>) -> {t}
  return %z : {t}
}}
"""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        assert len(external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))) == 2
        text = str(module)
    assert made == [GemmProblem(16, 64, 64)]
    assert text.count("hal.dispatch.extern") == 1 and text.count("call @gemm_16x64x64_f16") == 2


def test_a_linear_of_constants_alone_is_left_to_the_compiler_to_evaluate_and_the_one_on_the_input_is_taken():
    """Swin-V2's position-bias MLP reads a constant table: IREE evaluates it when it compiles the
    model, in an initializer built for the host, where a GPU kernel's call crashed iree-compile
    3.13 (LLVMCPUAssignImportOrdinals). Only the linear that reads the function's input (through
    another op) is the kernel's."""
    t, w = "!torch.vtensor<[16,64],f16>", "!torch.vtensor<[64,64],f16>"
    program = f"""
func.func @f(%x: {t}) -> {t}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %table = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<1.0> : tensor<16x64xf16>}} : () -> {t}
  %w = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<0.5> : tensor<64x64xf16>}} : () -> {w}
  %r = torch.operator "onnx.Relu"(%table) : ({t}) -> {t}
  %bias = torch.operator "onnx.MatMul"(%r, %w) : ({t}, {w}) -> {t}
  %rx = torch.operator "onnx.Relu"(%x) : ({t}) -> {t}
  %y = torch.operator "onnx.MatMul"(%rx, %w) : ({t}, {w}) -> {t}
  %z = torch.operator "onnx.Add"(%y, %bias) : ({t}, {t}) -> {t}
  return %z : {t}
}}
"""
    with ir.Context():
        module = ir.Module.parse(program)
        assert external_gemms(module, _fixture_kernel, fuse=False) == ["16x64x64 f16 (128x64x64 w4 s4)"]
        text = str(module)
    assert text.count('"onnx.MatMul"') == 1 and text.count("call @gemm_16x64x64_f16") == 1, text


@pytest.mark.parametrize("x, w, element, n, why", [
    ("16,64", "64,128", "f32", 128, "f32: the kernel is f16 or bf16"),
    ("?,64", "64,128", "f16", 128, "a dynamic row count"),
    ("2,16,64", "2,64,128", "f16", 128, "both operands batched (attention's products)"),
])
def test_matmuls_the_kernel_does_not_take_are_left_alone(x, w, element, n, why):
    with ir.Context():
        module = ir.Module.parse(_program(x, w, element, n))
        before = str(module)
        assert external_gemms(module, _fixture_kernel) == [], why
        assert str(module) == before


def test_the_rewrite_is_offered_on_cuda_exactly_where_triton_is_installed():
    from importlib.util import find_spec

    from tuner.rewrite import rewrites_for
    from tuner.targets import parse_target

    assert (EXTERNAL_GEMM in rewrites_for(parse_target("cuda:sm_80"))) == (find_spec("triton") is not None)
    assert EXTERNAL_GEMM not in rewrites_for(parse_target("rocm:gfx942"))  # its PTX is no HIP object
    assert EXTERNAL_GEMM not in rewrites_for(parse_target("llvm-cpu"))
    assert EXTERNAL_GEMM not in REWRITES["cpu"]
    # where they are not offered on cuda, the flag stage says why (once, at its start)
    from tuner.rewrite import unoffered_for
    said = unoffered_for(parse_target("cuda:sm_80"))
    assert (said is None) == (find_spec("triton") is not None)
    assert said is None or "Triton is not installed (pip install triton)" in said
    assert unoffered_for(parse_target("llvm-cpu")) is None and unoffered_for(parse_target("rocm:gfx942")) is None


@pytest.mark.slow
def test_plain_iree_compile_embeds_the_kernel_as_a_dispatch_of_its_own(tmp_path):
    from tests.conftest import extern_ptx
    from tuner.rewrite import Rewrite
    from tuner.targets import parse_target

    program = tmp_path / "model.mlir"
    program.write_text(_program("2,8,64", "64,128"))
    rewrite = Rewrite("external-hopper-gemm", lambda m: external_gemms(m, _fixture_kernel, fuse=False), "")
    assert rewrite_program(program, rewrite, tmp_path / "rewritten.mlir")
    extern = extern_ptx(tmp_path / "rewritten.mlir", tmp_path, "gemm_16x128x64_f16")
    assert len(extern) == 1 and extern[0] == for_iree(PTX, "_gemm", "gemm_16x128x64_f16", 3)
    # The tuner's discovery lists it with why it is not tuned, run by the model's function like
    # its dispatches (so the profile times it and tune-model's table shows it).
    from tuner.discovery.external import EXTERNAL_KERNEL
    from tuner.discovery.program import discover_program

    found = discover_program(tmp_path / "rewritten.mlir", parse_target("cuda"), ir.Context())
    assert ("gemm_16x128x64_f16", EXTERNAL_KERNEL) in found.skipped
    assert found.entries["gemm_16x128x64_f16"].entry == "f"
    assert all(d.name != "gemm_16x128x64_f16" for d in found.dispatches)


def _scratch_kernel(problem: GemmProblem, tiles: GemmTiles) -> ExternKernel:
    """The fixture's kernel as if it made TMA descriptors in Triton's global scratch: its fourth
    parameter (the fixture's bias slot) is the scratch's binding, after C."""
    return ExternKernel(problem.name, for_iree(PTX, "_gemm", problem.name, 4), 4, 128, 16384, (1, 1, 1), tiles.label,
                        scratch_bytes=384)


def test_a_kernel_with_scratch_gets_it_as_a_second_result_that_nothing_reads():
    program = _program("16,64", "64,128").replace('  %z = torch.operator "onnx.Add"(%y, %b) : (!torch.vtensor<[16,128],f16>, !torch.vtensor<[128],f16>) -> !torch.vtensor<[16,128],f16>\n', "").replace("return %z", "return %y")
    with ir.Context():
        module = ir.Module.parse(program)
        assert external_gemms(module, _scratch_kernel, fuse=False)
        text = str(module)
    extern = next(line for line in text.splitlines() if "hal.dispatch.extern" in line)
    assert "-> (tensor<16x128xf16>, tensor<384xi8>)" in extern
    layout = re.search(r"#hal.pipeline.layout<bindings = \[(.*?)\]>", text).group(1)
    assert layout.count("ReadOnly") == 2 and layout.count("storage_buffer") == 4  # A, B read; C and the scratch written
    assert re.search(r"return %\w+#0 : tensor<16x128xf16>", text)


@pytest.mark.slow
def test_plain_iree_compile_gives_a_kernel_its_scratch_as_its_last_binding(tmp_path):
    from tests.conftest import extern_ptx
    from tuner.rewrite import Rewrite

    program = tmp_path / "model.mlir"
    program.write_text(_program("16,64", "64,128"))
    rewrite = Rewrite("external-hopper-gemm", lambda m: external_gemms(m, _scratch_kernel, fuse=False), "")
    assert rewrite_program(program, rewrite, tmp_path / "rewritten.mlir")
    extern = extern_ptx(tmp_path / "rewritten.mlir", tmp_path, "gemm_16x128x64_f16")
    assert len(extern) == 1 and _params(extern[0], "gemm_16x128x64_f16") == [
        f"gemm_16x128x64_f16_param_{i}" for i in range(4)]


def test_a_kernel_that_cannot_be_made_leaves_its_layers_as_they_were_and_says_why():
    t, u = "!torch.vtensor<[16,64],f16>", "!torch.vtensor<[16,128],f16>"
    program = f"""
func.func @f(%x: {t}, %w: !torch.vtensor<[64,64],f16>, %v: !torch.vtensor<[64,128],f16>) -> ({t}, {u})
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.MatMul"(%x, %w) : ({t}, !torch.vtensor<[64,64],f16>) -> {t}
  %z = torch.operator "onnx.MatMul"(%x, %v) : ({t}, !torch.vtensor<[64,128],f16>) -> {u}
  return %y, %z : {t}, {u}
}}
"""

    def source(problem, tiles):
        if problem.n == 64:
            raise KernelAbiError("gemm reads parameters beyond its bindings: gemm_param_3")
        return _fixture_kernel(problem, tiles)

    with ir.Context():
        module = ir.Module.parse(program)
        changes = external_gemms(module, source)
        text = str(module)
        assert changes == ["16x128x64 f16 (128x64x64 w4 s4)", "16x64x64 f16 left as it was: gemm reads parameters "
                           "beyond its bindings: gemm_param_3"]
        assert text.count('"onnx.MatMul"') == 1 and text.count("hal.dispatch.extern") == 1
        # where no kernel can be made, nothing is rewritten
        only_failing = ir.Module.parse(program.replace("64,128", "64,64").replace("16,128", "16,64"))
        assert external_gemms(only_failing, source) == []


def _linear_with(after: str) -> str:
    """A linear layer [16, 64] x [64, 128] and what follows it (`after`: ops reading %y, the last
    one's result %out)."""
    t, b = "!torch.vtensor<[16,128],f16>", "!torch.vtensor<[128],f16>"
    return f"""
func.func @f(%x: !torch.vtensor<[16,64],f16>, %w: !torch.vtensor<[64,128],f16>, %b: {b}, %r: {t}) -> {t}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.MatMul"(%x, %w) : (!torch.vtensor<[16,64],f16>, !torch.vtensor<[64,128],f16>) -> {t}
{after}
  return %out : {t}
}}
"""


_T = "!torch.vtensor<[16,128],f16>"
_B = "!torch.vtensor<[128],f16>"


@pytest.mark.parametrize("after, steps", [
    (f'  %z = torch.operator "onnx.Add"(%y, %b) : ({_T}, {_B}) -> {_T}\n'
     f'  %out = torch.operator "onnx.Gelu"(%z) : ({_T}) -> {_T}', ("bias", "gelu")),
    (f'  %z = torch.operator "onnx.Add"(%b, %y) : ({_B}, {_T}) -> {_T}\n'
     f'  %out = torch.operator "onnx.Gelu"(%z) {{torch.onnx.approximate = "tanh"}} : ({_T}) -> {_T}', ("bias", "gelu_tanh")),
    (f'  %out = torch.operator "onnx.Relu"(%y) : ({_T}) -> {_T}', ("relu",)),
    # a residual Add (a full [16, 128] operand) is no bias: the MatMul alone
    (f'  %out = torch.operator "onnx.Add"(%y, %r) : ({_T}, {_T}) -> {_T}', ()),
])
def test_the_kernel_takes_a_bias_of_one_value_per_column_then_a_gelu_or_relu_into_its_epilogue(after, steps):
    with ir.Context():
        module = ir.Module.parse(_linear_with(after))
        matmul = next(op for op in module.body.operations[0].regions[0].blocks[0].operations
                      if "onnx.MatMul" in str(op))
        from tuner.rewrite.external_gemm import epilogue_of
        ops, found, bias = epilogue_of(matmul)
        assert found == steps and len(ops) == len(steps) and (bias is not None) == ("bias" in steps)


def test_a_fused_linear_layer_is_one_call_of_a_b_and_the_bias_and_its_ops_are_gone():
    after = (f'  %z = torch.operator "onnx.Add"(%y, %b) : ({_T}, {_B}) -> {_T}\n'
             f'  %out = torch.operator "onnx.Gelu"(%z) : ({_T}) -> {_T}')
    made = []
    with ir.Context():
        module = ir.Module.parse(_linear_with(after))
        assert external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t), fuse=True) == \
            ["16x128x64 f16 + bias + gelu (128x64x64 w4 s4)"]
        text = str(module)
    assert made == [GemmProblem(16, 128, 64, "f16", ("bias", "gelu"))]
    assert not any(f'"onnx.{name}"' in text for name in ("MatMul", "Add", "Gelu"))
    call = next(line for line in text.splitlines() if "call @gemm_16x128x64_f16_bias_gelu" in line)
    assert "tensor<128xf16>" in call


def test_the_offered_rewrite_takes_the_epilogue_into_the_kernel_and_fuse_false_leaves_it():
    from tuner.rewrite import EXTERNAL_GEMM

    after = (f'  %z = torch.operator "onnx.Add"(%y, %b) : ({_T}, {_B}) -> {_T}\n'
             f'  %out = torch.operator "onnx.Relu"(%z) : ({_T}) -> {_T}')
    assert EXTERNAL_GEMM.apply is external_gemms  # offered with its defaults
    for options, names in (({}, {"Add": False, "Relu": False}), ({"fuse": False}, {"Add": True, "Relu": True})):
        made = []
        with ir.Context():
            module = ir.Module.parse(_linear_with(after))
            external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t), **options)
            text = str(module)
        assert made[0].epilogue == (("bias", "relu") if not options else ())
        assert {n: f'"onnx.{n}"' in text for n in names} == names


def test_without_triton_the_external_kernels_are_said_to_be_not_offered_and_why(monkeypatch):
    import tuner.rewrite as rewrite
    from tuner.targets import parse_target

    monkeypatch.setattr(rewrite, "find_spec", lambda name: None)
    said = rewrite.unoffered_for(parse_target("cuda:sm_80"))
    assert said == ("external-hopper-gemm, external-flash-attention, external-depthwise-conv, external-hopper-conv, "
                    "external-layer-norm, external-rms-norm (Hopper kernels compiled by Triton) not offered: Triton is not "
                    "installed (pip install triton)")
    monkeypatch.setattr(rewrite, "find_spec", lambda name: object())
    assert rewrite.unoffered_for(parse_target("cuda:sm_80")) is None


def _gemm_program(w: str, bias: str, attributes: str, after: str = "") -> str:
    """`func.func @f` of one onnx.Gemm of X[16, 64] by W (and C), as the exporter writes addmm."""
    x, y = "!torch.vtensor<[16,64],f16>", "!torch.vtensor<[16,128],f16>"
    wt, bt = f"!torch.vtensor<[{w}],f16>", f"!torch.vtensor<[{bias}],f16>"
    result = "%y" if not after else "%out"
    return f"""
func.func @f(%x: {x}, %w: {wt}, %b: {bt}) -> {y}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.Gemm"(%x, %w, %b) {{{attributes}}} : ({x}, {wt}, {bt}) -> {y}
{after}
  return {result} : {y}
}}
"""


@pytest.mark.parametrize("w, bias, attributes, transposed", [
    ("64,128", "128", "", False),                                 # GPT-2's Conv1D: addmm(b, x, W[K, N])
    ("128,64", "1,128", "torch.onnx.transB = 1 : si64", True),    # a 2-D nn.Linear: W[N, K], given transposed
])
def test_a_gemm_is_one_call_with_its_bias_in_the_kernel(w, bias, attributes, transposed):
    made = []
    with ir.Context():
        module = ir.Module.parse(_gemm_program(w, bias, attributes))
        done = external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert done == ["16x128x64 f16 + bias (128x64x64 w4 s4)"]
    assert made == [GemmProblem(16, 128, 64, "f16", ("bias",))]
    assert '"onnx.Gemm"' not in text and text.count("hal.dispatch.extern") == 1
    assert ('"onnx.Transpose"' in text) == transposed and text.count('"onnx.Reshape"') == (bias == "1,128")
    call = next(line for line in text.splitlines() if "call @gemm_16x128x64_f16_bias" in line)
    assert "tensor<64x128xf16>" in call and "tensor<128xf16>" in call


def test_a_gemm_takes_the_relu_after_it_and_leaves_a_residual_add():
    relu = '  %out = torch.operator "onnx.Relu"(%y) : (!torch.vtensor<[16,128],f16>) -> !torch.vtensor<[16,128],f16>'
    add = ('  %out = torch.operator "onnx.Add"(%y, %y) : (!torch.vtensor<[16,128],f16>, !torch.vtensor<[16,128],f16>)'
           ' -> !torch.vtensor<[16,128],f16>')
    for after, steps in ((relu, ("bias", "relu")), (add, ("bias",))):
        made = []
        with ir.Context():
            module = ir.Module.parse(_gemm_program("64,128", "128", "", after))
            external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        assert made[0].epilogue == steps


@pytest.mark.parametrize("attributes, why", [
    ("torch.onnx.transA = 1 : si64", "A given transposed"),
    ("torch.onnx.alpha = 2.000000e+00 : f32", "a product scaled by alpha"),
    ("torch.onnx.beta = 5.000000e-01 : f32", "a bias scaled by beta"),
])
def test_gemms_that_are_no_linear_layer_are_left_alone(attributes, why):
    with ir.Context():
        module = ir.Module.parse(_gemm_program("64,128", "128", attributes))
        before = str(module)
        assert external_gemms(module, _fixture_kernel) == [], why
        assert str(module) == before


def test_a_pointwise_convolution_as_a_matmul_becomes_one_batched_call_with_its_bias_per_filter():
    """pointwise-conv-as-matmul writes a 1x1 convolution as MatMul(W[O, C], X[N, C, H*W]) +
    Reshape(B, [O, 1]): the filter shared by every image, a bias per filter (row); the kernel
    takes the batch on its grid and the bias into its epilogue."""
    from tuner.rewrite.pointwise_conv import pointwise_convs_as_matmuls

    x, w, b, y = ("!torch.vtensor<[2,64,8,8],f16>", "!torch.vtensor<[32,64,1,1],f16>", "!torch.vtensor<[32],f16>",
                  "!torch.vtensor<[2,32,8,8],f16>")
    program = f"""
func.func @f(%x: {x}, %w: {w}, %b: {b}) -> {y}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.Conv"(%x, %w, %b) : ({x}, {w}, {b}) -> {y}
  return %y : {y}
}}
"""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        assert pointwise_convs_as_matmuls(module) == ["2x64x8x8 by 32x64x1x1"]
        done = external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert made == [GemmProblem(32, 64, 64, "f16", ("row_bias",), batch=2)]
    assert done == ["2x32x64x64 f16 + row_bias (128x64x64 w4 s4)"]  # 2 workgroups, as 64x64: the earlier
    assert '"onnx.MatMul"' not in text and '"onnx.Add"' not in text
    call = next(line for line in text.splitlines() if "call @gemm_2x32x64x64_f16_row_bias" in line)
    assert "(tensor<32x64xf16>, tensor<2x64x64xf16>, tensor<32xf16>) -> tensor<2x32x64xf16>" in call


@pytest.mark.parametrize("x, w, y, called, converted", [
    # per image: the filter (32x64) is smaller than the pixels it would transpose
    ("2,64,8,8", "32,64,1,1", "2,32,8,8", "gemm_2x32x64x64_f16_row_bias", True),
    # one image: a 2-D product of its 4 pixels
    ("1,64,2,2", "256,64,1,1", "1,256,2,2", "gemm_256x4x64_f16_row_bias", True),
    # the images side by side (a 256x64 filter holds more than the 2 x 4 pixels it would
    # transpose): one 2-D product of every image's pixels, 8 columns
    ("2,64,2,2", "256,64,1,1", "2,256,2,2", "gemm_256x8x64_f16_row_bias", True),
    # EfficientNet's 7x7 stage: IREE's rule would put the images side by side (the 1152x192
    # filter outweighs 49 pixels), but the batched kernel shares the filter: batched, no transposes
    ("2,192,7,7", "1152,192,1,1", "2,1152,7,7", "gemm_2x1152x49x192_f16_row_bias", True),
    # 40 channels: no K step divides them; the convolution stays as it was
    ("2,40,8,8", "32,40,1,1", "2,32,8,8", None, False),
])
def test_the_rewrite_takes_1x1_convolutions_itself_with_their_bias_per_filter(x, w, y, called, converted):
    xt, wt, yt = (f"!torch.vtensor<[{s}],f16>" for s in (x, w, y))
    bt = f"!torch.vtensor<[{w.split(',')[0]}],f16>"
    program = f"""
func.func @f(%x: {xt}, %w: {wt}, %b: {bt}) -> {yt}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %y = torch.operator "onnx.Conv"(%x, %w, %b) : ({xt}, {wt}, {bt}) -> {yt}
  return %y : {yt}
}}
"""
    with ir.Context():
        module = ir.Module.parse(program)
        done = external_gemms(module, _fixture_kernel)
        text = str(module)
    assert bool(done) == converted and ('"onnx.Conv"' not in text) == converted
    if called:
        assert f"call @{called}" in text and '"onnx.MatMul"' not in text and '"onnx.Add"' not in text
        assert ('"onnx.Transpose"' in text) == ("x8x" in called)  # only the side-by-side form transposes


def test_a_1d_convolution_is_the_filter_by_its_gathered_taps_with_its_bias_and_gelu_in_the_kernel():
    """Whisper's first convolution, narrowed: [1, 80, 64] by a 3-tap filter to 32 channels, then
    GELU; K = 80 x 3 = 240 (steps of 16)."""
    x, w, b, y = ("!torch.vtensor<[1,80,64],f16>", "!torch.vtensor<[32,80,3],f16>", "!torch.vtensor<[32],f16>",
                  "!torch.vtensor<[1,32,64],f16>")
    program = f"""
func.func @f(%x: {x}, %w: {w}, %b: {b}) -> {y}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %c = torch.operator "onnx.Conv"(%x, %w, %b) {{torch.onnx.group = 1 : si64, torch.onnx.kernel_shape = [3 : si64], torch.onnx.pads = [1 : si64, 1 : si64]}} : ({x}, {w}, {b}) -> {y}
  %g = torch.operator "onnx.Gelu"(%c) : ({y}) -> {y}
  return %g : {y}
}}
"""
    made = []
    with ir.Context():
        module = ir.Module.parse(program)
        external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert made == [GemmProblem(32, 64, 240, "f16", ("row_bias", "gelu"))]
    assert not any(f'"onnx.{name}"' in text for name in ("Conv", "MatMul", "Gelu"))


@pytest.mark.parametrize("applies, expected", [
    # two kernels apply: joined; a feeder too: the feeder first, then the kernels, judged untuned
    (("external-hopper-gemm", "external-depthwise-conv", "subsample-strided-1x1", "nd-linear-as-matmul"),
     [("external-hopper-gemm+external-depthwise-conv", ()),
      ("subsample-strided-1x1+external-hopper-gemm+external-depthwise-conv", ())]),
    # one kernel and the feeders that apply, in FEEDERS order whatever order they were offered in
    (("patchify-as-matmul", "external-hopper-gemm", "pointwise-conv-as-matmul"),
     [("pointwise-conv-as-matmul+patchify-as-matmul+external-hopper-gemm", ())]),
    # a feeder whether offered alone or not; conv-as-im2col-matmul, offered alone, is none
    (("conv-as-im2col-matmul", "external-hopper-gemm", "f32-reductions"), [("f32-reductions+external-hopper-gemm", ())]),
    (("external-hopper-gemm",), []),                          # one kernel alone is its own option
    # f32-reductions first in each, where it applies (a right result may need it): a kernel alone too
    (("external-hopper-gemm", "f32-reductions"), [("f32-reductions+external-hopper-gemm", ())]),
    (("f32-reductions", "pointwise-conv-as-matmul", "external-hopper-conv", "external-hopper-gemm"),
     [("f32-reductions+external-hopper-gemm+external-hopper-conv", ()),
      ("f32-reductions+pointwise-conv-as-matmul+external-hopper-gemm+external-hopper-conv", ())]),
    # the exact rewrites first, in EXACT_FIRST order: chain-concats after f32-reductions
    (("external-hopper-conv", "chain-concats", "f32-reductions"),
     [("f32-reductions+chain-concats+external-hopper-conv", ())]),
    (("subsample-strided-1x1", "conv-as-im2col-matmul"), []),  # no kernel applies: nothing joined
    # sibling linears (a transformer's Q, K, V): the kernels also with them joined, after the exact rewrites
    (("external-flash-attention", "join-sibling-linears", "external-hopper-gemm", "f32-reductions"),
     [("f32-reductions+external-hopper-gemm+external-flash-attention", ()),
      ("f32-reductions+join-sibling-linears+external-hopper-gemm+external-flash-attention", ())]),
    (("join-sibling-linears", "raise-attention"), []),  # no kernel: join-sibling-linears is its own option
])
def test_the_external_kernels_are_offered_joined_and_after_the_rewrites_that_feed_them(monkeypatch, applies,
                                                                                          expected):
    import tuner.rewrite as rewrite
    import tuner.stages.flag_options as flag_options

    offered = [*rewrite.EXTERNAL[::-1], *(r for r in rewrite.REWRITES["gpu"] if r not in rewrite.EXTERNAL)][::-1]
    monkeypatch.setattr(flag_options, "offered_rewrites", lambda env: offered)
    monkeypatch.setattr(flag_options, "rewrite_changes", lambda env, r: ["found"] if r.name in applies else [])
    options = flag_options.external_together(_env_copying(()))
    assert [(o.rewrite.name, o.tuned_kinds) for o in options] == expected and not any(o.flags for o in options)


def _env_copying(copies: tuple[str, ...]):
    """A stage environment whose model's program has these in-place copy dispatches."""
    from types import SimpleNamespace
    return SimpleNamespace(program=SimpleNamespace(in_place_copies=copies, dispatches=()))


def test_where_the_model_copies_into_slices_each_joined_option_is_offered_with_concatenations_outermost_too(
        monkeypatch):
    """DenseNet's concatenations are copies into slices of the result (`slow_memcpy`): each
    joined option is offered as it is and with OUTER_DIM_CONCAT, the same rewrites."""
    import tuner.rewrite as rewrite
    import tuner.stages.flag_options as flag_options
    from pipelines.model_flags import OUTER_DIM_CONCAT

    applies = ("f32-reductions", "chain-concats", "pointwise-conv-as-matmul", "external-hopper-conv",
               "external-hopper-gemm")
    # every kernel offered, whether Triton is installed here or not (REWRITES offers them only then)
    offered = [*(r for r in rewrite.REWRITES["gpu"] if r not in rewrite.EXTERNAL), *rewrite.EXTERNAL]
    monkeypatch.setattr(flag_options, "offered_rewrites", lambda env: offered)
    monkeypatch.setattr(flag_options, "rewrite_changes", lambda env, r: ["found"] if r.name in applies else [])
    plain = flag_options.external_together(_env_copying(()))
    copying = flag_options.external_together(_env_copying(("main$async_dispatch_7_slow_memcpy",)))
    assert len(plain) == 2 and [o.label for o in copying[:2]] == [o.label for o in plain]
    assert [(o.rewrite.name, o.flags) for o in copying[2:]] == [(o.rewrite.name, OUTER_DIM_CONCAT) for o in plain]
    assert copying[2].label.endswith(" --iree-opt-outer-dim-concat=true")
    # and alone, as a flag set of the model's own (no pipeline reads a copy to offer it)
    assert [o.flags for o in flag_options.offered_flag_sets(_env_copying(("d_slow_memcpy",)))] == [OUTER_DIM_CONCAT]
    assert flag_options.offered_flag_sets(_env_copying(())) == []


@pytest.mark.parametrize("applies, alone", [
    # joined without feeders: no kernel alone; the other rewrites and f32-reductions alone still
    (("external-hopper-gemm", "external-flash-attention", "nd-linear-as-matmul", "f32-reductions"),
     ["nd-linear-as-matmul", "f32-reductions"]),
    # one kernel with feeders only (no joined option without them): the kernel alone too
    (("external-hopper-conv", "pointwise-conv-as-matmul"), ["pointwise-conv-as-matmul", "external-hopper-conv"]),
])
def test_the_first_round_offers_a_kernel_alone_only_where_no_joined_option_without_feeders_holds_it(
        monkeypatch, applies, alone):
    import tuner.rewrite as rewrite
    import tuner.stages.flag_options as flag_options

    offered = [*(r for r in rewrite.REWRITES["gpu"] if r not in rewrite.EXTERNAL), *rewrite.EXTERNAL]  # Triton or not
    monkeypatch.setattr(flag_options, "offered_rewrites", lambda env: offered)
    monkeypatch.setattr(flag_options, "offered_flag_sets", lambda env, pipeline=None: [])
    monkeypatch.setattr(flag_options, "rewrite_changes", lambda env, r: ["found"] if r.name in applies else [])
    options = flag_options.model_options(_env_copying(()))
    # offered_rewrites names every offered rewrite (the stage reports one that finds nothing)
    assert [o.rewrite.name for o in options if "+" not in o.rewrite.name and o.rewrite.name in applies] == alone
    joined = [o.rewrite.name for o in options if "+" in o.rewrite.name]
    assert joined == [o.rewrite.name for o in flag_options.external_together(_env_copying(()))] and joined


def _gpt2_mlp_up(half: str = "0x020000000038") -> str:
    """GPT-2's c_fc as torch.onnx.export writes it: a Gemm of [16, 64] by [64, 256], its result
    viewed as [1, 16, 256], then gelu_new spelled out op by op; the scalars f16 constants, 0.5 a
    `dense_resource` blob (alignment 2, then 0x3800) as the exporter writes it, the others splats."""
    r2, r3, s = "!torch.vtensor<[16,256],f16>", "!torch.vtensor<[1,16,256],f16>", "!torch.vtensor<[],f16>"

    def scalar(name: str, value: str) -> str:
        return f'  %{name} = torch.operator "onnx.Constant"() {{torch.onnx.value = dense<{value}> : tensor<f16>}} : () -> {s}'

    return f"""
func.func @f(%x: !torch.vtensor<[16,64],f16>, %w: !torch.vtensor<[64,256],f16>) -> {r3}
    attributes {{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}} {{
  %half = torch.operator "onnx.Constant"() {{torch.onnx.value = dense_resource<half> : tensor<f16>}} : () -> {s}
{scalar("three", "3.0")}
{scalar("c", "4.471590e-02")}
{scalar("k", "7.978520e-01")}
{scalar("one", "1.0")}
  %shape = torch.vtensor.literal(dense<[1, 16, 256]> : tensor<3xsi64>) : !torch.vtensor<[3],si64>
  %g = torch.operator "onnx.Gemm"(%x, %w) {{torch.onnx.alpha = 1.000000e+00 : f32, torch.onnx.beta = 1.000000e+00 : f32}} : (!torch.vtensor<[16,64],f16>, !torch.vtensor<[64,256],f16>) -> {r2}
  %v = torch.operator "onnx.Reshape"(%g, %shape) : ({r2}, !torch.vtensor<[3],si64>) -> {r3}
  %m = torch.operator "onnx.Mul"(%v, %half) : ({r3}, {s}) -> {r3}
  %p = torch.operator "onnx.Pow"(%v, %three) : ({r3}, {s}) -> {r3}
  %pc = torch.operator "onnx.Mul"(%p, %c) : ({r3}, {s}) -> {r3}
  %a = torch.operator "onnx.Add"(%v, %pc) : ({r3}, {r3}) -> {r3}
  %ak = torch.operator "onnx.Mul"(%a, %k) : ({r3}, {s}) -> {r3}
  %t = torch.operator "onnx.Tanh"(%ak) : ({r3}) -> {r3}
  %t1 = torch.operator "onnx.Add"(%t, %one) : ({r3}, {s}) -> {r3}
  %out = torch.operator "onnx.Mul"(%m, %t1) : ({r3}, {r3}) -> {r3}
  return %out : {r3}
}}

{{-#
  dialect_resources: {{
    builtin: {{
      half: "{half}"
    }}
  }}
#-}}
"""


@pytest.mark.parametrize("half, taken", [("0x020000000038", True),    # 0.5: GELU's tanh form
                                         ("0x02000000CD38", False)])  # 0.6: some other function
def test_gelu_spelled_out_in_its_tanh_form_after_a_reshaped_gemm_is_taken_into_the_kernel(half, taken):
    made = []
    with ir.Context():
        module = ir.Module.parse(_gpt2_mlp_up(half))
        done = external_gemms(module, lambda p, t: made.append(p) or _fixture_kernel(p, t))
        text = str(module)
    assert done and made[0].epilogue == (("gelu_tanh",) if taken else ())
    assert ('"onnx.Tanh"' in text) != taken and ('"onnx.Pow"' in text) != taken
    if taken:  # the call's [16, 256] viewed as the model's [1, 16, 256], as the chain's last Mul was
        assert "-> !torch.vtensor<[1,16,256],f16>" in text.split("call @gemm_16x256x64_f16_gelu_tanh")[1]


def test_a_run_keeps_tritons_cache_in_its_own_directory_unless_the_user_named_one(tmp_path, monkeypatch):
    import os

    from tuner.external.triton_build import cache_in

    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    with cache_in(tmp_path / "run"):
        assert os.environ["TRITON_CACHE_DIR"] == str((tmp_path / "run" / "triton-cache").resolve())
    assert "TRITON_CACHE_DIR" not in os.environ  # as it was after
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    with cache_in(tmp_path / "run"):
        assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")


def test_a_joined_option_is_extended_with_its_own_rewrites_kept_and_the_new_one_in_rewrites_order():
    from tuner.rewrite import (CHAIN_CONCATS, EXTERNAL_GEMM, F32_REDUCTIONS, ND_LINEAR_AS_MATMUL, PAD_REDUCTIONS,
                               PATCHIFY_AS_MATMUL, combined)
    from tuner.stages.flag_options import ModelOption, extensions

    fed = ModelOption((), combined([F32_REDUCTIONS, CHAIN_CONCATS, PATCHIFY_AS_MATMUL, EXTERNAL_GEMM]))
    # as REWRITES offers them (patchify-as-matmul is not: a feeder of the joined options only)
    applying = [ND_LINEAR_AS_MATMUL, F32_REDUCTIONS, CHAIN_CONCATS, PAD_REDUCTIONS, EXTERNAL_GEMM]
    assert [o.rewrite.names for o in extensions(fed, applying, [])] == [
        ("nd-linear-as-matmul", "f32-reductions", "chain-concats", "patchify-as-matmul", "external-hopper-gemm"),
        ("f32-reductions", "chain-concats", "patchify-as-matmul", "pad-reductions", "external-hopper-gemm")]
