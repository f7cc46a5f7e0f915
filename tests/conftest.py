"""Shared fixtures: an MLIR context, the CPU target, sample dispatches, synthetic dispatches."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import pytest
from iree.compiler import ir

from pipelines import DefaultConfig, Dispatch, DispatchKind, TargetFacts
from tuner.targets import parse_target

# The CLI's runs here do not wait for a load to pass before their confirmation rounds (a tiny
# dispatch on a shared 2-core CI host looks loaded often, and each wait costs up to 120 s); the
# waiting itself is tested with scripted timings and explicit settings (test_trusted_measurements).
os.environ.setdefault("IREE_TUNER_QUIET_WAIT", "0")
# Their timings are short, as the API's tests' are (min_time_s=0.01): what they check is what
# the tuner does with the figures, not the figures (test_cli checks that the option reaches the tool).
os.environ.setdefault("IREE_TUNER_MIN_TIME", "0.01")

SAMPLES = Path(__file__).resolve().parent.parent / "sample_dispatches"

MEMO_ENV = "IREE_TUNER_TEST_MEMO_DIR"  # the suite's remembering tools, made once and shared by its workers


def pytest_configure(config):
    """The suite's tools: iree-compile remembers what it compiled (tests.memo_tools), unless
    IREE_TUNER_TEST_MEMO=0 or $IREE_TUNER_TOOLS names tools of the user's. Made by the first
    process (pytest itself, before its workers start: they inherit the environment)."""
    import tempfile

    from tests.memo_tools import memo_tools
    from tuner.tools import TOOLS_ENV

    # Off, made already (a worker, or a run keeping its store), or other tools the user named.
    if os.environ.get("IREE_TUNER_TEST_MEMO") == "0" or MEMO_ENV in os.environ or os.environ.get(TOOLS_ENV):
        return
    root = Path(tempfile.mkdtemp(prefix="iree-tuner-test-compiles-"))
    os.environ[MEMO_ENV] = str(root)
    os.environ[TOOLS_ENV] = str(memo_tools(root / "tools", root / "store"))
    config._memo_root = root


def pytest_unconfigure(config):
    import shutil

    root = getattr(config, "_memo_root", None)
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def ctx() -> ir.Context:
    return ir.Context()


@pytest.fixture(scope="session")
def cpu():
    return parse_target("llvm-cpu")


@pytest.fixture(scope="session")
def samples() -> list[Path]:
    return sorted(SAMPLES.glob("*.mlir"))


def write_matmul(path: Path, m: int, n: int, k: int, dtype: str = "f32") -> Path:
    """A small matmul input file (kept small so that compiling and timing it is quick)."""
    path.write_text(f"""
func.func @mm(%a: tensor<{m}x{k}x{dtype}>, %b: tensor<{k}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}> {{
  %z = arith.constant 0.0 : {dtype}
  %e = tensor.empty() : tensor<{m}x{n}x{dtype}>
  %f = linalg.fill ins(%z : {dtype}) outs(%e : tensor<{m}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}x{dtype}>, tensor<{k}x{n}x{dtype}>) outs(%f : tensor<{m}x{n}x{dtype}>) -> tensor<{m}x{n}x{dtype}>
  return %r : tensor<{m}x{n}x{dtype}>
}}
""")
    return path


def rebuild_from_spec(input_path: Path, candidate, target, directory: Path, ctx):
    """Write the candidate's spec as best_spec.mlir, configure INPUT with plain iree-compile and
    the candidate's flags, and return the one configured root op read back."""
    from tuner.discovery.read_back import read_configured
    from tuner.build.compile import candidate_flags
    from tuner.tools import find_tool, run_tool

    spec = directory / "best_spec.mlir"
    spec.write_text(candidate.spec)
    run = run_tool([find_tool("iree-compile"), str(input_path), *candidate_flags(candidate, target, spec),
                    "--compile-to=executable-configurations"], 300)
    assert run.ok, run.stderr
    [configured] = read_configured([run.stdout], ctx)
    return configured


def corrupt_output(monkeypatch, candidate_id: int, factor: float = 1.5) -> None:
    """Spoil the result candidate `candidate_id` writes when it runs (scaled by `factor`): a wrong
    result, which the numerics check must catch."""
    import numpy as np

    import tuner.evaluation.measure as measure_mod

    real_run_once = measure_mod.run_once

    def corrupting_run_once(vmfb, settings, output):
        run = real_run_once(vmfb, settings, output)
        if f"/{candidate_id:04d}/" in str(vmfb):
            np.save(output, np.load(output) * factor)
        return run

    monkeypatch.setattr(measure_mod, "run_once", corrupting_run_once)


def run_cli(*args):
    """The CLI in this process (click's runner); arguments may be paths."""
    from click.testing import CliRunner

    from tuner.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def assert_one_error_line(result, code: int, text: str) -> None:
    """Bad input ends in one `error:` line holding `text`, exit `code`, and no traceback."""
    assert result.exit_code == code, result.output
    lines = [l for l in result.output.splitlines() if l.strip()]
    assert any(l.startswith("error: ") and text in l for l in lines), result.output
    assert "Traceback" not in result.output


def cli_process(*args, env=None):
    """The CLI as a process of its own, as `python -m tuner.cli` runs it (its own session, so a
    test can kill it and its tools)."""
    import os
    import subprocess
    import sys

    return subprocess.Popen([sys.executable, "-m", "tuner.cli", *map(str, args)], cwd=SAMPLES.parent,
                            env=env or dict(os.environ),
                            start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stored_rows(store: Path) -> list[dict]:
    """Every row of a result store, as a rerun would read them."""
    from tuner.store import ResultStore
    from tuner.versions import compiler_version, runtime_version

    with ResultStore(store, compiler_version(), runtime_version()) as s:
        return s.rows()


def kill_once_stored(process, store: Path, rows: int, within_s: float = 240) -> None:
    """Kill a CLI process (cli_process: it and every tool it started) with SIGKILL as soon as its
    result store holds `rows` results: mid-run, as a crash or an OOM kill would."""
    import os
    import signal
    import time

    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and process.poll() is None:
        if store.exists() and len(stored_rows(store)) >= rows:
            break
        time.sleep(0.2)
    assert process.poll() is None, process.stdout.read()
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@pytest.fixture
def small_matmul(tmp_path: Path) -> Path:
    return write_matmul(tmp_path / "mm.mlir", 128, 256, 64)


def synthetic_cpu_dispatch(m: int = 1024, n: int = 1024, k: int = 1024, avx512: bool = True,
                           vector_bytes: int = 64) -> Dispatch:
    """A matmul Dispatch built by hand: pipeline tests need no compiler run."""
    features = ("+avx", "+avx2", "+fma") + (("+avx512f",) if avx512 else ())
    return Dispatch(
        name="mm_dispatch_0",
        kind=DispatchKind.CONTRACTION,
        op_name="linalg.matmul",
        loop_bounds=(m, n, k),
        batch_dims=(),
        m_dims=(0,),
        n_dims=(1,),
        k_dims=(2,),
        lhs_type="f32",
        rhs_type="f32",
        out_type="f32",
        indexing_maps=("(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"),
        operand_dims=((0, 2), (2, 1), (0, 1)),
        target=TargetFacts(backend="llvm-cpu", arch="synthetic x86_64", cpu_features=features,
                           native_vector_bytes=vector_bytes),
        default=DefaultConfig(
            pipeline="#iree_cpu.pipeline<DoubleTilingExpert>",
            lowering_config="#iree_cpu.lowering_config<distribution = [64, 64, 0], "
                            "vector_common_parallel = [8, 16, 0], vector_reduction = [0, 0, 16]>",
            pipeline_id="iree_cpu.DoubleTilingExpert",
        ),
    )


_FAULTY_TOOL = '''#!{python}
"""An IREE tool that misbehaves on purpose where a rule says so, and is the real tool elsewhere."""
import json, os, signal, subprocess, sys, time
real = {real!r}[os.path.basename(sys.argv[0])]
args = sys.argv[1:]
where = " ".join(args) + " cwd=" + os.getcwd()
for tool, needle, action in json.load(open({rules!r})):
    if tool == os.path.basename(sys.argv[0]) and needle in where:
        if action == "hang":
            time.sleep(3600)
        elif action == "hang-once":  # the first such call hangs, later ones run (an intermittent deadlock)
            marker = {rules!r} + ".hung-" + "".join(c if c.isalnum() else "_" for c in needle)
            if not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(3600)
        elif action == "crash":
            os.kill(os.getpid(), signal.SIGSEGV)
        elif action == "fail":  # a compile error, as for a config the compiler rejects
            sys.stderr.write("error: failed to legalize operation (simulated)\\n")
            sys.exit(1)
        elif action.startswith("fail-in:"):  # a codegen failure in that dispatch, unless a spec configures it
            if any(a.endswith(".vmfb") for a in args) and not any(a.endswith("spec.mlir") or "spec.mlir@" in a for a in args):
                sys.stderr.write("error: 'func.func' op failed to distribute (simulated)\\n"
                                 '"func.func"() <{{sym_name = "' + action[len("fail-in:"):] + '"}}>\\n')
                sys.exit(1)
        elif action == "killed":  # as the out-of-memory killer does
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "disk-full":
            sys.stderr.write("LLVM ERROR: IO failure on output stream: No space left on device\\n")
            sys.exit(1)
        elif action == "linker-killed":  # the real compile, its linker killed as the out-of-memory killer does
            args = [*args, "--iree-llvmcpu-embedded-linker-path=" + os.path.join(os.path.dirname({rules!r}), "killed-lld")]
        elif action == "linker-hangs":  # the real compile, its linker writing a temporary file and never ending
            args = [*args, "--iree-llvmcpu-embedded-linker-path=" + os.path.join(os.path.dirname({rules!r}), "hanging-lld")]
        elif action == "slow":
            time.sleep(1.0)
        elif action.startswith("swap:"):  # run for real on other files: "swap:/0000/" puts 0000 for the needle
            args = [a.replace(needle, action[len("swap:"):]) for a in args]
        elif action == "corrupt":  # run for real, then spoil the output it wrote
            import numpy as np
            code = subprocess.call([real, *args])
            out = next(a for a in args if a.startswith("--output=@"))[len("--output=@"):]
            np.save(out, np.load(out) * 1.5)
            sys.exit(code)
os.execv(real, [real, *args])
'''


@pytest.fixture
def faulty_tools(tmp_path, monkeypatch):
    """IREE tools that hang, crash, are killed (or their linker is, or it hangs), find the disk full, run
    slowly or spoil their output where told to:
    `fault("iree-benchmark-module", "/0003/", "hang")` makes every call of that tool whose
    arguments (or working directory) contain "/0003/" hang ("hang-once": the first such call). Set through $IREE_TUNER_TOOLS, so
    subprocesses of the test (the CLI) see the same tools."""
    import json
    import sys

    from tuner.tools import TOOLS_ENV, find_tool

    names = ("iree-compile", "iree-run-module", "iree-benchmark-module", "iree-profile")
    real = {n: find_tool(n) for n in names}
    directory = tmp_path / "faulty-tools"
    directory.mkdir()
    rules_path = directory / "rules.json"
    rules: list = []
    rules_path.write_text("[]")
    for name in names:
        tool = directory / name
        tool.write_text(_FAULTY_TOOL.format(python=sys.executable, real=real, rules=str(rules_path)))
        tool.chmod(0o755)
    killed_lld = directory / "killed-lld"  # a linker the out-of-memory killer takes
    killed_lld.write_text("#!/bin/sh\nkill -9 $$\n")
    killed_lld.chmod(0o755)
    hanging_lld = directory / "hanging-lld"  # a linker that writes its object where TMPDIR says and waits
    hanging_lld.write_text('#!/bin/sh\ntouch "${TMPDIR:-/tmp}/lld-temp-$$.o"\nwhile true; do sleep 1; done\n')
    hanging_lld.chmod(0o755)
    monkeypatch.setenv(TOOLS_ENV, str(directory))

    def fault(tool: str, needle: str, action: str) -> None:
        rules.append([tool, needle, action])
        rules_path.write_text(json.dumps(rules))

    fault.clear = lambda: (rules.clear(), rules_path.write_text("[]"))  # type: ignore[attr-defined]
    return fault


_TIMED_BENCHMARK = '''#!{python}
"""iree-benchmark-module that times nothing: each candidate (by its directory, candidates/NNNN/)
takes a fixed, known time, multiplied by `factor` from call `after` + 1 on up to call `until` (a
machine whose load changes mid-run), or taking its time in `loaded` there (a load that slows
configs unevenly); `script` gives a candidate's times timing by timing (the last one repeats).
Calls are counted across processes in a file. Optional rules: `kill_at` (that
call kills the process that started the tool, as a dying benchmark worker), `crash` (the id of a
candidate whose timing crashes), `sleep` (seconds per call), `named` (a whole-model module's time
by a part of its path, the first that matches). Another module (a model's profile) is timed by
the real tool."""
import fcntl, json, os, re, signal, sys, time
config = json.load(open({config!r}))
args = sys.argv[1:]
module = next(a for a in args if a.startswith("--module="))
found = re.search(r"/(\\d{{4}})/", module)
named = [ms for part, ms in config.get("named", {{}}).items() if part in module]
if not found and not named:
    os.execv({real!r}, [{real!r}, *args])
reps = int(next(a for a in args if a.startswith("--benchmark_repetitions=")).split("=", 1)[1])
with open(config["counter"], "a+") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    calls = int(f.read() or 0) + 1
    f.seek(0)
    f.truncate()
    f.write(str(calls))
if calls == config.get("kill_at"):
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(1)
if named:  # a whole-model module, by a part of its path
    rows = [{{"run_type": "iteration", "real_time": named[0] * 1e6, "time_unit": "ns"}}] * reps
    print(json.dumps({{"benchmarks": rows}}))
    sys.exit(0)
candidate = int(found.group(1))
if candidate == config.get("crash"):
    os.kill(os.getpid(), signal.SIGSEGV)
time.sleep(config.get("sleep", 0))
ms = config["times"][str(candidate)]
script = config.get("script", {{}}).get(str(candidate))
if script:
    with open(config["counter"] + "." + str(candidate), "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        nth = int(f.read() or 0)
        f.seek(0)
        f.truncate()
        f.write(str(nth + 1))
    ms = script[min(nth, len(script) - 1)]
if config.get("after", 10 ** 9) < calls <= config.get("until", 10 ** 9):
    ms = config.get("loaded", {{}}).get(str(candidate), ms * config.get("factor", 1.0))
rows = [{{"run_type": "iteration", "real_time": ms * 1e6, "time_unit": "ns", "items_per_second": 1e3 / ms}}] * reps
print(json.dumps({{"benchmarks": rows}}))
'''


@pytest.fixture
def timed_tools(tmp_path, monkeypatch):
    """The real iree-compile and iree-run-module, and an iree-benchmark-module that reports a known
    time per candidate id: `timed_tools({0: 10.0, 1: 5.0}, after=10, factor=3.0)` (see
    _TIMED_BENCHMARK for `until`, `loaded` and `script`). Returns a
    function that reads how many timings were asked for."""
    import json
    import sys

    from tuner.tools import TOOLS_ENV, find_tool

    directory = tmp_path / "timed-tools"
    directory.mkdir()
    config = directory / "config.json"
    counter = directory / "calls"
    for name in ("iree-compile", "iree-run-module"):
        (directory / name).symlink_to(find_tool(name))
    tool = directory / "iree-benchmark-module"
    tool.write_text(_TIMED_BENCHMARK.format(python=sys.executable, config=str(config),
                                            real=find_tool("iree-benchmark-module")))
    tool.chmod(0o755)
    monkeypatch.setenv(TOOLS_ENV, str(directory))

    def configure(times: dict, after: int = 10 ** 9, factor: float = 1.0, until: int = 10 ** 9,
                  loaded: Optional[dict] = None, script: Optional[dict] = None, named: Optional[dict] = None):
        as_keys = lambda d: {str(k): v for k, v in (d or {}).items()}  # noqa: E731
        config.write_text(json.dumps({"times": as_keys(times), "after": after, "until": until, "factor": factor,
                                      "loaded": as_keys(loaded), "script": as_keys(script),
                                      "named": dict(named or {}), "counter": str(counter)}))
        counter.write_text("0")
        for old in directory.glob("calls.*"):
            old.unlink()
        return lambda: int(counter.read_text() or 0)

    return configure


def onnx_examples():
    """examples/onnx_models.py as a module: the ONNX models the examples and tests build."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("onnx_models", SAMPLES.parent / "examples" / "onnx_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXPORTS = Path(__file__).parent / "fixtures" / "exports"


def imported_exports(tmp_path_factory, *names: str) -> dict[str, Path]:
    """The tiny real exports `names` of tests/fixtures/exports, each imported once for llvm-cpu
    (iree-import-onnx), by name (skipped where onnx is not installed)."""
    pytest.importorskip("onnx")
    from tuner.input.models import program_source
    from tuner.targets import parse_target

    root = tmp_path_factory.mktemp("exports")
    return {name: program_source(EXPORTS / name / "model.onnx", root / name, parse_target("llvm-cpu")) for name in names}


def iree_compile(*args) -> None:
    """Plain iree-compile, as a test runs it to check that a result rebuilds: bounded in time, and
    run once more if it hung using no CPU (IREE 3.13's iree-compile deadlocks now and then: one
    such hang stalled this suite in a bare subprocess.run), so a hang decides the test instead
    of stalling the run. Fails the test with the compiler's first error."""
    from tuner.tools import find_tool, run_tool_retrying_a_hang

    run = run_tool_retrying_a_hang([find_tool("iree-compile"), *map(str, args)], 300.0)
    assert run.ok, run.first_error() or f"iree-compile timed out ({'hung' if run.hung else 'busy'})"


def extern_ptx(program: Path, tmp_path: Path, entry: str) -> list[str]:
    """`program` built by plain iree-compile for cuda (sm_80), its executables' binaries dumped:
    the PTX of each that has the entry `entry` (an external kernel's, embedded as it was given)."""
    from tuner.targets import parse_target

    binaries = tmp_path / "binaries"
    iree_compile(program, *parse_target("cuda").compile_flags, "-o", tmp_path / "m.vmfb",
                 f"--iree-hal-dump-executable-binaries-to={binaries}")
    return [p.read_text() for p in binaries.glob("*.ptx") if f".entry {entry}(" in p.read_text()]


def cpu_results(programs, shapes, tmp_path: Path, function: str = "f") -> dict:
    """Each program (an MLIR file) built for llvm-cpu and run on the same uniform(-1, 1) f32
    inputs of `shapes`: its single result by the program's stem (the rewrites' exactness tests)."""
    import numpy as np

    from tuner.evaluation.runtime_tools import ModuleRun, run_once
    from tuner.targets import parse_target

    rng = np.random.default_rng(0)
    inputs = []
    for i, shape in enumerate(shapes):
        inputs.append(tmp_path / f"input{i}.npy")
        np.save(inputs[-1], rng.uniform(-1, 1, shape).astype(np.float32))
    results = {}
    for program in programs:
        vmfb = tmp_path / f"{program.stem}.vmfb"
        iree_compile(str(program), *parse_target("llvm-cpu").compile_flags, "-o", str(vmfb))
        run = run_once(vmfb, ModuleRun("local-task", function, tuple(inputs)), tmp_path / f"{program.stem}.npy")
        assert run.ok, run.stderr
        results[program.stem] = np.load(tmp_path / f"{program.stem}.npy")
    return results


def rewrite_matches_onnx(model: Path, rewrite, x, tmp_path: Path) -> tuple[list[str], Path, Path]:
    """An ONNX model of one input `x` imported, rewritten by `rewrite`, built for llvm-cpu and its
    function (the graph's name) run on `x`: its result checked against onnx's reference evaluator on the original model (the
    rewrites' exactness tests). Returns what the rewrite changed, the import and the rewritten
    program."""
    import numpy as np
    import onnx
    from onnx.reference import ReferenceEvaluator

    from tuner.evaluation.runtime_tools import ModuleRun, read_output, run_once
    from tuner.input.models import program_source
    from tuner.rewrite import rewrite_program
    from tuner.targets import parse_target

    cpu = parse_target("llvm-cpu")
    imported = program_source(model, tmp_path, cpu)
    rewritten = tmp_path / "rewritten.mlir"
    changed = rewrite_program(imported, rewrite, rewritten)
    np.save(tmp_path / "x.npy", x)
    iree_compile(str(rewritten), *cpu.compile_flags, "-o", str(tmp_path / "rewritten.vmfb"))
    run = ModuleRun("local-task", onnx.load(model).graph.name, (tmp_path / "x.npy",), outputs=1, checked=0)
    assert run_once(tmp_path / "rewritten.vmfb", run, tmp_path / "y.npy").ok
    expected = ReferenceEvaluator(str(model)).run(None, {"x": x})[0]
    np.testing.assert_allclose(read_output(tmp_path / "y.npy", run), expected, rtol=1e-4, atol=1e-4)
    return changed, imported, rewritten


def save_onnx(path: Path, nodes: list, inits: list, x: list[int], out: tuple[str, list[int]]) -> None:
    """An f32 ONNX graph of one input "x" and one output (name, shape), named after the file's
    stem (the function iree-import-onnx makes of it), saved at opset 17."""
    import onnx
    from onnx import TensorProto, helper

    value = helper.make_tensor_value_info
    graph = helper.make_graph(nodes, path.stem, [value("x", TensorProto.FLOAT, x)],
                              [value(out[0], TensorProto.FLOAT, out[1])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
