"""The compile cache (tuner.compile_cache): an identical successful compile given back with its
module and dumps written where the new command asks; anything that differs in what the compile
reads, or its time limit, compiles again; failures and other tools are never kept."""

import os
from pathlib import Path

import pytest

from tests.conftest import write_matmul
from tuner import compile_cache
from tuner.targets import parse_target
from tuner.tools import find_tool, run_tool_retrying_a_hang


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(compile_cache.ENV, str(root))
    return root


def _compile(source: Path, cwd: Path, *extra: str, timeout_s: float = 300):
    cwd.mkdir(parents=True, exist_ok=True)
    return run_tool_retrying_a_hang([find_tool("iree-compile"), str(source), *parse_target("llvm-cpu").compile_flags,
                                     *extra, "--iree-hal-dump-executable-configurations-to=configs",
                                     "-o", "m.vmfb"], timeout_s, cwd=cwd)


@pytest.mark.slow
def test_an_identical_compile_is_given_back_with_its_module_and_dumps(cache, tmp_path):
    source = write_matmul(tmp_path / "mm.mlir", 16, 16, 16)
    first = _compile(source, tmp_path / "a")
    assert first.ok and len(list(cache.iterdir())) == 1
    again = _compile(source, tmp_path / "b")
    assert again.ok and again.stdout == first.stdout and again.seconds == first.seconds
    assert (tmp_path / "b" / "m.vmfb").read_bytes() == (tmp_path / "a" / "m.vmfb").read_bytes()
    assert sorted(p.name for p in (tmp_path / "b" / "configs").iterdir()) == \
        sorted(p.name for p in (tmp_path / "a" / "configs").iterdir()) != []
    # another input (same path, other content), another flag, another limit: compiled again
    write_matmul(source, 32, 16, 16)
    assert _compile(source, tmp_path / "c").ok
    assert _compile(source, tmp_path / "d", "--iree-opt-level=O3").ok
    assert _compile(source, tmp_path / "e", timeout_s=200).ok
    assert len(list(cache.iterdir())) == 4


@pytest.mark.slow
def test_a_failed_compile_is_not_kept(cache, tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f( {")
    assert not _compile(bad, tmp_path / "a").ok
    assert not cache.exists() or list(cache.iterdir()) == []


def test_only_iree_compile_is_identified_and_files_count_by_content(tmp_path):
    spec = tmp_path / "spec.mlir"
    spec.write_text("one")
    tool = find_tool("iree-compile")
    base = [tool, "--iree-codegen-tuning-spec-path=" + str(spec), "-o", "x.vmfb"]
    key = compile_cache._identity(base, 10, tmp_path)[0]
    assert compile_cache._identity(base[:-1] + ["y.vmfb"], 10, tmp_path)[0] == key  # where it writes: no part
    spec.write_text("two")
    assert compile_cache._identity(base, 10, tmp_path)[0] != key  # what the spec holds: a part
    assert compile_cache._identity([find_tool("iree-run-module"), "--module=x"], 10, tmp_path) is None
    assert os.environ.get(compile_cache.ENV)  # the suite runs with one (conftest)
