"""The evaluation layer for real on small matmuls: both strategies score every candidate, devices
share one queue, hung and crashing tools become statuses, wrong numbers are never ranked, a run
killed with SIGKILL resumes from the store, and two runs can share one store."""

import json
import os
import sqlite3
from dataclasses import replace

import pytest

from pipelines import pipeline_for
from tuner.specs.candidates import generate_candidates
from tuner.discovery.program import discover_program
from tuner.evaluation.evaluator import Overlapped, Sequential
from tuner.strategies import evaluator_class
from tuner.errors import InputError
from tuner.ranking import rank
from tuner.core.results import Status
from tuner.core.settings import EvalSettings
from tuner.store import ResultStore
from tuner.versions import compiler_version, runtime_version
from tests.conftest import cli_process, kill_once_stored, stored_rows, write_matmul

FAST = EvalSettings(repetitions=2, min_time_s=0.01, confirm_rounds=0, compile_workers=2, quiet_wait_s=0.0)


def _batch(path, ctx, cpu, n):
    program = discover_program(path, cpu, ctx)
    [dispatch] = program.dispatches
    candidates = generate_candidates(dispatch, pipeline_for(dispatch), n, ctx)
    return candidates, program.workload(dispatch, path)


def _evaluator(kind, path, cpu, workload, root, ctx, settings=FAST, devices=()):
    store = ResultStore(root / "results.sqlite", compiler_version(), runtime_version())
    return kind(path, cpu, workload, root / "candidates", store, settings, devices, ctx=ctx)


@pytest.mark.slow
def test_both_strategies_score_every_candidate_alike(small_matmul, tmp_path, ctx, cpu):
    candidates, workload = _batch(small_matmul, ctx, cpu, 4)
    runs = {kind.name: _evaluator(kind, small_matmul, cpu, workload, tmp_path / kind.name, ctx).evaluate(candidates)
            for kind in (Sequential, Overlapped)}
    for name, evaluation in runs.items():
        assert [r.candidate_id for r in evaluation.results] == [c.id for c in candidates]
        for r in evaluation.results:
            assert r.status == Status.OK, (name, r)
            assert r.median_ms > 0 and r.spread_pct >= 0 and r.compile_s > 0 and r.benchmark_s > 0
            assert r.relative_error is not None and r.device == "local-task"
        stats = evaluation.stats
        assert stats.strategy == name and stats.candidates == len(candidates) and stats.reused == 0
        assert 0 < stats.busy_s["local-task"] < stats.wall_s and 0 < stats.idle_share < 1
    # The same configs build the same executables whichever way they are scheduled.
    hashes = {name: [r.binary_hash for r in e.results] for name, e in runs.items()}
    assert hashes["sequential"] == hashes["overlapped"]


@pytest.mark.slow
def test_devices_share_one_queue(small_matmul, tmp_path, ctx, cpu):
    candidates, workload = _batch(small_matmul, ctx, cpu, 5)
    devices = ("local-task", "local-sync")
    evaluation = _evaluator(Overlapped, small_matmul, cpu, workload, tmp_path, ctx, devices=devices).evaluate(candidates)
    assert all(r.ok for r in evaluation.results)
    # Every device took work, and each result says which device measured it.
    assert {r.device for r in evaluation.results} == set(devices)
    assert all(evaluation.stats.busy_s[d] > 0 for d in devices)
    with pytest.raises(InputError, match="distinct"):
        _evaluator(Overlapped, small_matmul, cpu, workload, tmp_path, ctx, devices=("local-task", "local-task"))
    with pytest.raises(InputError, match="unknown evaluation strategy"):
        evaluator_class("random")


@pytest.mark.slow
def test_hung_compile_and_hung_benchmark_are_killed_and_marked(small_matmul, tmp_path, ctx, cpu, faulty_tools):
    candidates, workload = _batch(small_matmul, ctx, cpu, 4)
    faulty_tools("iree-compile", "candidates/0002", "hang")
    faulty_tools("iree-benchmark-module", "candidates/0003/", "hang")
    settings = replace(FAST, compile_timeout_s=10, run_timeout_s=5)  # a small matmul compiles in about 1 s
    evaluation = _evaluator(Overlapped, small_matmul, cpu, workload, tmp_path, ctx, settings).evaluate(candidates)
    by_id = {r.candidate_id: r for r in evaluation.results}
    assert by_id[2].status == Status.COMPILE_TIMEOUT and "timed out" in by_id[2].error
    assert by_id[3].status == Status.RUN_TIMEOUT and "iree-benchmark-module timed out" in by_id[3].error
    assert by_id[3].relative_error == 0.0  # its numbers were fine; only its timing hung
    assert all(by_id[i].ok for i in (0, 1, 4))
    assert {r.candidate_id for r in rank(evaluation.results).ranked} == {0, 1, 4}


@pytest.mark.slow
@pytest.mark.parametrize("kind", [Sequential, Overlapped], ids=lambda k: k.name)
def test_a_crashing_benchmark_and_wrong_numbers_are_marked_and_never_ranked(kind, small_matmul, tmp_path, ctx, cpu,
                                                                            faulty_tools):
    candidates, workload = _batch(small_matmul, ctx, cpu, 3)
    faulty_tools("iree-benchmark-module", "candidates/0001/", "crash")
    faulty_tools("iree-run-module", "candidates/0002/", "corrupt")
    evaluation = _evaluator(kind, small_matmul, cpu, workload, tmp_path, ctx).evaluate(candidates)
    by_id = {r.candidate_id: r for r in evaluation.results}
    assert by_id[1].status == Status.RUN_FAILED and "crashed: SIGSEGV" in by_id[1].error
    assert by_id[2].status == Status.WRONG_NUMERICS and by_id[2].relative_error > 0.1
    assert by_id[2].median_ms is None  # never timed, so never ranked
    assert by_id[0].ok and by_id[3].ok
    assert {r.candidate_id for r in rank(evaluation.results).ranked} == {0, 3}


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_and_loses_nothing(small_matmul, tmp_path, faulty_tools):
    out = tmp_path / "out"
    store = out / "results.sqlite"
    args = ["tune", str(small_matmul), "--num-candidates", "6", "--repetitions", "2", "--confirm-rounds", "1",
            "--output", str(out), "--strategy", "sequential"]
    faulty_tools("iree-benchmark-module", "candidates/", "slow")  # a second per timing: time to kill it
    kill_once_stored(cli_process(*args, env=dict(os.environ)), store, 3)  # the tuner and its tools, mid-run
    before = {r["key"]: r for r in stored_rows(store)}
    assert 3 <= len(before) < 7
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    faulty_tools.clear()
    second = cli_process(*args, env=dict(os.environ))
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    data = json.loads((out / "results.json").read_text())
    assert len(data["candidates"]) == 7 and all(c["status"] == "ok" for c in data["candidates"])
    # What the killed run measured is reused, not timed again; only the baseline is measured again.
    # (A reused result that is among the most promising is confirmed in this run's rounds, and
    # stored again with them: its first-pass time stays the killed run's.)
    kept = {k for k, r in before.items() if r["status"] == "ok"} - {c["key"] for c in data["candidates"] if c["is_baseline"]}
    after = {r["key"]: r for r in stored_rows(store)}
    confirmed = {c["key"] for c in data["candidates"] if c.get("rounds_ms")}
    assert all(after[k]["median_ms"] == before[k]["median_ms"] for k in kept)
    assert all(after[k]["written_at"] == before[k]["written_at"] for k in kept - confirmed)
    assert data["evaluation"]["reused"] == len(kept)
    assert data["evaluation"]["candidates"] == 7 - len(kept)
    assert len(after) == 7


@pytest.mark.slow
def test_two_tunings_at_once_share_one_store(tmp_path):
    store = tmp_path / "shared.sqlite"
    inputs = [write_matmul(tmp_path / "a.mlir", 128, 256, 64), write_matmul(tmp_path / "b.mlir", 96, 128, 64)]
    runs = [cli_process("tune", str(path), "--num-candidates", "3", "--repetitions", "2", "--confirm-rounds", "1",
                        "--store", str(store),
                 "--output", str(tmp_path / f"out{i}")) for i, path in enumerate(inputs)]
    for run in runs:
        output, _ = run.communicate(timeout=600)
        assert run.returncode == 0, output
    with sqlite3.connect(store) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    rows = stored_rows(store)
    keys = set()
    for i in range(2):
        data = json.loads((tmp_path / f"out{i}" / "results.json").read_text())
        assert all(c["status"] == "ok" for c in data["candidates"])
        keys |= {c["key"] for c in data["candidates"]}
    assert {r["key"] for r in rows} == keys and len(rows) == len(keys) == 8
    assert len({r["dispatch"] for r in rows}) == 2 and len({r["run"] for r in rows}) == 2


@pytest.mark.slow
def test_a_crashing_baseline_ends_the_run_with_its_error(small_matmul, tmp_path, ctx, cpu, faulty_tools):
    from tuner.errors import ToolError

    candidates, workload = _batch(small_matmul, ctx, cpu, 2)
    faulty_tools("iree-run-module", "candidates/0000/", "crash")
    evaluator = _evaluator(Overlapped, small_matmul, cpu, workload, tmp_path, ctx)
    with pytest.raises(ToolError, match="baseline.*crashed: SIGSEGV"):
        evaluator.evaluate(candidates)
    # What was recorded before the run ended is in the store.
    assert [r["status"] for r in stored_rows(tmp_path / "results.sqlite")][:1] == ["run_failed"]


@pytest.mark.slow
def test_a_wrong_result_from_a_faulty_run_is_not_reused_by_the_next(small_matmul, tmp_path, ctx, cpu, faulty_tools):
    # A corrupting tool (or odd inputs, or a flaky device) says nothing about the config: the
    # store keeps the record, a later run with the real tools measures the config again.
    candidates, workload = _batch(small_matmul, ctx, cpu, 2)
    faulty_tools("iree-run-module", "candidates/0002/", "corrupt")
    first = _evaluator(Sequential, small_matmul, cpu, workload, tmp_path, ctx).evaluate(candidates)
    assert {r.candidate_id: r.status for r in first.results}[2] == Status.WRONG_NUMERICS
    faulty_tools.clear()
    second = _evaluator(Sequential, small_matmul, cpu, workload, tmp_path, ctx).evaluate(candidates)
    again = {r.candidate_id: r for r in second.results}
    assert again[2].status == Status.OK and again[2].median_ms > 0
    assert second.stats.reused >= 1  # what was measured right (the baseline, candidate 1) is reused


@pytest.mark.slow
def test_results_measured_before_a_kill_compete_and_the_fastest_wins_the_rerun(small_matmul, tmp_path, timed_tools):
    # Candidate 1 is the fastest by far; the run is killed with SIGKILL once it is stored, long
    # before the first pass ends. Every stored result must carry a first-pass figure, so that the
    # rerun confirms it (it was reused, never timed again) and names it the winner.
    from tuner.store import ResultStore

    out = tmp_path / "out"
    store = out / "results.sqlite"
    timed_tools({0: 10.0, 1: 4.0, 2: 9.0, 3: 9.5, 4: 9.8, 5: 9.9, 6: 9.7})
    config = tmp_path / "timed-tools" / "config.json"
    slow = json.loads(config.read_text())
    config.write_text(json.dumps({**slow, "sleep": 0.7}))  # time to kill it mid-pass
    args = ["tune", str(small_matmul), "--budget", "6", "--search", "exhaustive", "--repetitions", "1",
            "--confirm-rounds", "2", "--output", str(out), "--strategy", "sequential"]
    kill_once_stored(cli_process(*args, env=dict(os.environ)), store, 3)
    with ResultStore(store, compiler_version(), runtime_version()) as s:
        stored = [s.get(r["key"], r["device_id"], r["timing"]) for r in s.rows()]
    ok = [r for r in stored if r.ok]
    assert len(ok) >= 2 and all(r.first_pass_speedup is not None for r in ok), ok
    config.write_text(json.dumps(slow))
    second = cli_process(*args, env=dict(os.environ))
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    data = json.loads((out / "results.json").read_text())
    best = next(c for c in data["candidates"] if c["candidate_id"] == data["best"])
    fastest = min((r for r in ok if not r.is_baseline), key=lambda r: r.median_ms)
    assert best["key"] == fastest.key and best["speedup"] == pytest.approx(10.0 / fastest.median_ms, rel=0.05)


@pytest.mark.slow
def test_a_compile_that_hangs_using_no_cpu_is_retried_once_and_said(small_matmul, tmp_path, ctx, cpu, faulty_tools):
    from tuner.build.compile import compile_candidate, verify_build

    candidates, _ = _batch(small_matmul, ctx, cpu, 1)
    faulty_tools("iree-compile", "candidates/0001", "hang")  # sleeps: a deadlock uses no CPU either
    job = compile_candidate(candidates[1], small_matmul, cpu, tmp_path / "candidates", timeout_s=2.0)
    assert job.run.timed_out and job.run.hung and job.run.retried and job.run.seconds >= 4.0
    result = verify_build(job, cpu, ctx).result
    assert result.status == Status.COMPILE_TIMEOUT and "hung using no CPU, and again when retried" in result.error


@pytest.mark.slow
def test_a_tool_busy_until_its_timeout_is_not_called_hung():
    import sys

    from tuner.tools import run_tool_retrying_a_hang

    busy = run_tool_retrying_a_hang([sys.executable, "-c", "while True: pass"], 1.5)
    assert busy.timed_out and not busy.hung and not busy.retried


@pytest.mark.slow
def test_a_tool_whose_child_is_busy_until_the_timeout_is_not_called_hung():
    import sys

    from tuner.tools import run_tool

    # The parent only waits (as the wheels' iree-compile script waits on the real binary).
    busy = run_tool([sys.executable, "-c", "import subprocess, sys; "
                     "subprocess.run([sys.executable, '-c', 'while True: pass'])"], 1.5)
    assert busy.timed_out and not busy.hung
