"""A run's directory and processes: one run per output directory (and kill -9 never blocks the
next), another input's directory refused unless --force, compile-only keeps every build through
kill -9, SIGTERM leaves no tool behind, the benchmark stage opens nothing outside its directory,
and bad values are one error line."""

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_error_line, cli_process, run_cli, write_matmul, iree_compile
from tuner.run_dir import LOCK, RunDirectory
from tuner.tools import find_tool

REPO = Path(__file__).resolve().parent.parent


def _processes_mentioning(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (e.g. a test's temporary directory)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().split()[2]
            except OSError:
                continue
            if text in cmdline and state != "Z":
                found.append(cmdline)
    return found


def test_a_second_run_on_a_locked_output_fails_naming_the_holder(tmp_path, small_matmul):
    out = tmp_path / "out"
    with RunDirectory(out):
        result = run_cli("tune", small_matmul, "--output", out, "--num-candidates", "1")
        assert_one_error_line(result, 6, f"is in use by another run (pid {os.getpid()}")
        assert_one_error_line(run_cli("benchmark", out), 6, "is in use by another run")
    # `report` only reads: it takes no lock (and here finds nothing to report).
    with RunDirectory(out):
        assert_one_error_line(run_cli("report", out), 2, "no results.json")


def test_a_holder_killed_with_sigkill_never_blocks_the_next_run(tmp_path):
    out = tmp_path / "out"
    code = (f"from tuner.run_dir import RunDirectory; import time; r = RunDirectory(__import__('pathlib').Path({str(out)!r})); "
            f"r.__enter__(); print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    try:
        with RunDirectory(out):
            raise AssertionError("the lock was not held")
    except Exception as e:
        assert "in use by another run" in str(e) and f"pid {holder.pid}" in str(e)
    holder.kill()
    holder.wait()
    with RunDirectory(out):  # the kernel dropped the dead holder's lock
        assert (out / LOCK).exists()


@pytest.mark.slow
def test_another_inputs_directory_is_refused_and_force_clears_it(tmp_path):
    a = write_matmul(tmp_path / "a.mlir", 64, 64, 32)
    b = write_matmul(tmp_path / "b.mlir", 96, 64, 32)
    out = tmp_path / "out"
    first = run_cli("tune", a, "--output", out, "--num-candidates", "1", "--compile-only")
    assert first.exit_code == 0, first.output
    digest_a = json.loads((out / "manifest.json").read_text())["meta"]["input_digest"]
    assert_one_error_line(run_cli("tune", b, "--output", out, "--num-candidates", "1", "--compile-only"), 7,
                    "holds the run of another input")
    assert_one_error_line(run_cli("tune", a, "--target", "cuda", "--output", out, "--num-candidates", "1", "--compile-only"), 7,
                    "holds the run of another input")
    assert json.loads((out / "manifest.json").read_text())["meta"]["input_digest"] == digest_a  # untouched
    forced = run_cli("tune", b, "--output", out, "--num-candidates", "1", "--compile-only", "--force")
    assert forced.exit_code == 0, forced.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["meta"]["input_digest"] != digest_a and manifest["meta"]["input"].endswith("b.mlir")
    assert len(manifest["candidates"]) == 2


@pytest.mark.slow
def test_compile_only_keeps_every_build_through_kill_9_and_the_rerun_builds_only_the_rest(tmp_path, faulty_tools):
    path = write_matmul(tmp_path / "mm.mlir", 128, 256, 64)
    out = tmp_path / "out"
    args = ["tune", path, "--num-candidates", "6", "--compile-only", "--output", out]
    faulty_tools("iree-compile", "candidates/", "slow")  # a second per compile: time to kill it
    first = cli_process(*args)
    deadline = time.monotonic() + 240
    manifest = out / "manifest.json"
    built_before = {}
    while time.monotonic() < deadline and first.poll() is None:
        if manifest.exists():
            entries = json.loads(manifest.read_text())["candidates"]
            if len(entries) >= 2:
                built_before = {e["result"]["key"]: (out / e["vmfb"]).stat().st_mtime_ns for e in entries}
                break
        time.sleep(0.1)
    assert first.poll() is None, first.stdout.read()
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    assert 2 <= len(built_before) < 7
    faulty_tools.clear()
    second = cli_process(*args)
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    entries = json.loads(manifest.read_text())["candidates"]
    assert len(entries) == 7 and all(e["result"]["status"] == "ok" for e in entries)
    # What the killed run built is kept as it was: not compiled again.
    mtimes = {e["result"]["key"]: (out / e["vmfb"]).stat().st_mtime_ns for e in entries}
    assert all(mtimes[k] == t for k, t in built_before.items())


@pytest.mark.slow
def test_a_compile_killed_or_out_of_disk_is_not_stored_as_a_fact_and_the_next_run_compiles_it(tmp_path, faulty_tools):
    path = write_matmul(tmp_path / "mm.mlir", 128, 256, 64)
    out = tmp_path / "out"
    args = ["tune", path, "--num-candidates", "4", "--compile-only", "--output", out]
    faulty_tools("iree-compile", "candidates/0001", "killed")
    faulty_tools("iree-compile", "candidates/0002", "disk-full")
    faulty_tools("iree-compile", "candidates/0003", "linker-killed")  # iree-compile exits 1, its linker killed
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    statuses = {e["result"]["candidate_id"]: e["result"]["status"]
                for e in json.loads((out / "manifest.json").read_text())["candidates"]}
    assert statuses == {0: "ok", 1: "compile_interrupted", 2: "compile_interrupted", 3: "compile_interrupted",
                        4: "ok"}, first.output
    faulty_tools.clear()
    run_cli(*args)
    statuses = {e["result"]["candidate_id"]: e["result"]["status"]
                for e in json.loads((out / "manifest.json").read_text())["candidates"]}
    assert statuses == {0: "ok", 1: "ok", 2: "ok", 3: "ok", 4: "ok"}


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_end_a_run_like_sigint_and_leave_no_tool_behind(tmp_path, faulty_tools, signum):
    path = write_matmul(tmp_path / "mm.mlir", 128, 256, 64)
    out = tmp_path / "out"
    faulty_tools("iree-benchmark-module", "candidates/", "hang")
    run = cli_process("tune", path, "--num-candidates", "2", "--output", out, "--repetitions", "1")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any("iree-benchmark-module" in p for p in _processes_mentioning(str(tmp_path))):
        assert run.poll() is None, run.stdout.read()
        time.sleep(0.1)
    os.kill(run.pid, signum)  # the tuner alone, as a service manager, `timeout` or a closed terminal would
    output, _ = run.communicate(timeout=60)
    assert run.returncode == 128 + signum, output
    assert "terminated: every result measured so far is kept" in output and "Traceback" not in output
    time.sleep(0.5)
    assert _processes_mentioning(str(tmp_path)) == []


STUCK_IN_C = """
import ctypes, signal, threading, time
from tuner.cli.options import terminate, watch_for_stop
signal.signal(signal.SIGTERM, terminate)
watch_for_stop(grace_s=1.0)
mutex = ctypes.create_string_buffer(64)  # zeroed: a default pthread mutex, unlocked
libc = ctypes.CDLL(None)
libc.pthread_mutex_lock(mutex)
# Said by another thread once the main one is in the call (said before it, a signal could come
# while the main thread still runs Python, and its handler would end the run the ordinary way).
threading.Thread(target=lambda: (time.sleep(1.0), print("stuck in C", flush=True)), daemon=True).start()
libc.pthread_mutex_lock(mutex)  # locked again by its holder: never returns, whatever the signals
"""


def test_a_run_whose_main_thread_is_stuck_in_a_c_call_still_ends_after_sigterm(tmp_path):
    """Python runs a signal's handler only in the main thread, between bytecodes: stuck in C
    (here a mutex that never unlocks), the run would never see SIGTERM. The stop watcher reads
    the signal from the interpreter's wakeup fd and ends the process after its grace."""
    script = tmp_path / "stuck.py"
    script.write_text(STUCK_IN_C)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "stuck in C"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # without the watcher it never ends
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert "stopped: the run did not end within 1 s of the signal" in err


@pytest.mark.slow
def test_a_tuner_killed_with_sigkill_leaves_no_tool_behind(tmp_path, faulty_tools):
    path = write_matmul(tmp_path / "mm.mlir", 128, 256, 64)
    faulty_tools("iree-benchmark-module", "candidates/", "hang")
    run = cli_process("tune", path, "--num-candidates", "2", "--output", tmp_path / "out", "--repetitions", "1")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any("iree-benchmark-module" in p for p in _processes_mentioning(str(tmp_path))):
        assert run.poll() is None, run.stdout.read()
        time.sleep(0.1)
    os.kill(run.pid, signal.SIGKILL)  # the tuner alone: no handler runs, as after an OOM kill
    run.wait(timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _processes_mentioning(str(tmp_path)):
        time.sleep(0.1)
    assert _processes_mentioning(str(tmp_path)) == []


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_tuner_killed_with_sigkill_leaves_no_linker_and_no_linker_files_behind(tmp_path, faulty_tools):
    # iree-compile starts its linker as a child; the parent-death signal reaches iree-compile
    # alone, and a hostile probe found `sh` and `iree-lld` running with parent 1 after kill -9,
    # their objects left in /tmp. Here the linker writes a file where TMPDIR says and waits.
    path = write_matmul(tmp_path / "mm.mlir", 128, 256, 64)
    faulty_tools("iree-compile", "candidates/", "linker-hangs")
    temp = tmp_path / "tmp"
    temp.mkdir()
    run = cli_process("tune", path, "--num-candidates", "2", "--output", tmp_path / "out", "--repetitions", "1",
                      env={**os.environ, "TMPDIR": str(temp)})
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not list(temp.rglob("lld-temp-*")):  # the linker's own file
        assert run.poll() is None, run.stdout.read()
        time.sleep(0.1)
    assert list(temp.rglob("lld-temp-*")), "the linker never started"
    os.kill(run.pid, signal.SIGKILL)  # the tuner alone: no handler runs
    run.wait(timeout=60)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (_processes_mentioning(str(tmp_path)) or list(temp.rglob("lld-temp-*"))):
        time.sleep(0.1)
    assert _processes_mentioning(str(tmp_path)) == []
    assert list(temp.rglob("lld-temp-*")) == []


@pytest.mark.parametrize("name", ["iree-compile", "iree-benchmark-module", "iree-run-module"])
def test_the_tools_run_are_the_wheels_executables_not_the_venvs_python_scripts(name, monkeypatch):
    # A venv's console script is a Python process that starts the executable as its own child:
    # the parent-death signal set on the tool reached the script, not the executable, which a
    # tuner killed with SIGKILL left running (6 of 12 kill -9 runs of a hostile probe).
    from tuner.tools import TOOLS_ENV, find_tool

    monkeypatch.delenv(TOOLS_ENV, raising=False)
    with open(find_tool(name), "rb") as f:
        assert f.read(4) == b"\x7fELF"


def _compiled_dir(tmp_path):
    path = write_matmul(tmp_path / "mm.mlir", 64, 64, 32)
    out = tmp_path / "compiled"
    result = run_cli("tune", path, "--output", out, "--num-candidates", "1", "--compile-only")
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow
def test_benchmark_opens_nothing_outside_its_directory(tmp_path):
    out = _compiled_dir(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    for bad in ("../elsewhere/candidate.vmfb", "/etc/passwd", "candidates/../../x.vmfb"):
        changed = json.loads(json.dumps(manifest))
        changed["candidates"][0]["vmfb"] = bad
        (out / "manifest.json").write_text(json.dumps(changed))
        assert_one_error_line(run_cli("benchmark", out), 2, "outside the directory")
    (out / "elsewhere").mkdir()
    (out / "candidates" / "link").symlink_to(tmp_path)  # a link that leaves the directory
    changed = json.loads(json.dumps(manifest))
    changed["candidates"][0]["vmfb"] = "candidates/link/mm.mlir"
    (out / "manifest.json").write_text(json.dumps(changed))
    assert_one_error_line(run_cli("benchmark", out), 2, "leads outside the directory")


@pytest.mark.slow
def test_malformed_manifest_values_are_one_error_line(tmp_path):
    out = _compiled_dir(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    for field, value, text in (("element_type", "f128", "unknown element type 'f128'"),
                               ("shape", [64, -1], "not a list of non-negative dimensions"),
                               ("shape", [1e23], "not a list of non-negative dimensions")):
        changed = json.loads(json.dumps(manifest))
        changed["workload"]["inputs"][0][field] = value
        (out / "manifest.json").write_text(json.dumps(changed))
        assert_one_error_line(run_cli("benchmark", out), 2, text)


@pytest.mark.slow
def test_a_tampered_manifest_cannot_name_a_winner_nothing_timed(tmp_path):
    # Two candidates of other executables under one key (one would take the other's rounds); a candidate marked reused
    # with a status of ok and prefilled "wins" at 50x, and no module: refused before anything is
    # timed, and no result is written.
    out = _compiled_dir(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    twice = json.loads(json.dumps(manifest))
    twice["candidates"][1]["result"]["key"] = twice["candidates"][0]["result"]["key"]
    forged = json.loads(json.dumps(manifest))
    forged["candidates"][1].update({"reused": True, "vmfb": None})
    forged["candidates"][1]["result"].update({"status": "ok", "median_ms": 0.001, "round_ratios": [50.0] * 50})
    for changed, text in ((twice, "candidates of other executables share the key"),
                          (forged, "candidate 1 is marked reused with status ok")):
        (out / "manifest.json").write_text(json.dumps(changed))
        assert_one_error_line(run_cli("benchmark", out), 2, text)
        assert not (out / "results.json").exists() and not (out / "best_spec.mlir").exists()


def test_huge_knob_values_in_configs_are_one_error_line(tmp_path, small_matmul, ctx, cpu):
    from pipelines import pipeline_for
    from tuner.specs.candidates import generate_candidates
    from tuner.discovery.program import discover

    [dispatch] = discover(small_matmul, cpu, ctx)
    knobs = dict(generate_candidates(dispatch, pipeline_for(dispatch), 1, ctx)[1].config.knobs)
    configs = tmp_path / "configs.json"
    for value, text in ((10 ** 23, "out of range"), (1e23, "must be integers or booleans")):
        configs.write_text(json.dumps([{**knobs, "distribution_m": value}]))
        assert_one_error_line(run_cli("benchmark", small_matmul, "--configs", configs, "--output", tmp_path / "o"), 2, text)


@pytest.mark.slow
def test_unwritable_places_are_one_error_line(tmp_path):
    out = _compiled_dir(tmp_path)
    # A directory the benchmark stage cannot write its lock into (as a read-only one would be for
    # a user without root), with the store elsewhere.
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    for name in ("manifest.json", "candidates"):
        os.rename(out / name, blocked / name)
    (blocked / LOCK).mkdir()
    assert_one_error_line(run_cli("benchmark", blocked, "--store", tmp_path / "elsewhere.sqlite"), 4,
                    "cannot write to output directory")
    # `report` where its plot cannot be written.
    results = tmp_path / "done"
    results.mkdir()
    (results / "results.json").write_text(json.dumps({"candidates": []}))
    (results / "results.png").mkdir()
    assert_one_error_line(run_cli("report", results), 4, "cannot write")


def test_asking_for_more_candidates_than_the_space_holds_stops_and_says_how_many(tmp_path):
    tiny = write_matmul(tmp_path / "tiny.mlir", 4, 4, 4)
    result = run_cli("candidates", tiny, "--num-candidates", "100000")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "the space holds" in text and "fewer than the 100000 asked for" in text
    held = int(text.split("the space holds ")[1].split()[0])
    assert 1 <= held < 100000 and f"{held + 1} candidates (baseline included)" in text


@pytest.mark.slow
def test_the_timed_dispatch_module_must_carry_the_config(small_matmul, tmp_path, ctx, cpu, faulty_tools):
    from dataclasses import replace

    from pipelines import pipeline_for
    from tuner.specs.candidates import generate_candidates
    from tuner.discovery.program import discover_program
    from tuner.evaluation.evaluator import Sequential
    from tuner.core.results import Status
    from tuner.core.settings import EvalSettings
    from tuner.store import ResultStore
    from tuner.versions import compiler_version, runtime_version

    dispatch_only = replace(cpu, time_dispatch_only=True)
    program = discover_program(small_matmul, cpu, ctx)
    [dispatch] = program.dispatches
    candidates = generate_candidates(dispatch, pipeline_for(dispatch), 2, ctx)
    tiled = next(c for c in candidates if c.config.compilation_info)
    # The timed module of the tiled candidate is compiled from the baseline's dispatch benchmark:
    # the full module carries the config, what is timed does not.
    needle = f"/{tiled.id:04d}/bench/"
    faulty_tools("iree-compile", needle, "swap:/0000/bench/")
    store = ResultStore(tmp_path / "r.sqlite", compiler_version(), runtime_version())
    # Only the statuses matter here: no confirmation rounds (which on a noisy host could wait for
    # a load to pass).
    evaluator = Sequential(small_matmul, dispatch_only, program.workload(dispatch, small_matmul),
                           tmp_path / "candidates", store,
                           EvalSettings(repetitions=1, min_time_s=0.01, confirm_rounds=0, quiet_wait_s=0.0), ctx=ctx)
    by_id = {r.candidate_id: r for r in evaluator.evaluate(candidates).results}
    assert by_id[tiled.id].status == Status.CONFIG_NOT_APPLIED
    assert "dispatch benchmark module (what is timed) does not carry the config" in by_id[tiled.id].error
    assert by_id[0].ok


@pytest.mark.slow
def test_a_manifest_of_another_input_than_the_directorys_run_is_refused(tmp_path):
    out = _compiled_dir(tmp_path)
    run = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({**run, "input_digest": "0" * 16, "input": "/elsewhere/other.mlir"}))
    assert_one_error_line(run_cli("benchmark", out), 2, "is of another input than the run this directory holds")


def test_enumeration_reports_its_progress_and_where_it_ended(tmp_path, ctx, cpu):
    from pipelines import pipeline_for
    from tuner.specs.candidates import generate_candidates
    from tuner.discovery.program import discover

    [dispatch] = discover(write_matmul(tmp_path / "tiny.mlir", 4, 4, 4), cpu, ctx)
    seen = []
    found = generate_candidates(dispatch, pipeline_for(dispatch), 100000, ctx,
                                progress=lambda phase, done, total: seen.append((phase, done, total)))
    assert seen and {p for p, _, _ in seen} == {"enumerate"}
    assert [d for _, d, _ in seen[:-1]] == list(range(1, len(found)))  # one step per candidate
    assert seen[-1] == ("enumerate", len(found) - 1, len(found) - 1)  # the bar ends where the space did


@pytest.mark.slow
def test_a_time_taken_on_another_device_is_not_reused(small_matmul, tmp_path, timed_tools, monkeypatch):
    import tuner.evaluation.measure
    from tuner import api
    from tuner.core.settings import EvalSettings, RunOptions, SearchSettings

    timed_tools({0: 10.0, 1: 9.0, 2: 8.0})
    settings = EvalSettings(repetitions=1, min_time_s=0.01, confirm_rounds=0)
    first = api.tune(small_matmul, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=2), run=RunOptions(settings, strategy="sequential"))
    assert first.stats.reused == 0
    again = api.tune(small_matmul, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=2), run=RunOptions(settings, strategy="sequential"))
    assert again.stats.reused == 2  # same device: reused
    # The same target on another machine's CPU: nothing timed here may stand for it.
    other = lambda device: "cpu: Some Other CPU avx2, 64 cores"  # noqa: E731
    monkeypatch.setattr(tuner.evaluation.measure, "device_identity", other)  # what LocalRunner asks
    third = api.tune(small_matmul, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=2), run=RunOptions(settings, strategy="sequential"))
    assert third.stats.reused == 0 and third.stats.candidates == 3
    assert {r.device_id for r in third.results} == {"cpu: Some Other CPU avx2, 64 cores"}


def test_a_thread_of_an_interrupted_run_starts_no_tool_and_a_later_run_does():
    """After an interruption kills the run's tools, a worker thread still busy (about to time the
    baseline again, say) must not start another one; the next run in this process may."""
    import sys
    import threading

    from tuner.tools import ToolsStopped, kill_running_tools, run_tool

    go, outcome = threading.Event(), []

    def worker():
        go.wait(30)
        try:
            outcome.append(run_tool([sys.executable, "-c", "pass"], 30).ok)
        except ToolsStopped as e:
            outcome.append(e)

    busy = threading.Thread(target=worker)
    busy.start()
    kill_running_tools()  # as the interrupted main thread does
    go.set()
    busy.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], ToolsStopped)
    assert run_tool([sys.executable, "-c", "pass"], 30).ok  # this thread: the next run
    later = []
    fresh = threading.Thread(target=lambda: later.append(run_tool([sys.executable, "-c", "pass"], 30).ok))
    fresh.start()
    fresh.join(30)
    assert later == [True]


def test_an_interruption_while_a_tool_starts_takes_that_tool_down(monkeypatch):
    """SIGTERM arriving inside Popen (the tool has been exec'd, Popen has not returned yet)
    must not leave the tool running unregistered: it is killed like one already running."""
    from tuner import tools

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop()

    started = []
    real = subprocess.Popen

    def popen(*args, **kwargs):
        started.append(real(*args, **kwargs))
        os.kill(os.getpid(), signal.SIGTERM)  # the handler would run before Popen returns
        return started[-1]

    previous = signal.signal(signal.SIGTERM, stop)
    monkeypatch.setattr(tools.subprocess, "Popen", popen)
    try:
        with pytest.raises(Stop):
            tools.run_tool([sys.executable, "-c", "import time; time.sleep(60)"], 60)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert started[0].wait(10) == -signal.SIGKILL
    assert signal.getsignal(signal.SIGTERM) is previous


@pytest.mark.slow
def test_an_output_path_with_a_newline_quotes_and_at_signs_rebuilds_with_plain_iree_compile(tmp_path, small_matmul,
                                                                                           monkeypatch):
    # Relative, starting with '@' (the runtime tools read `--module=LIBRARY@SYMBOL`: such a path
    # once opened ''), with quotes and a newline (once injected into the spec's rebuild comment).
    monkeypatch.chdir(tmp_path)
    out = Path("@runs") / 'odd "dir" it\'s\nsecond @line'
    result = run_cli("tune", small_matmul, "--budget", "1", "--repetitions", "1", "--confirm-rounds", "1",
                     "--output", out)
    assert result.exit_code == 0, result.output
    spec = (out / "best_spec.mlir").read_text()
    assert all(line.startswith("//") for line in spec.splitlines()[:3])  # the path stays in a comment
    data = json.loads((out / "results.json").read_text())
    assert all(r["status"] == "ok" for r in data["candidates"]), data["candidates"]
    iree_compile(small_matmul, f"@{(out / 'best_flags.txt').resolve()}", "-o", tmp_path / "rebuilt.vmfb")
    assert subprocess.run([find_tool("iree-opt"), str(out / "best_spec.mlir")], capture_output=True).returncode == 0


def test_model_plan_paths_outside_the_directory_are_refused_and_nothing_outside_is_touched(tmp_path):
    from tuner.stages.plan import ModelPlan

    secret = tmp_path / "secret.txt"
    secret.write_text("outside")
    victim_dir = tmp_path / "elsewhere"
    victim_dir.mkdir()
    (victim_dir / "secret.txt").write_text("keep me")
    plans = {
        "a .. in the file list": ModelPlan("validate", "local-task", {}, [], files=["../secret.txt"]),
        "an absolute input": ModelPlan("validate", "local-task", {}, [str(secret)], files=[]),
        "an absolute profiled program": ModelPlan("profile", "local-task", {}, [], profile={
            "device": "local-task", "module": "/etc/passwd", "inputs": {}, "runs": {}, "entry_of": {}, "untimed": {},
            "mode": "in_program"}),
        "a module through ..": ModelPlan("validate", "local-task", {}, [], reference=["default", "../../x.vmfb"]),
    }
    for what, plan in plans.items():
        run = tmp_path / what.replace(" ", "_").replace(".", "dot")
        run.mkdir()
        plan.write(run)
        assert_one_error_line(run_cli("benchmark", run), 2, "names a path outside")
        assert repr(str(plan.paths()[0] if plan.paths() else plan.profile_paths()[0])) in run_cli("benchmark", run).output.replace("\n", "")
        dest = victim_dir / "pack"
        assert_one_error_line(run_cli("pack", run, dest), 2, "names a path outside")
        assert not dest.exists()
    assert (victim_dir / "secret.txt").read_text() == "keep me" and secret.read_text() == "outside"


def test_model_plan_values_a_compile_step_never_writes_are_refused_before_anything_runs(tmp_path):
    # Rounds out of range or not integers (a billion rounds ran for an estimated 748,327 hours),
    # an index that is a path, names that would become paths outside DIR.
    from tuner.stages.plan import ModelPlan

    job = {"device": "local-task", "module": "m.vmfb", "inputs": {"../../../x/y": []}, "runs": {}, "entry_of": {},
           "untimed": {}, "mode": "in_program"}
    plans = {
        "rounds": (ModelPlan("validate", "local-task", {}, [], rounds=1_000_000_000), "1000000000"),
        "no rounds": (ModelPlan("validate", "local-task", {}, [], rounds=0), "0"),
        "negative rounds": (ModelPlan("validate", "local-task", {}, [], rounds=-3), "-3"),
        "text rounds": (ModelPlan("validate", "local-task", {}, [], rounds="x"), "'x'"),
        "a path index": (ModelPlan("merge", "local-task", {}, [], index="/../../../../x/pwnidx"), "pwnidx"),
        "a path variant": (ModelPlan("merge", "local-task", {}, [], variants=[["../../../../x/evil", "m.vmfb"]]), "evil"),
        "a path entry": (ModelPlan("profile", "local-task", {}, [], profile=job), "../../../x/y"),
        "an unknown step": (ModelPlan("explode", "local-task", {}, []), "explode"),
        # Issue 60 (minor): each was a traceback; the last said DIR was in use by another run (its own pid).
        "a number as a file": (ModelPlan("validate", "local-task", {}, [], files=[1], reference=["d", "m.vmfb"]), "[1]"),
        "a list as the workload": (ModelPlan("validate", "local-task", [], [], reference=["d", "m.vmfb"]), "[]"),
        "no reference": (ModelPlan("validate", "local-task", {}, []), "None"),
        "DIR as a dispatch": (ModelPlan("dispatches", "local-task", {}, [], dispatches=["."]), "'.'"),
    }
    for what, (plan, named) in plans.items():
        run = tmp_path / what.replace(" ", "_")
        run.mkdir()
        plan.write(run)
        result = run_cli("benchmark", run)
        assert_one_error_line(result, 2, "is not one a compile step writes")
        assert named in result.output, what
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(w.replace(" ", "_") for w in plans)


@pytest.mark.slow
def test_links_planted_in_the_directory_are_replaced_never_written_through(tmp_path):
    out = _compiled_dir(tmp_path)
    assert run_cli("benchmark", out, "--repetitions", "1", "--confirm-rounds", "1").exit_code == 0
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = ["best_flags.txt", "best_spec.mlir", "results.json.tmp", "results.png",
               "candidates/0001/output-local-task.npy", "manifest.tmp"]
    for i, name in enumerate(planted):
        (outside / str(i)).write_text("not yours")
        (out / name).unlink(missing_ok=True)
        (out / name).symlink_to(outside / str(i))
    results = (out / "results.json").read_text()
    (out / "results.json").unlink()
    (out / "results.json").symlink_to(outside / "results")
    (outside / "results").write_text(results)
    assert run_cli("benchmark", out, "--repetitions", "1", "--confirm-rounds", "1").exit_code == 0
    assert run_cli("report", out).exit_code == 0
    assert all((outside / str(i)).read_text() == "not yours" for i in range(len(planted)))
    assert (outside / "results").read_text() == results
    for name in ["best_flags.txt", "best_spec.mlir", "results.json", "results.png"]:
        assert (out / name).is_file() and not (out / name).is_symlink(), name


def test_pack_writes_only_into_a_fresh_directory_outside_the_run_and_never_out_of_it(tmp_path):
    from tuner.stages.plan import ModelPlan

    run = tmp_path / "run"
    run.mkdir()
    (run / "x.vmfb").write_text("module")
    ModelPlan("validate", "local-task", {}, [], reference=["default", "x.vmfb"], files=["x.vmfb"]).write(run)
    assert_one_error_line(run_cli("pack", run, run), 2, "must go outside")
    assert_one_error_line(run_cli("pack", run, run / "inner"), 2, "must go outside")
    used = tmp_path / "used"
    used.mkdir()
    (used / "theirs.txt").write_text("keep")
    assert_one_error_line(run_cli("pack", run, used), 4, "not an empty directory")
    (tmp_path / "afile").write_text("keep")
    assert_one_error_line(run_cli("pack", run, tmp_path / "afile"), 4, "not an empty directory")
    assert (used / "theirs.txt").read_text() == "keep" and sorted(p.name for p in used.iterdir()) == ["theirs.txt"]
    assert run_cli("pack", run, tmp_path / "fresh").exit_code == 0 and (tmp_path / "fresh" / "x.vmfb").is_file()
    # A path that leaves the directory and comes back resolves inside it, but joined onto the
    # destination it would lead out of that: refused, nothing written.
    ModelPlan("validate", "local-task", {}, [], reference=["default", "x.vmfb"], files=["../run/x.vmfb"]).write(run)
    assert_one_error_line(run_cli("pack", run, tmp_path / "dest" / "inner"), 2, "names a path outside")
    assert not (tmp_path / "dest").exists() and not (tmp_path / "run" / "run").exists()


@pytest.mark.slow
def test_an_oversized_input_duplicate_candidate_ids_a_bad_results_file_and_a_directory_as_model_are_each_one_error_line(tmp_path):
    out = _compiled_dir(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    huge = json.loads(json.dumps(manifest))
    huge["workload"]["inputs"][0]["shape"] = [2 ** 30, 2 ** 30]
    (out / "manifest.json").write_text(json.dumps(huge))
    assert_one_error_line(run_cli("benchmark", out), 2, "more than")
    twice = json.loads(json.dumps(manifest))
    twice["candidates"].append(twice["candidates"][-1])
    (out / "manifest.json").write_text(json.dumps(twice))
    assert_one_error_line(run_cli("benchmark", out), 2, "candidate ids appear twice")
    (out / "results.json").write_text("[]")
    assert_one_error_line(run_cli("report", out), 2, "not a readable results file")
    assert_one_error_line(run_cli("dispatches", tmp_path), 2, "a directory, not a model file")


def test_standard_input_an_empty_module_and_an_all_dynamic_model_are_each_one_error_line_with_exit_2(tmp_path, small_matmul):
    assert_one_error_line(run_cli("tune", "-"), 2, "not from standard input")
    assert_one_error_line(run_cli("dispatches", "-"), 2, "not from standard input")
    empty = tmp_path / "empty.mlir"
    empty.write_text("module {}\n")
    # Profiling an empty module is bad input (exit 2, as `tune` says of it), not a failed tool.
    assert_one_error_line(run_cli("dispatches", empty, "--profile"), 2, "no dispatches to profile")
    assert_one_error_line(run_cli("tune", empty), 2, "nothing this tuner can tune")
    dynamic = tmp_path / "dynamic.mlir"
    dynamic.write_text(small_matmul.read_text().replace("128x64xf32", "?x64xf32").replace("128x256xf32", "?x256xf32")
                       .replace("tensor.empty()", "tensor.empty(%m)")
                       .replace("  %z = ", "  %c0 = arith.constant 0 : index\n  %m = tensor.dim %a, %c0 : tensor<?x64xf32>\n  %z = ", 1))
    assert_one_error_line(run_cli("tune-model", dynamic, "--output", tmp_path / "dyn"), 2,
                          "every dispatch of the model has dynamic shapes")


def test_a_run_refused_for_bad_input_leaves_a_fresh_directory_unclaimed(tmp_path, small_matmul):
    # crosscheck has no constraints from IREE for llvm-cpu: refused, the directory must not stay
    # claimed by that input (a later crosscheck of another input there once failed with exit 7).
    out = tmp_path / "cc"
    assert_one_error_line(run_cli("crosscheck", small_matmul, "--target", "llvm-cpu", "--output", out), 2,
                          "emits no constraints")
    assert not (out / "run.json").exists()
    assert not out.exists()  # made by the refused run, left empty: removed (no ./tuning-output left behind)
    other = write_matmul(tmp_path / "other.mlir", 64, 64, 64)
    assert_one_error_line(run_cli("crosscheck", other, "--target", "llvm-cpu", "--output", out), 2,
                          "emits no constraints")


def test_dispatches_profile_into_a_directory_a_run_holds_waits_its_turn(tmp_path, small_matmul):
    out = tmp_path / "held"
    with RunDirectory(out):
        assert_one_error_line(run_cli("dispatches", small_matmul, "--profile", "--output", out), 6, "in use by another run")


@pytest.mark.slow
def test_inputs_whose_default_result_is_not_finite_are_named_as_such(tmp_path, small_matmul):
    import numpy as np

    a, b = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(a, np.full((128, 64), np.nan, np.float32))
    np.save(b, np.ones((64, 256), np.float32))
    result = run_cli("tune", small_matmul, "--budget", "1", "--repetitions", "1", "--input", a, "--input", b,
                     "--output", tmp_path / "out")
    assert_one_error_line(result, 2, "not finite")


def test_a_store_deleted_during_the_run_is_noticed_at_the_next_write(tmp_path):
    from tuner.errors import StoreError
    from tuner.core.results import Result, Status
    from tuner.store import ResultStore

    path = tmp_path / "r.sqlite"
    result = Result(1, "k", "c", False, {}, [], Status.OK, times_ms=[1.0], median_ms=1.0)
    with ResultStore(path, "c", "r") as store:
        store.put(result)
        path.unlink()
        with pytest.raises(StoreError, match="deleted or replaced during the run"):
            store.put(result)


def test_a_store_damaged_inside_a_page_is_one_error_line(tmp_path, small_matmul):
    from tuner.core.results import Result, Status
    from tuner.store import ResultStore

    out = tmp_path / "out"
    path = out / "results.sqlite"
    out.mkdir()
    with ResultStore(path, "c", "r") as store:  # enough rows for several pages
        for i in range(400):
            store.put(Result(i, f"k{i}", "c" * 200, False, {}, [], Status.OK, times_ms=[1.0], median_ms=1.0))
            store.put_features(f"k{i}", "p", "other", {"x": 1.0}, {"pref": True})
    data = bytearray(path.read_bytes())
    for page in range(2, len(data) // 4096):  # every page but the schema's: its header scrambled
        data[page * 4096: page * 4096 + 16] = b"\xff" * 16
    path.write_bytes(bytes(data))
    result = run_cli("tune", small_matmul, "--budget", "1", "--search", "model", "--warm-start", "--output", out)
    assert_one_error_line(result, 8, "store")


@pytest.mark.slow
def test_a_config_that_never_takes_is_said_with_both_configs_and_exits_9(tmp_path, small_matmul, ctx, cpu, faulty_tools):
    """Every candidate config_not_applied (here: compiled with the baseline's empty spec in place
    of its own): the console says so per candidate with the config the dispatch carries and the
    one asked for, and the run ends with exit 9 (the default kept, nothing tuned)."""
    from pipelines import pipeline_for
    from tuner.discovery.program import discover
    from tuner.specs.candidates import generate_candidates

    [dispatch] = discover(small_matmul, cpu, ctx)
    tiled = next(c for c in generate_candidates(dispatch, pipeline_for(dispatch), 3, ctx) if c.config.compilation_info)
    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps([dict(tiled.config.knobs)]))
    faulty_tools("iree-compile", "/0001/spec.mlir", "swap:/0000/spec.mlir")
    result = run_cli("benchmark", small_matmul, "--configs", configs, "--repetitions", "1", "--confirm-rounds", "1",
                     "--output", tmp_path / "out")
    assert result.exit_code == 9, result.output
    text = " ".join(result.output.split())
    assert "candidate 1 (" in text and ") config_not_applied: lowering_config is" in text and ", expected #iree" in text
    assert "none of the 1 candidates took its config" in text
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["best"] is None and [c["status"] for c in data["candidates"]] == ["ok", "config_not_applied"]


def test_files_the_tuner_writes_get_the_mode_the_umask_gives_not_0600(tmp_path):
    from tuner.run_dir import UMASK, write_file

    old = os.umask(0o022)
    try:
        written = write_file(tmp_path / "results.json", "{}")
        plain = tmp_path / "plain.txt"
        plain.write_text("x")  # any new file under this umask
    finally:
        os.umask(old)
    assert UMASK == old  # read once at import, as the process had it
    # write_file applies the mask read at import; under a 022 mask both are 0644.
    assert written.stat().st_mode & 0o777 == 0o666 & ~UMASK
    assert (0o666 & ~0o022) == plain.stat().st_mode & 0o777


@pytest.mark.slow
def test_results_of_other_tools_are_not_reused_and_those_of_the_same_tools_are(tmp_path, faulty_tools, monkeypatch):
    # $IREE_TUNER_TOOLS names other tools (here wrappers of the real ones): what they measured is
    # keyed by them, not by the installed packages' version.
    from tuner.tools import TOOLS_ENV
    from tuner.versions import compiler_version

    path = write_matmul(tmp_path / "mm.mlir", 64, 128, 32)
    args = ["tune", path, "--num-candidates", "1", "--output", tmp_path / "out", "--confirm-rounds", "1",
            "--repetitions", "1"]
    wrapped = compiler_version()
    first = run_cli(*args)
    assert first.exit_code == 0, first.output
    monkeypatch.delenv(TOOLS_ENV)
    assert compiler_version() != wrapped and "+tools:" in wrapped
    for expect in ("0 reused from the store", "1 reused from the store"):  # the wheels' tools: measured, then reused
        run = run_cli(*args)
        assert run.exit_code == 0 and expect in run.output, run.output


def test_a_full_disk_or_a_locked_store_is_not_called_damage():
    import sqlite3

    from tuner.cli.say import store_error_text

    full = store_error_text(sqlite3.OperationalError("database or disk is full"))
    locked = store_error_text(sqlite3.OperationalError("database is locked"))
    damaged = store_error_text(sqlite3.DatabaseError("database disk image is malformed"))
    assert "free space" in full and "delete" not in full
    assert "held by another process" in locked and "delete" not in locked
    assert "damaged" in damaged and "delete it" in damaged


@pytest.mark.slow
def test_a_manifests_spec_flags_are_not_format_strings(tmp_path):
    from dataclasses import replace

    from tuner.build.manifest import Manifest

    out = _compiled_dir(tmp_path)
    [candidate] = [b for b in Manifest.read(out).built if not b.result.is_baseline and b.spec]
    spec = tmp_path / "a" / "b" / "spec.mlir"
    flags = replace(candidate, spec_flags=("--x={spec.parent.parent.parent}", "--y={spec}")).rebuild_flags(spec)
    assert flags[-2:] == ["--x={spec.parent.parent.parent}", f"--y={spec.resolve()}"]


def test_kinds_naming_no_kind_and_a_report_of_no_rows_are_refused(tmp_path):
    result = run_cli("tune-model", tmp_path / "model.mlir", "--kinds", ",", "--output", tmp_path / "o")
    assert_one_error_line(result, 2, "--kinds ',': names no kind")
    assert not (tmp_path / "o").exists()
    result = run_cli("report", tmp_path, "--top", "-3")
    assert result.exit_code == 2 and "-3 is not in the range x>=1" in result.output


def test_inputs_or_results_too_large_to_hold_are_one_error_line_before_anything_is_compiled(tmp_path):
    from tuner.discovery.workload import TensorSpec

    assert "more than the 17179869184 an input may have here" in TensorSpec((1_000_000, 1_000_000), "f32").unrunnable()
    assert TensorSpec((4096, 4096), "f32").unrunnable() is None
    # A 1000000x1000000 result: --compile-only took it, and only the benchmark refused it.
    huge = write_matmul(tmp_path / "huge.mlir", 1_000_000, 1_000_000, 64)
    for args in (("tune", huge, "--compile-only"), ("tune", huge)):
        result = run_cli(*args, "--output", tmp_path / "o")
        assert_one_error_line(result, 2, "more than the 17179869184 a result may have here")
        assert not (tmp_path / "o" / "candidates").exists()


def test_a_flag_with_a_newline_and_no_space_is_quoted_in_the_response_file():
    """The probe's case: an output path with a newline but no space split the spec's path across
    two lines of best_flags.txt ("Too many positional arguments" on rebuild)."""
    from tuner.report.outputs import response_file

    assert response_file(["--a=/tmp/x\ny", "--b=plain"]) == '"--a=/tmp/x\ny"\n--b=plain\n'
    assert response_file(["--c=tab\there"]) == '"--c=tab\there"\n'


@pytest.mark.slow
def test_iree_compile_reads_a_quoted_flag_with_a_newline_as_one(tmp_path, small_matmul):
    from tuner.report.outputs import response_file

    target = tmp_path / "x\ny.mlir"
    flags = tmp_path / "flags.txt"
    flags.write_text(response_file(["--compile-to=input", "-o", str(target)]))
    assert subprocess.run([find_tool("iree-compile"), str(small_matmul), f"@{flags}"],
                          capture_output=True).returncode == 0
    assert target.is_file()


def test_directory_links_planted_below_a_held_run_directory_are_replaced_never_followed(tmp_path):
    # The probe's S1: `DIR/candidates -> elsewhere` made `tune` delete the target's 0001 and write
    # every candidate there. Below a run directory this process holds, every directory the run
    # makes is a real one: a link at any depth is removed (its target untouched).
    from tuner.errors import OutputError
    from tuner.run_dir import real_directory, remove_tree

    outside = tmp_path / "outside"
    (outside / "0001").mkdir(parents=True)
    (outside / "0001" / "theirs").write_text("keep")
    run = tmp_path / "run"
    run.mkdir()
    (run / "candidates").symlink_to(outside)
    (run / "variants").mkdir()
    (run / "variants" / "runs-merge").symlink_to(outside)
    (run / LOCK).symlink_to(outside / "lock")  # the holder's line would be written through it
    with RunDirectory(run):
        # A candidate's folder removed before any other is made (parallel compiles: 0001's
        # removal ran before 0000's folder replaced the link, and deleted the target's 0001).
        remove_tree(run / "candidates" / "0001")
        assert not (run / "candidates").is_symlink() and (outside / "0001" / "theirs").is_file()
        made = real_directory(run / "candidates" / "0001")
        merge = real_directory(run / "variants" / "runs-merge")
        remove_tree(made)
        (run / "imported").symlink_to(outside)
        remove_tree(run / "imported")  # removes the link alone
        (run / "afile").write_text("x")
        with pytest.raises(OutputError, match="is a file where the run keeps a directory"):
            real_directory(run / "afile" / "sub")
    assert made.parent.is_dir() and not made.parent.is_symlink() and not made.exists()
    assert merge.is_dir() and not merge.is_symlink() and not (run / "imported").exists()
    assert (run / LOCK).is_file() and not (run / LOCK).is_symlink() and not (outside / "lock").exists()
    assert sorted(p.name for p in outside.iterdir()) == ["0001"] and (outside / "0001" / "theirs").read_text() == "keep"
    # A directory the user linked the run directory itself to is theirs to choose, and outside
    # any held run directory a path is made as asked.
    linked = tmp_path / "linked"
    linked.symlink_to(outside)
    with RunDirectory(linked):
        assert real_directory(linked / "x").is_dir() and (outside / "x").is_dir()
    assert real_directory(tmp_path / "plain" / "deep").is_dir()


@pytest.mark.slow
def test_tune_writes_no_candidate_through_a_planted_candidates_link(tmp_path, small_matmul):
    outside, out = tmp_path / "outside", tmp_path / "out"
    outside.mkdir()
    (outside / "0001").write_text("keep")
    out.mkdir()
    (out / "candidates").symlink_to(outside)
    result = run_cli("tune", small_matmul, "--compile-only", "--budget", "2", "--output", out)
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in outside.iterdir()) == ["0001"] and (outside / "0001").read_text() == "keep"
    assert (out / "candidates").is_dir() and not (out / "candidates").is_symlink()
    assert (out / "candidates" / "0001" / "spec.mlir").is_file()
    # The candidates command's --output: its specs folder and files are never written through.
    listed = tmp_path / "listed"
    listed.mkdir()
    (listed / "specs").symlink_to(outside)
    (listed / "candidates.json").symlink_to(outside / "0001")
    assert run_cli("candidates", small_matmul, "--num-candidates", "2", "--output", listed).exit_code == 0
    assert sorted(p.name for p in outside.iterdir()) == ["0001"] and (outside / "0001").read_text() == "keep"
    assert (listed / "specs" / "0000.mlir").is_file() and not (listed / "candidates.json").is_symlink()


def test_the_ray_builder_writes_no_candidate_through_a_planted_candidates_link(tmp_path):
    """The cluster's builder (`--strategy ray`) writes each candidate's spec in the run's
    directory before its compile task starts: it removed the candidate's folder and wrote there
    with plain rmtree and write_text, through a planted `DIR/candidates` link. No Ray here: the
    compile task is a stand-in."""
    from types import SimpleNamespace

    from tuner.cluster.evaluator import RayBuilder

    outside, run = tmp_path / "outside", tmp_path / "run"
    (outside / "0001").mkdir(parents=True)
    (outside / "0001" / "spec.mlir").write_text("theirs")
    run.mkdir()
    (run / "candidates").symlink_to(outside)
    builder = object.__new__(RayBuilder)
    started = SimpleNamespace(future=lambda: "future")
    builder._task = SimpleNamespace(remote=lambda *args: (started, None, None))
    builder.workdir, builder.source, builder.target = run / "candidates", None, None
    builder.timeout_s, builder.entry, builder.pin, builder._submitted = 1.0, None, None, {}
    with RunDirectory(run):
        assert builder.start(SimpleNamespace(id=1, spec="// ours\n")) == "future"
    assert (outside / "0001" / "spec.mlir").read_text() == "theirs"
    assert not (run / "candidates").is_symlink()
    assert (run / "candidates" / "0001" / "spec.mlir").read_text() == "// ours\n"


# Every place in tuner/ that writes, removes or makes a file or directory without
# tuner.run_dir's helpers (write_file, real_directory, remove_tree, fresh), each with why that is
# safe; any other is a defect of the kind issue 36's hostile probe found (writes through planted
# links). Removing a path (`unlink`) removes a link itself, never its target.
RAW_WRITES = {
    "tuner/api.py": ["output_dir.mkdir(",  # the user's named output directory, before the lock
                     "probe.write_text(",  # `fresh` cleared a planted link there first
                     "probe.unlink("],
    "tuner/cluster/compile_task.py": ["path.parent.mkdir(", "path.write_bytes(",  # the node's own temp dir
                                      "shutil.rmtree(job.directory"],
    "tuner/cluster/worker.py": ["shutil.rmtree(self.root", "path.parent.mkdir(", "path.write_bytes("],
    "tuner/discovery/workload.py": ["np.save(f, array)", "np.save(f, array))"],  # inside write_file
    "tuner/core/reaper.py": ["shutil.rmtree(path"],  # the reaper's: directories named after its run's token
    "tuner/driver.py": [".unlink(missing_ok=True)"],
    "tuner/evaluation/device_worker.py": ["os.fdopen("],  # the pipes to a device's process, no file
    "tuner/evaluation/runtime_tools.py": ["output.unlink("],  # a planted link at the output, removed
    "tuner/input/dispatch_benchmarks.py": ["probe.write_text("],  # a TemporaryDirectory of its own
    "tuner/profiling/timing.py": ["bundle.unlink("],
    "tuner/stages/host_reference.py": ["np.save(f, out)"],  # inside write_file
    "tuner/stages/model_client.py": [".unlink(missing_ok=True)"],
    "tuner/stages/plan.py": ["shutil.copy2("],  # into a new, empty DEST made of real directories
    "tuner/stages/time_budget.py": ["self.record.unlink("],  # the run's own record, in its directory
    "tuner/stages/variants.py": ["stamp.unlink("],
    "tuner/tools.py": ["_scratch.mkdir("],  # the tools' TMPDIR, made by mkdtemp in the system's temp dir
}
_WRITE = re.compile(r"write_text\(|write_bytes\(|open\([^)]*[\"']w|\.mkdir\(|rmtree\(|\.unlink\(|os\.replace|"
                    r"shutil\.copy|shutil\.move|np\.save\(")


def test_every_write_of_the_tuner_goes_through_the_run_directory_helpers_or_is_listed_with_why():
    root = Path(__file__).resolve().parent.parent
    found: dict[str, list[str]] = {}
    for path in sorted((root / "tuner").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel == "tuner/run_dir.py":
            continue
        for line in path.read_text().splitlines():
            if _WRITE.search(line) and not line.lstrip().startswith("#"):
                found.setdefault(rel, []).append(line.strip())
    unlisted = {rel: [line for line in lines if not any(site in line for site in RAW_WRITES.get(rel, []))]
                for rel, lines in found.items()}
    assert {rel: lines for rel, lines in unlisted.items() if lines} == {}
    gone = {rel: [s for s in sites if not any(s in line for line in found.get(rel, []))] for rel, sites in RAW_WRITES.items()}
    assert {rel: sites for rel, sites in gone.items() if sites} == {}  # the list stays true to the code


@pytest.mark.parametrize("field, value", [("median_ms", "1.5"), ("round_ratios", ["2.0", 1.9]), ("candidate_id", "x"),
                                          ("times_ms", "1.0"), ("knobs", "wg 4x4"), ("label", 3)])
def test_a_results_file_with_a_number_edited_into_text_is_one_error_line_and_tuned_again(tmp_path, field, value):
    """The hostile probe's `report` on a results.json whose medians or ratios are strings ended in
    a traceback; a tune-model run resuming from such a dispatch result would too."""
    from tuner.core.results import Result, Status
    from tuner.stages.builtin import finished_tuning

    good = [Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=i == 0, knobs={}, flags=[],
                   status=Status.OK, times_ms=[1.0], median_ms=1.0, round_ratios=[1.2] if i else []).to_json()
            for i in range(2)]
    good[1][field] = value
    (tmp_path / "results.json").write_text(json.dumps({"dispatch": "d", "input_digest": "x", "candidates": good}))
    result = run_cli("report", tmp_path)
    assert_one_error_line(result, 2, "not a readable results file")
    assert repr(value) in result.output
    dispatch = type("D", (), {"source_digest": "x"})()
    candidates = [type("C", (), {"key": f"k{i}"})() for i in range(2)]
    assert finished_tuning(tmp_path, dispatch, candidates) is None


def test_run_files_and_the_store_are_never_written_through_a_link_planted_in_the_directory(tmp_path, small_matmul):
    # Issue 60: run.tmp was written through (the run identity into the victim), results.sqlite
    # opened through (a 45 KB store made where the link pointed).
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    planted = ["run.tmp", "results.sqlite", "results.sqlite-wal", "results.sqlite-shm"]
    for name in planted:
        (outside / name).write_text("not yours")
        (out / name).symlink_to(outside / name)
    result = run_cli("tune", small_matmul, "--budget", "2", "--compile-only", "--output", out)
    assert result.exit_code == 0, result.output
    assert all((outside / name).read_text() == "not yours" for name in planted)
    assert json.loads((out / "run.json").read_text())["input"] and not (out / "run.json").is_symlink()
    assert (out / "results.sqlite").is_file() and not (out / "results.sqlite").is_symlink()


@pytest.mark.slow
def test_rounds_forged_in_a_manifest_never_rank(tmp_path):
    # Issue 60: after a compile step, every candidate given 9x in 4 rounds and 8 fresh ones: the
    # benchmark named one "9.00x the default (9.00-9.00)" that had run 0.81x in its first pass.
    out = _compiled_dir(tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    for entry in manifest["candidates"]:
        entry["result"].update({"round_ratios": [9.0] * 4, "holdout_ratios": [9.0] * 8, "rounds_ms": [0.001] * 4})
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("benchmark", out, "--repetitions", "1", "--confirm-rounds", "1")
    assert result.exit_code == 0, result.output
    data = json.loads((out / "results.json").read_text())
    ratios = [r for c in data["candidates"] for r in c.get("round_ratios", []) + c.get("holdout_ratios", [])]
    assert 9.0 not in ratios and "9.00x" not in result.output


def test_a_results_file_whose_evaluation_is_not_an_object_is_one_error_line(tmp_path):
    # Issue 60 (minor): a traceback in `report`.
    from tuner.core.results import Result, Status

    good = [Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=i == 0, knobs={}, flags=[],
                   status=Status.OK, times_ms=[1.0], median_ms=1.0).to_json() for i in range(2)]
    (tmp_path / "results.json").write_text(json.dumps({"dispatch": "d", "candidates": good, "evaluation": "fast"}))
    assert_one_error_line(run_cli("report", tmp_path), 2, "its evaluation 'fast' is not an object")


def test_a_full_disk_under_the_output_directory_is_one_error_line(tmp_path, small_matmul, monkeypatch):
    # The hostile probe's run with its output on a full disk and its store elsewhere ended in an
    # OSError traceback (ENOSPC) at the first file written into the output.
    import errno
    import tempfile
    import types

    from tuner import run_dir

    out = tmp_path / "out"

    def mkstemp(dir, prefix, suffix):
        if Path(dir).resolve().is_relative_to(out.resolve()):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(Path(dir) / prefix))
        return tempfile.mkstemp(dir=dir, prefix=prefix, suffix=suffix)

    monkeypatch.setattr(run_dir, "tempfile", types.SimpleNamespace(mkstemp=mkstemp))
    result = run_cli("tune", small_matmul, "--output", out, "--store", tmp_path / "elsewhere.sqlite",
                     "--num-candidates", "1", "--compile-only")
    assert_one_error_line(result, 4, "No space left on device")
    assert str(out) in result.output


def test_a_run_refused_before_it_measured_anything_leaves_no_partial_directory(tmp_path):
    # Issue 63: a failed run left its directory with `imported/` (the ONNX model's import) in it.
    pytest.importorskip("onnx")
    model = Path(__file__).parent / "fixtures" / "exports" / "bert" / "model.onnx"
    out = tmp_path / "out"
    assert_one_error_line(run_cli("tune", model, "--dispatch", "no_such_dispatch", "--output", out), 2,
                          "no_such_dispatch")
    assert not out.exists()
    # A directory that holds a measurement (here a profile) or was there before is left as it is.
    from tuner.run_dir import holds_measurements

    (out / "profile").mkdir(parents=True)
    (out / "profile" / "profile.json").write_text("{}")
    assert holds_measurements(out)
    assert_one_error_line(run_cli("tune", model, "--dispatch", "no_such_dispatch", "--output", out), 2,
                          "no_such_dispatch")
    assert (out / "profile" / "profile.json").exists()
