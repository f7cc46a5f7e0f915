"""Nothing built twice (issue 62, item 3): a whole-model build is known by what defines it (the
program, the flags, the spec), so a second stage asking for the same build in a run compiles
nothing, and neither does a resumed run, whose directory holds the module with its recipe; a
build that differs in any of them is compiled. iree-compile is a fake that writes a module and
counts its calls."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from iree.compiler import ir

from tuner.stages import builtin, variants
from tuner.stages.base import StageEnv
from tuner.stages.builtin import build_once
from tuner.stages.variants import Variant, compile_variant
from tuner.targets import parse_target


@pytest.fixture
def compiles(monkeypatch):
    """The iree-compile calls made (each writes its module)."""
    made = []

    def fake_compile(argv, timeout_s, cwd):
        made.append(argv)
        (Path(cwd) / argv[argv.index("-o") + 1]).write_bytes(b"module")
        return SimpleNamespace(ok=True)

    monkeypatch.setattr(variants, "run_tool_retrying_a_hang", fake_compile)
    monkeypatch.setattr(variants, "find_tool", lambda name: name)
    return made


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.mlir"
    path.write_text("module {}\n")
    return path


def _env(model: Path, tmp_path: Path) -> StageEnv:
    return StageEnv(model=model, target=parse_target("llvm-cpu"), output_dir=tmp_path / "run", ctx=ir.Context(),
                    program=None, workload=None)


def test_a_second_stage_asking_for_the_same_build_compiles_nothing(model, tmp_path, compiles, monkeypatch):
    monkeypatch.setattr(builtin, "build_variant", lambda model, variant, target, directory, ctx, timeout_s:
                        compile_variant(model, variant, target, directory, "", timeout_s))
    env = _env(model, tmp_path)
    flag_stage = build_once(env, Variant("default"))
    merge = build_once(env, Variant("merge-reference"))  # another name, the same program and flags
    assert len(compiles) == 1 and merge is flag_stage
    build_once(env, Variant("o3", ("--iree-opt-level=O3",)))  # other flags: another build
    assert len(compiles) == 2


def test_a_resumed_run_compiles_nothing_its_directory_built_and_again_what_changed(model, tmp_path, compiles):
    target = parse_target("llvm-cpu")
    first = compile_variant(model, Variant("o3", ("--iree-opt-level=O3",)), target, tmp_path / "o3")
    again = compile_variant(model, Variant("o3", ("--iree-opt-level=O3",)), target, tmp_path / "o3")
    assert first.ok and again.ok and again.vmfb == first.vmfb and len(compiles) == 1
    model.write_text("module {\n}\n")  # the program changed since: its module is not the one there
    compile_variant(model, Variant("o3", ("--iree-opt-level=O3",)), target, tmp_path / "o3")
    assert len(compiles) == 2
