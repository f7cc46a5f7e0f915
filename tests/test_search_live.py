"""Searches driving real tunings: the budget, who proposed what, the baseline kept for the final
head-to-head, and the rounds of an adaptive search across two machines (compile-only, then
benchmark, then compile-only again)."""

import json

import pytest

from conftest import run_cli
from tuner.core.settings import SearchSettings
from tuner.search.heuristics import PreferenceHead


def _said(result) -> str:
    """The CLI's output with its line wrapping undone."""
    return " ".join(result.output.split())


def _results(out):
    return json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_a_search_tunes_within_its_budget_and_confirms_its_best_against_the_baseline(tmp_path, small_matmul,
                                                                                      timed_tools):
    # Candidate 6 (whatever config the search puts there) is the fastest; the rest are slower
    # than the default or near it.
    times = {i: 10.0 + i for i in range(40)}
    times.update({0: 10.0, 6: 4.0})
    timed_tools(times)
    out = tmp_path / "out"
    result = run_cli("tune", small_matmul, "--search", "model", "--budget", "10", "--seed", "2", "--repetitions", "1",
                     "--output", out)
    assert result.exit_code == 0, result.output
    assert "search: model over" in _said(result)
    data = _results(out)
    head = PreferenceHead().count  # the heuristic's seeds, proposed first
    assert data["search"]["seeds"] == {"preference_head": head}
    candidates = data["candidates"]
    assert len(candidates) == 10 + 1 and sum(c["is_baseline"] for c in candidates) == 1  # the budget and the baseline
    assert data["search"]["budget"] == 10 and data["search"]["evaluations"] == 10
    proposed = [c.get("proposed_by") for c in sorted(candidates, key=lambda c: c["candidate_id"]) if not c["is_baseline"]]
    assert proposed == ["preference_head"] * head + ["model"] * (10 - head)
    assert data["best"] == 6
    best = next(c for c in candidates if c["candidate_id"] == 6)
    assert best["speedup"] == 2.5 and len(best["round_ratios"]) == 4  # confirmed, paired with the baseline
    # Every batch timed the baseline again; the stats cover all of them.
    assert data["evaluation"]["candidates"] >= 10 and data["evaluation"]["baseline_timings"] >= 4


@pytest.mark.slow
def test_a_time_budget_stops_the_search_between_batches(tmp_path, small_matmul, timed_tools):
    timed_tools({i: 10.0 for i in range(40)})
    out = tmp_path / "out"
    result = run_cli("tune", small_matmul, "--search", "random", "--budget", "30", "--time-budget", "0.001",
                     "--repetitions", "1", "--confirm-rounds", "1", "--output", out)
    assert result.exit_code == 0, result.output
    data = _results(out)
    # The first batch starts; no second one after the time is up.
    assert data["search"]["evaluations"] == SearchSettings().batch_size
    assert all(c.get("proposed_by") == "random" for c in data["candidates"] if not c["is_baseline"])


def test_bad_search_settings_are_one_error_line(tmp_path, small_matmul):
    from conftest import assert_one_error_line

    refused = run_cli("tune", small_matmul, "--time-budget", "0", "--output", tmp_path / "o")  # by the CLI's type
    assert refused.exit_code == 2 and "a positive, finite number of seconds" in refused.output, refused.output
    from tuner import api
    from tuner.errors import InputError
    from tuner.core.settings import SearchSettings

    with pytest.raises(InputError, match="--time-budget must be a positive number of seconds"):  # and by the API
        api.tune(small_matmul, "llvm-cpu", tmp_path / "o", search=SearchSettings(budget=2, seconds=float("nan")))
    seeds = tmp_path / "seeds.json"
    seeds.write_text("{}")
    assert_one_error_line(run_cli("tune", small_matmul, "--seeds", seeds, "--output", tmp_path / "o"), 2,
                          "expected a list of seed entries")


@pytest.mark.slow
def test_an_adaptive_search_across_two_machines_runs_in_rounds(tmp_path, small_matmul):
    out = tmp_path / "out"
    compile_args = ["tune", small_matmul, "--search", "model", "--budget", "10", "--compile-only", "--output", out]
    first = run_cli(*compile_args)
    assert first.exit_code == 0, first.output
    assert "run this command again for the search's next batch" in _said(first)
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["candidates"]) == 9  # the baseline and the first batch of 8
    assert run_cli("benchmark", out, "--repetitions", "1", "--confirm-rounds", "1").exit_code == 0

    second = run_cli(*compile_args)  # the search reads the first batch's figures from the store
    assert second.exit_code == 0, second.output
    manifest = json.loads((out / "manifest.json").read_text())
    # The last 2 of the budget: this round's measurement is the last, and the search was told
    # the 8 figures of the first.
    assert len(manifest["candidates"]) == 11 and manifest["meta"]["search"]["done"] is True
    assert manifest["meta"]["search"]["evaluations"] == 8
    assert "that measurement is the last" in _said(second)
    measured = run_cli("benchmark", out, "--repetitions", "1", "--confirm-rounds", "1")
    assert measured.exit_code == 0, measured.output
    data = _results(out)
    assert data["evaluation"]["reused"] == 8  # the first round's figures, not timed again

    third = run_cli(*compile_args)
    assert third.exit_code == 0, third.output
    assert "the search has spent its budget" in _said(third)


@pytest.mark.slow
def test_a_search_that_does_not_learn_compiles_its_whole_budget_in_one_last_round(tmp_path, small_matmul):
    out = tmp_path / "out"
    first = run_cli("tune", small_matmul, "--search", "preference", "--budget", "3", "--compile-only", "--output", out)
    assert first.exit_code == 0, first.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["candidates"]) == 4 and manifest["meta"]["search"]["done"] is True
    assert "that measurement is the last" in _said(first)


def test_a_searchs_compiles_and_first_timings_count_against_its_whole_budget_across_batches():
    """Batches of 4 of a budget of 10: the second batch's compiles go on from 4 of 10, never past
    10; the confirmation rounds count on their own."""
    from tuner.driver import BudgetProgress

    seen = []
    progress = BudgetProgress(lambda phase, done, of: seen.append((phase, done, of)), 10)
    progress("compile", 2, 4)
    progress.batch_done(4)
    progress("compile", 3, 4)
    progress("benchmark", 4, 4)
    progress.batch_done(4)
    progress.batch_done(4)
    progress("benchmark", 4, 4)
    progress("confirm", 1, 3)
    assert seen == [("compile", 2, 10), ("compile", 7, 10), ("benchmark", 8, 10), ("benchmark", 10, 10),
                    ("confirm", 1, 3)]
    BudgetProgress(None, 10)("compile", 1, 4)  # no listener: nothing to tell
