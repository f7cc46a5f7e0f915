"""The compile-and-benchmark loop for real on a small matmul: failures are data, numerics are
checked, results are stored as they arrive and reused, and the best spec rebuilds the winner."""

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import tuner.evaluate as evaluate_mod
from pipelines import Config, pipeline_for
from tuner import api
from tuner.candidates import Candidate, generate_candidates
from tuner.discovery import discover, parse_input, read_configured, read_workload
from tuner.errors import ToolError
from tuner.evaluate import EvalSettings, candidate_flags, evaluate
from tuner.results import Status
from tuner.store import ResultStore
from tuner.tools import find_tool, run_tool

FAST = EvalSettings(repetitions=2, min_time_s=0.01, confirm_rounds=0)


def _setup(path, ctx, cpu, tmp_path, n=3):
    [dispatch] = discover(path, cpu, ctx)
    candidates = generate_candidates(dispatch, pipeline_for(dispatch), n, ctx)
    workload = read_workload(parse_input(path, ctx), path)
    inputs = tuple(workload.write_inputs(tmp_path / "inputs"))
    return dispatch, candidates, workload, inputs


def test_tune_writes_outputs_and_best_flags_rebuild_the_winner(small_matmul, tmp_path, ctx):
    out = tmp_path / "out"
    tuning = api.tune(small_matmul, "llvm-cpu", 4, out, settings=replace(FAST, confirm_top=2, confirm_rounds=2))
    data = json.loads((out / "results.json").read_text())
    assert len(data["candidates"]) == 5
    assert sum(c["is_baseline"] for c in data["candidates"]) == 1
    for c in data["candidates"]:
        assert c["status"] == "ok", c
        assert c["median_ms"] > 0 and c["spread_pct"] >= 0
        # The baseline and the two fastest others were timed again: 2 + 2 rounds x 2 repetitions.
        assert len(c["times_ms"]) in (2, 6)
    assert sum(len(c["times_ms"]) == 6 for c in data["candidates"]) == 3
    best = tuning.ranking.best
    assert data["best"] == best.candidate_id
    assert best.median_ms == min(c["median_ms"] for c in data["candidates"])
    # The documented rebuild: iree-compile INPUT $(cat best_flags.txt) -o out.vmfb
    flags = (out / "best_flags.txt").read_text().split()
    rebuilt = run_tool([find_tool("iree-compile"), str(small_matmul), *flags, "--iree-codegen-add-tuner-attributes",
                        f"--iree-hal-dump-executable-configurations-to={tmp_path / 'dump'}", "-o", str(tmp_path / "r.vmfb")], 300)
    assert rebuilt.ok, rebuilt.stderr
    winner = next(c for c in tuning.candidates if c.id == best.candidate_id)
    configured = read_configured([p.read_text() for p in (tmp_path / "dump").glob("*.mlir")], ctx)
    wanted = winner.config.expect_root_op or winner.dispatch.op_name
    assert any(d.op_name == wanted for d in configured)
    if winner.config.expect_lowering_config:
        assert any(d.lowering_config == winner.config.expect_lowering_config for d in configured)


def test_best_spec_of_a_tiled_candidate_rebuilds_it(small_matmul, tmp_path, ctx, cpu):
    _, candidates, _, _ = _setup(small_matmul, ctx, cpu, tmp_path)
    tiled = next(c for c in candidates if c.config.compilation_info)
    spec = tmp_path / "best_spec.mlir"
    spec.write_text(tiled.spec)
    run = run_tool([find_tool("iree-compile"), str(small_matmul), *candidate_flags(tiled, cpu, spec),
                    "--compile-to=executable-configurations"], 300)
    assert run.ok, run.stderr
    [configured] = read_configured([run.stdout], ctx)
    assert configured.lowering_config == tiled.config.expect_lowering_config


def test_failures_are_data_and_the_run_goes_on(small_matmul, tmp_path, ctx, cpu, monkeypatch):
    dispatch, candidates, workload, inputs = _setup(small_matmul, ctx, cpu, tmp_path)
    tiled = next(c for c in candidates if c.config.compilation_info)
    # A config the compiler rejects: a distribution list of the wrong length.
    broken_info = tiled.config.compilation_info.replace("distribution = [", "distribution = [7, ")
    broken_cfg = replace(tiled.config, compilation_info=broken_info)
    from tuner.spec import build_spec
    broken = Candidate(90, dispatch, tiled.pipeline, broken_cfg, str(build_spec([(dispatch, broken_info)], ctx)))
    # A candidate whose output is corrupted after it runs: the numerics check must catch it.
    wrong = replace(candidates[1], id=91)
    real_run_once = evaluate_mod.run_once

    def corrupting_run_once(vmfb, settings, output):
        run = real_run_once(vmfb, settings, output)
        if "/0091/" in str(vmfb):
            np.save(output, np.load(output) * 1.5)
        return run

    monkeypatch.setattr(evaluate_mod, "run_once", corrupting_run_once)
    results = evaluate([candidates[0], broken, wrong, tiled], small_matmul, cpu, workload.entry, inputs,
                       tmp_path / "work", ResultStore(tmp_path / "r.jsonl"), ctx, FAST)
    by_id = {r.candidate_id: r for r in results}
    assert by_id[0].ok and by_id[tiled.id].ok
    assert by_id[90].status == Status.COMPILE_FAILED and by_id[90].error and by_id[90].command
    assert by_id[91].status == Status.WRONG_NUMERICS and by_id[91].relative_error > 0.1
    assert by_id[91].median_ms is None


def test_results_are_stored_and_reused(small_matmul, tmp_path, ctx, cpu):
    _, candidates, workload, inputs = _setup(small_matmul, ctx, cpu, tmp_path)
    store = ResultStore(tmp_path / "r.jsonl")
    compiled = []

    def progress(phase, done, total):
        if phase == "compile":
            compiled.append(total)

    first = evaluate(candidates, small_matmul, cpu, workload.entry, inputs, tmp_path / "w", store, ctx, FAST, progress)
    assert compiled[-1] == len(candidates)
    assert len(store.load()) == len(candidates)
    compiled.clear()
    second = evaluate(candidates, small_matmul, cpu, workload.entry, inputs, tmp_path / "w", store, ctx, FAST, progress)
    assert compiled[-1] == 1  # only the baseline is measured again
    assert [r.key for r in first] == [r.key for r in second]
    stored_times = {r.key: r.times_ms for r in first if not r.is_baseline}
    assert all(r.times_ms == stored_times[r.key] for r in second if not r.is_baseline)


def test_a_failing_baseline_stops_the_run(small_matmul, tmp_path, ctx, cpu):
    _, candidates, workload, inputs = _setup(small_matmul, ctx, cpu, tmp_path, n=1)
    with pytest.raises(ToolError, match="baseline"):
        evaluate(candidates, small_matmul, cpu, workload.entry, inputs, tmp_path / "w",
                 ResultStore(tmp_path / "r.jsonl"), ctx, replace(FAST, compile_timeout_s=0.001))
