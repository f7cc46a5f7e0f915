"""The replay runner (tuner.evaluation.replay_runner), issue 61's example of a runner added as a
class and a registry line: a run over the fakes of tests/test_evaluator_fakes.py is recorded in
a store file, then the same candidates are evaluated by a schedule whose runner replays that
store; the registry's names and errors; the CLI's `--runner`."""

from pathlib import Path

import pytest

from tests.test_evaluator_fakes import SETTINGS, MemoryBuilder, MemoryRunner, batch  # noqa: F401 (a fixture)
from tuner.core.results import Status
from tuner.errors import InputError
from tuner.evaluation.replay_runner import ReplayRunner
from tuner.evaluation.runners import RUNNERS, runner_named
from tuner.ranking import rank
from tuner.store import ResultStore
from tuner.strategies import STRATEGIES


def _run(batch, tmp_path: Path, cpu, runner, store: ResultStore, builder: MemoryBuilder):
    path, candidates, workload, ctx = batch
    evaluator = STRATEGIES["sequential"](path, cpu, workload, tmp_path / "candidates", store, SETTINGS,
                                         ("memory://0",), ctx=ctx, runner=runner, builder=builder)
    return evaluator.evaluate(candidates)


def _recorded(batch, tmp_path: Path, cpu, times: dict[int, float], **kw) -> Path:
    """A run of the fakes with designed times, its results in a store file: what is replayed."""
    path = tmp_path / "recorded" / "results.sqlite"
    store = ResultStore(path, "compiler", "runtime")
    _run(batch, tmp_path / "recorded", cpu, MemoryRunner(times, **{k: v for k, v in kw.items() if k == "wrong"}),
         store, MemoryBuilder(tmp_path / "recorded" / "candidates", kw.get("failing", frozenset())))
    store.close()
    return path


def test_a_replayed_run_times_each_config_as_the_recorded_run_did_and_picks_the_same_winner(batch, tmp_path, cpu):
    recorded = _recorded(batch, tmp_path, cpu, {3: 0.5, 5: 0.8})
    replay = ReplayRunner(recorded)
    evaluation = _run(batch, tmp_path / "replayed", cpu, replay, ResultStore.in_memory("compiler", "runtime"),
                      MemoryBuilder(tmp_path / "replayed" / "candidates"))
    by_id = {r.candidate_id: r for r in evaluation.results}
    assert by_id[3].median_ms == pytest.approx(0.5) and by_id[5].median_ms == pytest.approx(0.8)
    assert rank(list(evaluation.results)).best.candidate_id == 3
    # stored under the replay's own conditions, never mixed with a device's
    assert {r.device_id for r in evaluation.results} == {f"replay of {recorded.resolve()}"}


def test_a_config_the_store_holds_as_failed_fails_again_and_one_it_does_not_hold_says_so(batch, tmp_path, cpu):
    recorded = _recorded(batch, tmp_path, cpu, {3: 0.5}, wrong={4})
    replay = ReplayRunner(recorded)
    _, candidates, _, _ = batch
    four = next(c for c in candidates if c.id == 4)
    del replay.recorded[next(c.key for c in candidates if c.id == 2)]  # as if the recorded run never met it
    evaluation = _run(batch, tmp_path / "replayed", cpu, replay, ResultStore.in_memory("compiler", "runtime"),
                      MemoryBuilder(tmp_path / "replayed" / "candidates"))
    by_id = {r.candidate_id: r for r in evaluation.results}
    assert replay.recorded[four.key].status == Status.WRONG_NUMERICS
    assert by_id[4].status == Status.RUN_FAILED and "wrong_numerics" in by_id[4].error.lower()
    assert by_id[2].status == Status.RUN_FAILED and "no result of this config" in by_id[2].error


def test_the_registry_names_each_runner_and_refuses_what_it_cannot_make(tmp_path):
    assert set(RUNNERS) == {"local", "replay"}
    assert runner_named("local").local is True
    for spec, said in [("gpu-farm", "unknown runner 'gpu-farm'"), ("replay", "needs the store"),
                       (f"replay:{tmp_path / 'none.sqlite'}", "is no file"), ("local:x", "takes no argument")]:
        with pytest.raises(InputError, match=said):
            runner_named(spec)


@pytest.mark.slow
def test_tune_with_the_replay_runner_times_each_config_at_the_first_runs_figures(tmp_path):
    """`tune` twice on the README's kind of sample: once timing for real, then with --runner
    replay of the first run's store (nothing run: each config at its recorded times)."""
    import json

    from tests.conftest import assert_one_error_line, run_cli, write_matmul

    program = write_matmul(tmp_path / "mm.mlir", 128, 128, 128)
    first = run_cli("tune", str(program), "--budget", "2", "--output", str(tmp_path / "real"), "--repetitions", "1",
                    "--confirm-rounds", "1")
    assert first.exit_code == 0, first.output
    second = run_cli("tune", str(program), "--budget", "2", "--output", str(tmp_path / "again"), "--repetitions", "1",
                     "--confirm-rounds", "1", "--runner", f"replay:{tmp_path / 'real' / 'results.sqlite'}")
    assert second.exit_code == 0, second.output
    real = json.loads((tmp_path / "real" / "results.json").read_text())
    again = json.loads((tmp_path / "again" / "results.json").read_text())
    timed = {c["key"]: c["median_ms"] for c in real["candidates"] if c.get("median_ms")}
    replayed = {c["key"]: c["median_ms"] for c in again["candidates"] if c.get("median_ms")}
    assert len(replayed) >= 2 and set(replayed) <= set(timed)
    assert all(replayed[k] == pytest.approx(timed[k]) for k in replayed)
    assert_one_error_line(run_cli("tune", str(program), "--output", str(tmp_path / "bad"), "--runner", "nowhere"), 2,
                          "unknown runner 'nowhere'")
