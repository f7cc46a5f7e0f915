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
