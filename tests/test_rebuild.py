"""`iree-tuner rebuild DIR -o OUT.vmfb` (tuner.report.rebuild): what it refuses, in one line each,
and the line the tuner prints for it (an end-to-end rebuild and run of a model with parameters,
pasted into a shell without the environment: tests/test_parameters.py)."""

import json
import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import assert_one_error_line, run_cli
from tuner.report.rebuild import read_flags, read_rebuild, rebuild_line


def _run_dir(tmp_path: Path, kind: str = "", parameters=()) -> Path:
    """A finished run's directory as the tuner writes it: results.json, the flags file naming a spec."""
    out = tmp_path / "run"
    out.mkdir()
    program = tmp_path / "model.mlir"
    program.write_text("func.func @f() { return }\n")
    (out / "model_spec.mlir").write_text("module {}\n")
    flags = "model_flags.txt" if kind == "model" else "best_flags.txt"
    (out / flags).write_text(f'--iree-hal-target-device=local\n"--iree-codegen-tuning-spec-path={out / "model_spec.mlir"}"\n')
    (out / "results.json").write_text(json.dumps({"kind": kind, "input": str(program), "entry": "f",
                                                  "parameters": list(parameters)}))
    from tuner.run_dir import input_digest

    (out / "run.json").write_text(json.dumps({"input": str(program), "input_digest": input_digest(program)}))
    return out


def test_a_directory_without_a_finished_run_is_one_line(tmp_path):
    assert_one_error_line(run_cli("rebuild", tmp_path, "-o", tmp_path / "o.vmfb"), 2, "no results.json")


def test_a_program_or_spec_that_is_gone_is_named(tmp_path):
    out = _run_dir(tmp_path)
    (out / "model_spec.mlir").unlink()
    assert_one_error_line(run_cli("rebuild", out, "-o", tmp_path / "o.vmfb"), 2, "model_spec.mlir, which is gone")
    (tmp_path / "model.mlir").unlink()
    assert_one_error_line(run_cli("rebuild", out, "-o", tmp_path / "o.vmfb"), 2, "model.mlir, which is gone")


def test_a_model_run_rebuilds_from_model_flags_and_says_how_to_run_with_its_parameters(tmp_path):
    out = _run_dir(tmp_path, "model", ["model=/data/w.irpa"])
    target = read_rebuild(out)
    assert target.flags_file.name == "model_flags.txt" and target.source == tmp_path / "model.mlir"
    compile_command = target.compile_command("o.vmfb")
    assert Path(compile_command[0]).is_absolute() and compile_command[1:] == [
        str(tmp_path / "model.mlir"), f"@{out / 'model_flags.txt'}", "-o", "o.vmfb"]
    run = target.run_command("o.vmfb")
    assert Path(run[0]).is_absolute() and run[1:] == ["--module=o.vmfb", "--function=f", "--parameters=model=/data/w.irpa"]


def test_the_printed_line_names_this_tuner_and_the_directory_by_absolute_paths(tmp_path, monkeypatch):
    out = _run_dir(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = shlex.split(rebuild_line(Path("run")))
    assert Path(line[0]).is_absolute() and Path(line[0]).parent == Path(sys.executable).parent or line[:3] == [
        sys.executable, "-m", "tuner.cli"]
    assert line[-4:] == ["rebuild", str(out.resolve()), "-o", "OUT.vmfb"]


def test_an_output_that_is_a_directory_is_refused(tmp_path):
    out = _run_dir(tmp_path)
    assert_one_error_line(run_cli("rebuild", out, "-o", tmp_path), 4, "a directory")


def test_run_without_the_rebuilt_module_says_how_to_make_it(tmp_path):
    out = _run_dir(tmp_path)
    assert_one_error_line(run_cli("run", out, "-m", tmp_path / "none.vmfb"), 2, f"iree-tuner rebuild {out}")


@pytest.mark.slow
def test_a_rebuild_whose_compile_hangs_once_is_killed_when_idle_and_run_again(tmp_path, faulty_tools, monkeypatch):
    # IREE 3.13's iree-compile now and then hangs with no CPU (seen in a fresh clone's walk-through:
    # a parameter model's rebuild sat idle for 8 minutes); the rebuild kills it and compiles again.
    from tuner import tools
    from tuner.report.rebuild import rebuild

    monkeypatch.setattr(tools, "COMPILE_IDLE_S", 1.0)
    out = _run_dir(tmp_path)
    (out / "best_flags.txt").write_text("--iree-hal-target-device=local\n--iree-hal-local-target-device-backends=llvm-cpu\n")
    faulty_tools("iree-compile", "model.mlir", "hang-once")
    rebuild(out, tmp_path / "o.vmfb", timeout_s=120.0)
    assert (tmp_path / "o.vmfb").is_file() and list(tmp_path.glob("faulty-tools/rules.json.hung-*"))


def test_flags_and_a_program_a_directory_did_not_get_from_its_run_are_refused(tmp_path):
    # Issue 60: a dump flag in best_flags.txt made `rebuild` write outside the directory, and a
    # results.json naming another file had it compiled.
    out = _run_dir(tmp_path)
    flags = (out / "best_flags.txt").read_text()
    elsewhere = tmp_path / "elsewhere"
    for bad, said in ((f"--iree-hal-dump-executable-sources-to={elsewhere}", "makes the compiler write files"),
                      (f"--iree-codegen-tuning-spec-path={tmp_path / 'other.mlir'}", "outside"),
                      ("-o", "not an IREE compiler flag")):
        (out / "best_flags.txt").write_text(flags + bad + "\n")
        assert_one_error_line(run_cli("rebuild", out, "-o", tmp_path / "x.vmfb"), 2, said)
    assert not elsewhere.exists() and not (tmp_path / "x.vmfb").exists()
    (out / "best_flags.txt").write_text(flags)
    assert read_rebuild(out).source == tmp_path / "model.mlir"  # the run's own input: taken
    results = json.loads((out / "results.json").read_text())
    other = tmp_path / "other.mlir"
    other.write_text("func.func @g() { return }\n")
    (out / "results.json").write_text(json.dumps({**results, "input": str(other)}))
    assert_one_error_line(run_cli("rebuild", out, "-o", tmp_path / "x.vmfb"), 2, "not the input this directory's run")


@pytest.mark.slow
def test_a_manifest_whose_flags_would_make_the_compiler_write_elsewhere_is_refused(tmp_path, small_matmul):
    # Issue 60: a manifest's base flags reached best_flags.txt unchecked.
    elsewhere = tmp_path / "elsewhere"
    compiled = tmp_path / "compiled"
    assert run_cli("tune", small_matmul, "--budget", "1", "--compile-only", "--output", compiled).exit_code == 0
    manifest = json.loads((compiled / "manifest.json").read_text())
    manifest["candidates"][0]["base_flags"].append(f"--iree-hal-dump-executable-sources-to={elsewhere}")
    (compiled / "manifest.json").write_text(json.dumps(manifest))
    assert_one_error_line(run_cli("benchmark", compiled), 2, "makes the compiler write files")
    assert not elsewhere.exists() and not (compiled / "best_flags.txt").exists()


def test_a_flags_file_naming_a_path_with_a_newline_is_read_as_iree_compile_reads_it(tmp_path):
    # Issue 60 (minor): the file was split into lines before its quoting was read ("not a
    # readable flags file (No closing quotation)"); iree-compile reads it whole.
    from tuner.report.outputs import response_file

    out = _run_dir(tmp_path)
    odd = out / 'spec "dir"\nsecond line'
    odd.mkdir()
    (odd / "model_spec.mlir").write_text("module {}\n")
    flag = f"--iree-codegen-tuning-spec-path={odd / 'model_spec.mlir'}"
    (out / "best_flags.txt").write_text(response_file(["--iree-hal-target-device=local", flag]))
    assert read_flags(out / "best_flags.txt") == ["--iree-hal-target-device=local", flag]
    assert read_rebuild(out).flags_file == (out / "best_flags.txt").resolve()
