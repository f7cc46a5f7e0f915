"""External parameters: a model whose weights live in a parameter archive (iree-turbine exports,
`iree-import-onnx --externalize-params`) is tuned with `--parameters SCOPE=FILE`, which reaches
every runtime tool the run starts, is recorded by path in the run (so `benchmark DIR` on another
machine uses it, or the user's file there in its place) and in the rebuild line; without it, one
line says which scope is missing."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from tests.conftest import assert_one_error_line, iree_compile, run_cli
from tuner.errors import InputError
from tuner.input.parameters import check_scopes, on_this_machine, parse_parameters, required_scopes

PROGRAM = """
util.global private @w = #flow.parameter.named<"model"::"w"> : tensor<128x96xf32>
util.global private @b = #stream.parameter.named<"bias"> : tensor<96xf32>
"""


def test_the_scopes_a_program_reads_are_found_in_both_spellings():
    assert required_scopes(PROGRAM) == {"model", ""}
    assert required_scopes('util.global private @w = dense<1.0> : tensor<4xf32>') == set()


def test_parameters_are_checked_resolved_and_replaced_by_scope(tmp_path):
    archive, other = tmp_path / "w.irpa", tmp_path / "v.irpa"
    archive.write_bytes(b"x")
    other.write_bytes(b"y")
    assert parse_parameters([f"model={archive}", str(other)]) == (f"model={archive}", f"={other}")
    with pytest.raises(InputError, match="is not a readable file"):
        parse_parameters([f"model={tmp_path / 'missing.irpa'}"])
    with pytest.raises(InputError, match="scope 'model' given twice"):
        parse_parameters([f"model={archive}", f"model={other}"])
    with pytest.raises(InputError, match="expected SCOPE=FILE"):
        parse_parameters(["model="])
    # The program reads two scopes; one given: the other is named, with how to give it.
    with pytest.raises(InputError, match=r"external parameters \(the default scope\).*--parameters FILE.irpa"):
        check_scopes(tmp_path / "m.mlir", PROGRAM, (f"model={archive}",))
    check_scopes(tmp_path / "m.mlir", PROGRAM, (f"model={archive}", f"={other}"))
    # A recorded run: the user's file of a scope replaces the recorded one; a recorded file that
    # is not on this machine is one line.
    recorded = (f"model={tmp_path / 'gone.irpa'}", f"={other}")
    assert on_this_machine(recorded, [f"model={archive}"], "DIR") == (f"model={archive}", f"={other}")
    with pytest.raises(InputError, match="gone.irpa, which is not on this machine: give it with --parameters model=FILE"):
        on_this_machine(recorded, [], "DIR")


def _externalized_onnx(directory):
    """A one-layer ONNX model imported with its weight externalized, as iree-import-onnx does it
    for large models: the MLIR names `model::w`, the archive holds it."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from tuner.tools import find_tool, run_tool

    weight = numpy_helper.from_array((np.arange(128 * 96, dtype=np.float32).reshape(128, 96) % 5) / 5, "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "linear",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 96])], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), directory / "linear.onnx")
    run = run_tool([find_tool("iree-import-onnx"), str(directory / "linear.onnx"), "--externalize-params",
                    "--num-elements-threshold", "32", "--save-params-to", str(directory / "linear.irpa"),
                    "-o", str(directory / "linear.mlir")], 120)
    assert run.ok, run.stderr
    assert '#stream.parameter.named<"model"::"w">' in (directory / "linear.mlir").read_text()
    return directory / "linear.mlir", directory / "linear.irpa"


@pytest.mark.slow
def test_a_model_with_a_parameter_archive_is_tuned_on_two_machines_and_runs_rebuilt(tmp_path):
    pytest.importorskip("onnx")
    model, archive = _externalized_onnx(tmp_path)
    out = tmp_path / "out"
    # Without the archive: one line naming the scope.
    assert_one_error_line(run_cli("tune", model, "--output", out, "--compile-only"), 2,
                          "its weights are external parameters ('model')")
    compiled = run_cli("tune", model, "--num-candidates", "1", "--compile-only", "--output", out,
                       "--parameters", f"model={archive}", "--force")
    assert compiled.exit_code == 0, compiled.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["workload"]["parameters"] == [f"model={archive.resolve()}"]
    assert not list(out.rglob("*.irpa"))  # recorded by path, never copied
    # On "the device machine" the archive lies elsewhere: the recorded path is refused in one
    # line, the user's own path is used.
    there = tmp_path / "device" / "weights.irpa"
    there.parent.mkdir()
    shutil.move(archive, there)
    assert_one_error_line(run_cli("benchmark", out), 2, "which is not on this machine: give it with --parameters model=FILE")
    measured = run_cli("benchmark", out, "--parameters", f"model={there}", "--confirm-rounds", "1", "--repetitions", "1")
    assert measured.exit_code == 0, measured.output
    results = json.loads((out / "results.json").read_text())
    assert all(c["status"] == "ok" for c in results["candidates"]), results["candidates"]
    assert all(c["relative_error"] < 1e-4 for c in results["candidates"])
    assert results["parameters"] == [f"model={there.resolve()}"]
    # The rebuild line as printed, pasted into a shell with no environment activated (PATH
    # without the venv) from another directory; then the run line it prints, with an input.
    said = {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in measured.output.splitlines()
            if line.startswith(("rebuild with: ", "run it with: "))}
    assert said["rebuild with"].endswith(" -o OUT.vmfb") and f"--parameters=model={there.resolve()}" in said["run it with"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    x = np.random.default_rng(0).uniform(-1, 1, (64, 128)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    shell = subprocess.run(["bash", "-c", said["rebuild with"].replace("OUT.vmfb", str(tmp_path / "tuned.vmfb"))
                            + " && " + said["run it with"].replace("OUT.vmfb", str(tmp_path / "tuned.vmfb"))
                            + f" --input=@{tmp_path / 'x.npy'} --output=@{tmp_path / 'y.npy'}"],
                           cwd=elsewhere, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
                           capture_output=True, text=True, timeout=300)
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert f"wrote {tmp_path / 'tuned.vmfb'}" in " ".join(shell.stdout.split())
    w = (np.arange(128 * 96, dtype=np.float32).reshape(128, 96) % 5) / 5
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), x @ w, rtol=1e-4, atol=1e-4)
    # `iree-tuner run DIR` does the same: the entry, the device and the parameters from the run.
    ran = run_cli("run", out, "-m", tmp_path / "tuned.vmfb", "--input", f"@{tmp_path / 'x.npy'}",
                  "--input", "ignored=1")  # one input too many: iree-run-module's own error, one line
    assert ran.exit_code == 5 and "iree-run-module did not run" in ran.output, ran.output
    ran = run_cli("run", out, "-m", tmp_path / "tuned.vmfb", "--input", f"@{tmp_path / 'x.npy'}")
    assert ran.exit_code == 0 and "EXEC @linear" in ran.output and "64x96xf32" in ran.output, ran.output
    # Without --input, on the inputs the tuning ran on (it failed with IREE's "expected 1 arguments
    # but passed 0", issue 63).
    ran = run_cli("run", out, "-m", tmp_path / "tuned.vmfb")
    assert ran.exit_code == 0 and "EXEC @linear" in ran.output and "64x96xf32" in ran.output, ran.output
    assert "no --input given: running it on the inputs the tuning ran on (1 in" in ran.output


@pytest.mark.slow
def test_a_model_reading_a_parameter_archive_runs_in_process_as_iree_run_module_runs_it(tmp_path):
    """The in-process loader of GPU timing inside the model (tuner.evaluation.in_model), on the
    CPU: the archive mounted under its scope, the same result as the runtime tool's."""
    pytest.importorskip("onnx")
    from tuner.evaluation.in_model import LoadedModule
    from tuner.evaluation.runtime_tools import ModuleRun, read_output, run_once
    from tuner.input.parameters import runtime_flags

    model, archive = _externalized_onnx(tmp_path)
    iree_compile(model, "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                 "-o", tmp_path / "linear.vmfb")
    x = tmp_path / "input0.npy"
    np.save(x, np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32))
    settings = ModuleRun("local-task", "linear", (x,), runtime_flags=runtime_flags(parse_parameters([f"model={archive}"])))
    out = LoadedModule(tmp_path / "linear.vmfb", settings).call()
    mine = (out[0] if isinstance(out, (list, tuple)) else out).to_host()
    assert run_once(tmp_path / "linear.vmfb", settings, tmp_path / "out").ok
    np.testing.assert_allclose(mine, read_output(tmp_path / "out", settings), rtol=1e-6)
    assert np.abs(mine).max() > 0  # the weights were read (a zero archive would pass the comparison)
