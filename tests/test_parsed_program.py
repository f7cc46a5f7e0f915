"""A program parsed once for many rewrites (tuner.rewrite.parsed.ParsedProgram; the flag stage's
rewrite_changes and rewritten_program): finding what a rewrite changes writes nothing and leaves
the parsed program as it was; a program is written only when asked for, the same text a fresh
rewrite_program writes, its weights' resources with it."""

from types import SimpleNamespace

from tuner.rewrite import F32_REDUCTIONS, CHAIN_CONCATS, rewrite_program
from tuner.rewrite.parsed import ParsedProgram
from tuner.stages import flag_options
from tuner.stages.base import RunCache
from tuner.stages.ledger import REWRITES, Ledger

META = "{torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 20 : si64}"
X, W, Y, AXES = ("!torch.vtensor<[4,8],f16>", "!torch.vtensor<[4,8],f16>", "!torch.vtensor<[4,1],f16>",
                 "!torch.vtensor<[1],si64>")
# a weight as iree-import-onnx writes one: a dense_resource blob (alignment 2, then 32 f16 of 1.0)
BLOB = "0x02000000" + "003C" * 32
PROGRAM = f"""
func.func @main_graph(%x: {X}) -> {Y} attributes {META} {{
  %w = torch.vtensor.literal(dense_resource<weight> : tensor<4x8xf16>) : {W}
  %axes = torch.vtensor.literal(dense<1> : tensor<1xsi64>) : {AXES}
  %p = torch.operator "onnx.Mul"(%x, %w) : ({X}, {W}) -> {X}
  %y = torch.operator "onnx.ReduceSum"(%p, %axes) {{torch.onnx.keepdims = 1 : si64}} : ({X}, {AXES}) -> {Y}
  return %y : {Y}
}}

{{-#
  dialect_resources: {{
    builtin: {{
      weight: "{BLOB}"
    }}
  }}
#-}}
"""


def _program(tmp_path):
    path = tmp_path / "model.mlir"
    path.write_text(PROGRAM)
    return path


def test_finding_what_a_rewrite_changes_writes_nothing_and_leaves_the_parsed_program_as_it_was(tmp_path):
    parsed = ParsedProgram(_program(tmp_path))
    first = parsed.changes(F32_REDUCTIONS)
    assert first == ["ReduceSum of 4x8 f16"]
    assert parsed.changes(F32_REDUCTIONS) == first  # the copy was rewritten, not the program
    assert parsed.changes(CHAIN_CONCATS) == []  # nothing of its kind here
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.mlir"]


def test_a_written_program_is_the_text_a_fresh_rewrite_writes_with_its_weights(tmp_path):
    program = _program(tmp_path)
    parsed = ParsedProgram(program)
    parsed.changes(F32_REDUCTIONS)
    assert parsed.write(F32_REDUCTIONS, tmp_path / "a" / "once.mlir") == ["ReduceSum of 4x8 f16"]
    assert rewrite_program(program, F32_REDUCTIONS, tmp_path / "fresh.mlir") == ["ReduceSum of 4x8 f16"]
    written = (tmp_path / "a" / "once.mlir").read_text()
    assert written == (tmp_path / "fresh.mlir").read_text()
    assert BLOB.lower() in written.lower() and '"onnx.Cast"' in written
    assert not parsed.write(CHAIN_CONCATS, tmp_path / "none.mlir") and not (tmp_path / "none.mlir").exists()


def test_the_flag_stage_writes_a_rewritten_program_only_when_it_is_to_be_built(tmp_path):
    """Asking which rewrites apply (every first round does) writes nothing; the program is written
    once, at the first build's asking, and both are put in the ledger's rewrites."""
    said = []
    env = SimpleNamespace(model=_program(tmp_path), output_dir=tmp_path / "run", cache=RunCache(), ledger=Ledger(),
                          say=said.append)
    assert flag_options.rewrite_changes(env, F32_REDUCTIONS) == ["ReduceSum of 4x8 f16"]
    assert not flag_options.rewrites_nothing(env, SimpleNamespace(rewrite=F32_REDUCTIONS))
    assert flag_options.rewrites_nothing(env, SimpleNamespace(rewrite=CHAIN_CONCATS))
    assert not (tmp_path / "run").exists()
    out = flag_options.rewritten_program(env, F32_REDUCTIONS)
    assert out == tmp_path / "run" / "imported" / "model.f32-reductions.mlir" and out.is_file()
    stamp = out.stat().st_mtime_ns
    assert flag_options.rewritten_program(env, F32_REDUCTIONS) == out and out.stat().st_mtime_ns == stamp
    assert flag_options.rewritten_program(env, CHAIN_CONCATS) is None
    assert env.ledger.counts[REWRITES] == 3  # found twice (one finds nothing), written once
    assert said == ["  f32-reductions: 1 to rewrite (ReduceSum of 4x8 f16)", f"  f32-reductions: written to {out}"]


def _three_linears() -> str:
    """Three f16 linears of three widths in a chain: three GEMM problems."""
    def t(*dims: int) -> str:
        return f"!torch.vtensor<[{','.join(map(str, dims))}],f16>"
    return f"""
func.func @main_graph(%x: {t(16, 64)}, %a: {t(64, 128)}, %b: {t(128, 64)}, %c: {t(64, 32)}) -> {t(16, 32)} attributes {META} {{
  %y = torch.operator "onnx.MatMul"(%x, %a) : ({t(16, 64)}, {t(64, 128)}) -> {t(16, 128)}
  %z = torch.operator "onnx.MatMul"(%y, %b) : ({t(16, 128)}, {t(128, 64)}) -> {t(16, 64)}
  %w = torch.operator "onnx.MatMul"(%z, %c) : ({t(16, 64)}, {t(64, 32)}) -> {t(16, 32)}
  return %w : {t(16, 32)}
}}
"""


def test_a_rewrites_kernels_are_made_side_by_side_first_and_the_program_is_the_same(tmp_path, monkeypatch):
    """prebuild: a first pass only asks for the kernels, threads make them (each once), and the
    rewrite then takes each from its source's cache: the program is what a plain rewrite writes."""
    import functools
    import threading

    from tests.test_external_gemm import _fixture_kernel
    from tuner.rewrite import Rewrite
    from tuner.rewrite import extern_call
    from tuner.rewrite.external_gemm import external_gemms

    monkeypatch.setattr(extern_call, "usable_cores", lambda: 4)
    made = []

    @functools.cache
    def source(problem, tiles):
        made.append((problem.name, threading.current_thread().name))
        return _fixture_kernel(problem, tiles)

    rewrite = Rewrite("gemms", functools.partial(external_gemms, source=source), "three GEMMs")
    program = tmp_path / "model.mlir"
    program.write_text(_three_linears())
    parsed = ParsedProgram(program)
    assert len(parsed.write(rewrite, tmp_path / "prebuilt.mlir", prebuild=True)) == 3
    assert sorted(name for name, _ in made) == ["gemm_16x128x64_f16", "gemm_16x32x64_f16", "gemm_16x64x128_f16"]
    assert all(thread.startswith("kernels") for _, thread in made)  # none made by the rewrite itself
    source.cache_clear()
    made.clear()
    assert len(ParsedProgram(program).write(rewrite, tmp_path / "plain.mlir")) == 3
    assert all(thread == "MainThread" for _, thread in made) and len(made) == 3
    assert (tmp_path / "prebuilt.mlir").read_text() == (tmp_path / "plain.mlir").read_text()


def test_kernels_that_cannot_be_made_beforehand_leave_their_sites_as_a_plain_rewrite_does(tmp_path):
    import functools

    from tuner.rewrite import Rewrite
    from tuner.rewrite.external_gemm import external_gemms

    def source(problem, tiles):
        raise ValueError(f"no kernel for {problem.name}")

    rewrite = Rewrite("gemms", functools.partial(external_gemms, source=source), "three GEMMs")
    program = tmp_path / "model.mlir"
    program.write_text(_three_linears())
    # no site taken, with the threads' failures or without them: nothing changed, no traceback
    assert ParsedProgram(program).changes(rewrite, prebuild=True) == ParsedProgram(program).changes(rewrite) == []


def _raising(module):
    raise KeyError("an op of a form the rewrite did not expect")


def test_a_rewrite_that_raises_changes_nothing_and_a_combination_is_applied_without_it(tmp_path):
    from tuner.rewrite import Rewrite, combined

    broken = Rewrite("broken", _raising, "raises on any program")
    parsed = ParsedProgram(_program(tmp_path))
    assert parsed.changes(broken) == []
    assert parsed.failures == {"broken": "KeyError: 'an op of a form the rewrite did not expect'"}
    both = combined([broken, F32_REDUCTIONS, CHAIN_CONCATS])
    assert both.names == ("broken", "f32-reductions", "chain-concats")
    assert parsed.write(both, tmp_path / "both.mlir") == ["ReduceSum of 4x8 f16"]
    assert rewrite_program(_program(tmp_path), F32_REDUCTIONS, tmp_path / "alone.mlir") == ["ReduceSum of 4x8 f16"]
    assert (tmp_path / "both.mlir").read_text() == (tmp_path / "alone.mlir").read_text()


def test_a_combination_of_combinations_is_flat_and_leaves_out_one_part():
    from tuner.rewrite import combined

    nested = combined([combined([F32_REDUCTIONS, CHAIN_CONCATS]), F32_REDUCTIONS])
    assert [p.name for p in nested.parts] == ["f32-reductions", "chain-concats", "f32-reductions"]
    assert nested.without("f32-reductions") is CHAIN_CONCATS
    assert F32_REDUCTIONS.without("f32-reductions") is None


def test_the_flag_stage_says_once_which_rewrite_failed_on_the_model_and_judges_the_others(tmp_path):
    from tuner.rewrite import Rewrite, combined

    said = []
    env = SimpleNamespace(model=_program(tmp_path), output_dir=tmp_path / "run", cache=RunCache(), ledger=Ledger(),
                          say=said.append)
    broken = Rewrite("broken", _raising, "raises on any program")
    assert flag_options.rewrite_changes(env, broken) == []
    assert flag_options.rewrite_changes(env, combined([F32_REDUCTIONS, broken])) == ["ReduceSum of 4x8 f16"]
    assert said == ["  broken: failed on this model and left out (KeyError: 'an op of a form the rewrite did not "
                    "expect')", "  f32-reductions+broken: 1 to rewrite (ReduceSum of 4x8 f16)"]
