"""Names from a program never become paths (issue 60): a function whose name holds a path
separator, `..` or a control character is refused in one line by every command that reads the
program, before anything is written; and the one rule (tuner.core.names) on hand-picked names."""

import json
from pathlib import Path

import pytest

from tests.conftest import assert_one_error_line, run_cli
from tuner.core.names import shown, why_not_a_file_name

MATMUL = """
func.func @{name}(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
  %c = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{n}x{n}xf32>
  %f = linalg.fill ins(%c : f32) outs(%e : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) outs(%f : tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
  return %r : tensor<{n}x{n}xf32>
}}
"""


def test_the_name_rule_on_hand_picked_names():
    for name in ("main", "main$async_dispatch_0_matmul_64x64x64_f32", "forward.1", "my model", "ü"):
        assert why_not_a_file_name(name) is None, name
    assert "path separator" in why_not_a_file_name("../../ESC")
    assert "path separator" in why_not_a_file_name("a\\b")
    assert "directory" in why_not_a_file_name("..")
    assert "control character" in why_not_a_file_name("red\x1b[31m")
    assert "longer" in why_not_a_file_name("x" * 256)
    assert why_not_a_file_name("") and why_not_a_file_name(None)
    assert shown("main") == "main" and shown("a\nb") == "'a\\nb'"


# The hostile function is the larger matmul, so a run that took the largest would take it.
@pytest.mark.parametrize("name", ['"../../ESC"', '"red\\1B[31m"'])
@pytest.mark.parametrize("command", [("dispatches", "--profile"), ("tune", "--budget", "2"),
                                     ("tune-model", "--budget", "2")])
def test_a_function_named_like_a_path_is_refused_in_one_line_before_anything_is_written(tmp_path, name, command):
    program = tmp_path / "evil.mlir"
    program.write_text(MATMUL.format(name=name, n=64) + MATMUL.format(name="ok", n=32))
    box = tmp_path / "box"
    box.mkdir()
    result = run_cli(*command, program, "--output", box / "OUT")
    assert_one_error_line(result, 2, "rename the function")
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == [Path("box"), Path("evil.mlir")]


def test_a_public_function_named_dot_dot_runs_nothing_and_says_so(tmp_path):
    # Its dispatch is `.._dispatch_0_...`, a file name; the function's own name (its inputs, its
    # profile) is not: the dispatch is listed untuned with why, and `tune`, which would take it
    # (the larger), stops in one line naming the function.
    program = tmp_path / "dots.mlir"
    program.write_text(MATMUL.format(name='".."', n=64) + MATMUL.format(name="ok", n=32))
    listed = run_cli("dispatches", program, "--json", "--output", tmp_path / "D")
    entries = {d["name"]: d["entry"] for d in json.loads(listed.stdout)["dispatches"]}
    assert "'..' names a directory" in entries[".._dispatch_0_matmul_64x64x64_f32"]
    assert entries["ok_dispatch_0_matmul_32x32x32_f32"] == "ok"
    assert_one_error_line(run_cli("tune", program, "--budget", "2", "--output", tmp_path / "T"), 2,
                          "'..' names a directory")
    assert not [p for p in tmp_path.iterdir() if p.name not in ("dots.mlir", "D", "T")]
