"""The suite's remembering iree-compile (tests.memo_tools) must give what the real tool gives: a
program compiled again from another path is not compiled again and gives the same module and
dumps; other flags or other bytes are compiled; a failing compile fails again naming the path it
was given."""

import subprocess
from pathlib import Path

import pytest

from tests.conftest import write_matmul
from tests.memo_tools import memo_tools

CPU = ["--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
       "--iree-llvmcpu-target-cpu=generic"]


@pytest.fixture
def tools(tmp_path, monkeypatch):
    from tuner.tools import TOOLS_ENV

    monkeypatch.delenv(TOOLS_ENV, raising=False)  # the real tools behind the shim, not the suite's own shim
    store = tmp_path / "store"
    return memo_tools(tmp_path / "tools", store), store


def _compile(tools: Path, cwd: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([str(tools / "iree-compile"), *map(str, args)], cwd=cwd, capture_output=True, text=True)


def _hits(store: Path) -> int:
    log = store / "compiles.log"
    return sum(line.startswith("remembered ") for line in log.read_text().splitlines()) if log.exists() else 0


@pytest.mark.slow
def test_a_program_compiled_again_elsewhere_is_remembered_with_its_module_and_dumps(tools, tmp_path):
    tools, store = tools
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    for d in (a, b):
        write_matmul(d / "mm.mlir", 32, 32, 16)
        first = _compile(tools, d, d / "mm.mlir", *CPU, "--iree-hal-dump-executable-configurations-to=configs",
                         "-o", "mm.vmfb")
        assert first.returncode == 0, first.stderr
    assert _hits(store) == 1  # b's compile was a's, remembered
    assert (a / "mm.vmfb").read_bytes() == (b / "mm.vmfb").read_bytes()
    [config] = sorted(p.name for p in (b / "configs").iterdir())
    assert (a / "configs" / config).read_bytes() == (b / "configs" / config).read_bytes()
    # Another flag, or other bytes: compiled.
    other = _compile(tools, b, b / "mm.mlir", *CPU, "--iree-opt-level=O1", "-o", "o1.vmfb")
    write_matmul(b / "mm.mlir", 32, 32, 8)
    smaller = _compile(tools, b, b / "mm.mlir", *CPU, "-o", "k8.vmfb")
    assert other.returncode == 0 and smaller.returncode == 0 and _hits(store) == 1


@pytest.mark.slow
def test_a_failing_compile_fails_again_naming_the_path_it_was_given(tools, tmp_path):
    tools, store = tools
    said = []
    for name in ("one.mlir", "two.mlir"):
        bad = tmp_path / name
        bad.write_text("func.func @f() {\n  %x = arith.constant 1 : i32\n  return %x : i32\n}\n")
        run = _compile(tools, tmp_path, bad, *CPU, "-o", "bad.vmfb")
        assert run.returncode != 0
        said.append(run.stderr)
    assert _hits(store) == 1
    assert str(tmp_path / "one.mlir") in said[0] and str(tmp_path / "two.mlir") in said[1], said
    assert str(store) not in said[0] + said[1]
