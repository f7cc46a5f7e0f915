"""The CLI: bad input gets one line and a non-zero exit; a real run prints the table."""

import json

import pytest

from tests.conftest import SAMPLES, assert_one_error_line, run_cli


def test_not_mlir(tmp_path):
    bad = tmp_path / "x.mlir"
    bad.write_bytes(b"\x00\x01 definitely not mlir")
    assert_one_error_line(run_cli("tune", str(bad), "--output", str(tmp_path / "o")), 2, "not valid MLIR")


def test_missing_file(tmp_path):
    assert_one_error_line(run_cli("tune", str(tmp_path / "nope.mlir"), "--output", str(tmp_path / "o")), 2, "no such file")


def test_nothing_to_tune(tmp_path):
    f = tmp_path / "ret.mlir"
    f.write_text("func.func @id(%a: tensor<4xf32>) -> tensor<4xf32> { return %a : tensor<4xf32> }")
    assert_one_error_line(run_cli("tune", str(f), "--output", str(tmp_path / "o")), 2, "nothing this tuner can tune")


def test_unknown_target(tmp_path):
    assert_one_error_line(run_cli("tune", str(SAMPLES / "matmul_1024x1024x1024_f32.mlir"), "--target", "tpu-v9",
                         "--output", str(tmp_path / "o")), 3, "unknown target")


def test_an_output_path_that_is_a_file_or_under_one_says_so(tmp_path):
    # Issue 63: both said "cannot write to output directory ...: File exists".
    blocker = tmp_path / "file"
    blocker.write_text("")
    sample = str(SAMPLES / "matmul_1024x1024x1024_f32.mlir")
    assert_one_error_line(run_cli("tune", sample, "--output", str(blocker / "sub")), 4,
                          f"output directory {blocker / 'sub'} is under {blocker}, which is a file, not a directory")
    assert_one_error_line(run_cli("tune", sample, "--output", str(blocker)), 4,
                          f"output directory {blocker} is a file, not a directory: name a directory for --output")


def test_bad_candidate_count(tmp_path, small_matmul):
    assert_one_error_line(run_cli("tune", str(small_matmul), "--num-candidates", "0", "--output", str(tmp_path / "o")),
                    2, "at least 1")


def test_report_says_which_family_of_the_pipeline_won_as_the_run_recorded_them(tmp_path):
    """A run whose pipeline has a family knob (llvm-cpu contractions: data tiling or their own
    tiles) records it in results.json; `report` says which family won and the best of the other,
    and an edited "families" is one error line."""
    from tuner.core.results import Result, Status

    def r(i, ms, knobs, ratios=()):
        return Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=i == 0, knobs=knobs, flags=[],
                      status=Status.OK, times_ms=[ms] * 3, median_ms=ms, spread_pct=1.0,
                      first_pass_speedup=2.0 / ms, round_ratios=list(ratios))

    results = [r(0, 2.0, {}), r(1, 1.0, {"data_tiling": True}, (1.9, 1.8, 1.85, 1.9)),
               r(2, 1.6, {"data_tiling": False}, (1.2, 1.3, 1.25, 1.2))]
    data = {"dispatch": "d", "target": "llvm-cpu", "families": ["data_tiling", "data tiling", "its own tiles"],
            "candidates": [x.to_json() for x in results]}
    (tmp_path / "results.json").write_text(json.dumps(data))
    result = run_cli("report", str(tmp_path))
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert ("data tiling or not: data tiling won (cfg 1); the best of its own tiles: cfg 2, 1.25x in its first "
            "pass") in said
    (tmp_path / "results.json").write_text(json.dumps({**data, "families": ["data_tiling"]}))
    assert_one_error_line(run_cli("report", str(tmp_path)), 2, "families is ['data_tiling']")
    (tmp_path / "results.json").write_text(json.dumps({k: v for k, v in data.items() if k != "families"}))
    plain = run_cli("report", str(tmp_path))
    assert plain.exit_code == 0 and "or not:" not in plain.output  # a pipeline without families says nothing


@pytest.mark.slow
def test_a_small_tuning_end_to_end(tmp_path, small_matmul):
    out = tmp_path / "o"
    result = run_cli("tune", str(small_matmul), "--num-candidates", "2", "--repetitions", "2", "--confirm-rounds", "2",
                     "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "Candidates: confirmed side by side" in result.output and "baseline" in result.output
    assert ("best: candidate" in result.output) != ("no winner:" in result.output)
    assert (out / "best_spec.mlir").exists() and (out / "best_flags.txt").exists()
    assert len(json.loads((out / "results.json").read_text())["candidates"]) == 3


def test_report_redraws_table_and_plot(tmp_path):
    from tuner.core.results import Result, Status

    def r(i, ms, status=Status.OK, baseline=False, ratios=()):
        return Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=baseline, knobs={}, flags=[],
                      status=status, times_ms=[ms] * 3 if ms else [], median_ms=ms, spread_pct=1.0 if ms else None,
                      first_pass_speedup=2.0 / ms if ms else None, round_ratios=list(ratios))

    results = [r(0, 2.0, baseline=True), r(1, 1.0, ratios=(1.9, 1.8, 1.86, 1.2)), r(2, 3.0),
               r(3, None, Status.COMPILE_FAILED)]
    (tmp_path / "results.json").write_text(json.dumps({"dispatch": "d", "target": "llvm-cpu",
                                                       "candidates": [x.to_json() for x in results]}))
    result = run_cli("report", str(tmp_path))
    assert result.exit_code == 0, result.output
    # Candidate 1: 2.00x in its first pass, 1.83x paired (the median of 1.9, 1.8, 1.86, 1.2), faster
    # in 4 rounds of 4: the winner. Candidate 2 was only in the first pass: 0.67x, no paired figure.
    assert "cfg 1" in result.output and "2.00x" in result.output and "1.83x" in result.output
    assert "4/4" in result.output and "compile_failed" in result.output and "0.67x" in result.output
    assert "best: candidate 1 (cfg 1) is 1.83x the default" in " ".join(result.output.split())
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Named by its results.json, the directory is meant (it said "DIR/results.json: no results.json").
    again = run_cli("report", str(tmp_path / "results.json"))
    assert again.exit_code == 0 and "best: candidate 1 (cfg 1)" in " ".join(again.output.split())
    from tuner.run_dir import UMASK
    assert (tmp_path / "results.png").stat().st_mode & 0o777 == 0o666 & ~UMASK  # as every output, not 0600
    assert_one_error_line(run_cli("report", str(tmp_path / "nothing")), 2, "nothing: no such directory")
    (tmp_path / "empty").mkdir()
    assert_one_error_line(run_cli("report", str(tmp_path / "empty")), 2, "empty: no results.json")


def test_the_plot_of_a_winner_whose_fresh_rounds_lie_outside_its_choosing_rounds(tmp_path):
    """The winner's bar is the median of its fresh rounds (2.4x) and its range theirs, not the
    choosing rounds' (1.8-2.0x, which do not contain 2.4: matplotlib refused the negative error
    bar, and `report` failed)."""
    from tuner.ranking import rank
    from tuner.report.plot import plot_ranking
    from tuner.core.results import Result, Status

    def r(i, ms, baseline=False, ratios=(), holdout=()):
        return Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=baseline, knobs={}, flags=[],
                      status=Status.OK, times_ms=[ms] * 3, median_ms=ms, spread_pct=1.0, first_pass_speedup=2.0 / ms,
                      round_ratios=list(ratios), holdout_ratios=list(holdout))

    ranking = rank([r(0, 2.0, baseline=True, ratios=(1.0,) * 4),
                    r(1, 1.0, ratios=(1.8, 1.9, 2.0, 1.9), holdout=(2.3, 2.4, 2.5, 2.4, 2.4, 2.6, 2.2, 2.4))])
    assert ranking.best.candidate_id == 1 and ranking.best.speedup == 2.4
    assert ranking.best.speedup_ratios == [2.3, 2.4, 2.5, 2.4, 2.4, 2.6, 2.2, 2.4]
    out = plot_ranking(ranking, tmp_path / "results.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _knobs_of_two_candidates(path, ctx, cpu):
    from pipelines import pipeline_for
    from tuner.specs.candidates import generate_candidates
    from tuner.discovery.program import discover

    [dispatch] = discover(path, cpu, ctx)
    return [dict(c.config.knobs) for c in generate_candidates(dispatch, pipeline_for(dispatch), 2, ctx)[1:]]


@pytest.mark.slow
def test_benchmark_a_given_list_of_configs(tmp_path, small_matmul, ctx, cpu):
    knobs = _knobs_of_two_candidates(small_matmul, ctx, cpu)
    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps([knobs[0], {"knobs": knobs[1]}]))
    out = tmp_path / "o"
    result = run_cli("benchmark", str(small_matmul), "--configs", str(configs), "--repetitions", "2",
                  "--confirm-rounds", "1", "--strategy", "sequential", "--output", str(out))
    assert result.exit_code == 0, result.output
    assert "sequential: 3 evaluated" in result.output
    data = json.loads((out / "results.json").read_text())
    # Each config as given; the data-tiled knobs it does not name (generate_candidates without
    # discovery's data-tiled op has none) filled in as "not used".
    from pipelines.llvmcpu_double_tiling import LLVMCPUDoubleTiling

    assert [c["knobs"] for c in data["candidates"]] == [{}, *({**LLVMCPUDoubleTiling.optional_knobs, **k} for k in knobs)]
    assert all(c["status"] == "ok" for c in data["candidates"])
    # A results.json is a configs file too: the same configs again, all reused from the store.
    again = run_cli("benchmark", str(small_matmul), "--configs", str(out / "results.json"), "--repetitions", "2",
                 "--confirm-rounds", "1", "--output", str(out))
    assert again.exit_code == 0, again.output
    assert "sequential: 1 evaluated, 2 reused from the store" in again.output


@pytest.mark.slow
def test_benchmark_rejects_bad_configs(tmp_path, small_matmul, ctx, cpu):
    knobs = _knobs_of_two_candidates(small_matmul, ctx, cpu)[0]
    configs = tmp_path / "configs.json"
    configs.write_text(json.dumps([{**knobs, "tile_z": 4}]))
    assert_one_error_line(run_cli("benchmark", str(small_matmul), "--configs", str(configs), "--output", str(tmp_path / "o")),
                    2, "unknown: tile_z")
    configs.write_text("[{")
    assert_one_error_line(run_cli("benchmark", str(small_matmul), "--configs", str(configs), "--output", str(tmp_path / "o")),
                    2, "not a JSON configs file")
    assert_one_error_line(run_cli("benchmark", str(small_matmul), "--output", str(tmp_path / "o")), 2, "give --configs")
    assert_one_error_line(run_cli("benchmark", str(tmp_path / "nothing-here")), 2, "no such file or directory")
    # Outside the pipeline's constraints: said so, and evaluated anyway (a failure would be data).
    configs.write_text(json.dumps([{**knobs, "distribution_m": 3}]))
    result = run_cli("benchmark", str(small_matmul), "--configs", str(configs), "--repetitions", "1", "--confirm-rounds", "1",
                  "--output", str(tmp_path / "o"))
    assert result.exit_code == 0, result.output
    assert "config 0 is outside the" in result.output
    assert len(json.loads((tmp_path / "o" / "results.json").read_text())["candidates"]) == 2


def test_candidates_lists_knobs_and_specs_without_compiling_them(tmp_path, small_matmul):
    from tuner.input.configs_file import read_configs

    out = tmp_path / "cands"
    result = run_cli("candidates", str(small_matmul), "--num-candidates", "3", "--output", str(out), "--specs")
    assert result.exit_code == 0, result.output
    assert "baseline" in result.output and "distribution_m=" in result.output
    assert "transform.iree.match.contraction" in result.output  # --specs prints them
    entries = json.loads((out / "candidates.json").read_text())
    assert [e["id"] for e in entries] == [0, 1, 2, 3] and entries[0]["is_baseline"]
    for e in entries[1:]:
        spec = (out / e["spec"]).read_text()
        assert ("transform.annotate" in spec) == (e["compilation_info"] is not None)
    # The list is a configs file for `iree-tuner benchmark --configs` (the baseline is implied).
    assert read_configs(out / "candidates.json") == [e["knobs"] for e in entries[1:]]
    # Nothing was compiled: no candidate directory, no module, no configuration dump anywhere.
    assert sorted(p.name for p in out.iterdir()) == ["candidates.json", "specs"]
    assert sorted(p.name for p in (out / "specs").iterdir()) == [f"{i:04d}.mlir" for i in range(4)]
    assert_one_error_line(run_cli("candidates", str(small_matmul), "--target", "rocm:gfx1"), 3, "unknown rocm arch")


def test_unknown_pipeline_is_one_error_line(tmp_path, small_matmul):
    assert_one_error_line(run_cli("candidates", str(small_matmul), "--pipeline", "magic"), 2, "unknown pipeline 'magic'")
    assert_one_error_line(run_cli("candidates", str(small_matmul), "--pipeline", "llvmgpu_vector_distribute"), 2,
                    "nothing this tuner can tune on this target with llvmgpu_vector_distribute")


@pytest.mark.parametrize("option,value", [("--time-budget", "nan"), ("--time-budget", "-5"), ("--compile-timeout", "0"),
                                          ("--run-timeout", "inf"), ("--repetitions", "0")])
def test_a_number_that_cannot_be_meant_is_refused_before_anything_runs(option, value, small_matmul, tmp_path):
    result = run_cli("tune", str(small_matmul), option, value, "--output", str(tmp_path / "o"))
    assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output
    assert "Traceback" not in result.output and not (tmp_path / "o").exists()


def test_version_names_the_tuner_and_the_tools_it_runs():
    from tuner.versions import compiler_version

    result = run_cli("--version")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].startswith("iree-tuner ") and f"IREE compiler {compiler_version()}" in lines[1]
    assert lines[2].startswith("z3 ")


def test_the_top_level_help_gives_every_command_a_whole_summary():
    result = run_cli("--help")
    commands = result.output.split("Commands:")[1]
    names = ["benchmark", "candidates", "crosscheck", "dispatches", "pack", "rebuild", "report", "run", "tune",
             "tune-model"]
    assert all(f"  {n} " in commands for n in names) and "..." not in commands


def test_the_search_is_shown_as_it_runs_each_result_a_line_where_no_progress_bar_shows():
    """Issue 39: the best so far and its figure as batches end; in a log (not a terminal) each
    candidate's result as a line; a better figure is said again, a worse one is not."""
    import io

    from rich.console import Console

    from tuner.cli.say import LiveResults
    from tuner.core.results import Result, Status

    def r(i, ms, first, status=Status.OK, error=""):
        return Result(i, f"k{i}", f"cfg {i}", i == 0, {}, [], status, times_ms=[ms] if ms else [], median_ms=ms,
                      first_pass_speedup=first, error=error)

    for terminal in (False, True):
        out = io.StringIO()
        live = LiveResults(Console(file=out, force_terminal=terminal, width=200))
        live([r(0, 2.0, 1.0), r(1, 1.0, 2.0), r(2, None, None, Status.COMPILE_FAILED, "error: bad tile")])
        live([r(1, 1.0, 2.0), r(3, 1.6, 1.25)])  # candidate 1 again (a reused result): not said twice
        live([r(4, 0.5, 4.0)])
        lines = [line for line in out.getvalue().splitlines() if line.strip()]
        bests = [line for line in lines if line.startswith("best so far")]
        assert bests == ["best so far: candidate 1 (cfg 1), 2.00x in its first pass, after 2 evaluations "
                         "(confirmed side by side at the end)",
                         "best so far: candidate 4 (cfg 4), 4.00x in its first pass, after 4 evaluations "
                         "(confirmed side by side at the end)"]
        per = [line for line in lines if line.startswith("candidate ")]
        assert per == ([] if terminal else ["candidate 1 (cfg 1): ok, 1.000 ms, 2.00x in its first pass",
                                            "candidate 2 (cfg 2): compile_failed, error: bad tile",
                                            "candidate 3 (cfg 3): ok, 1.600 ms, 1.25x in its first pass",
                                            "candidate 4 (cfg 4): ok, 0.500 ms, 4.00x in its first pass"])


@pytest.mark.slow
def test_tune_json_prints_only_the_result_on_stdout(tmp_path, small_matmul):
    """`--json`: stdout is one JSON document (results.json and the rebuild command), everything a
    person reads (progress, the table, the rebuild line) on stderr."""
    import json
    import subprocess
    import sys

    code = ("import sys; from tuner.cli import main; main(['tune', sys.argv[1], '--budget', '2', '--repetitions', '1', "
            "'--confirm-rounds', '1', '--output', sys.argv[2], '--json'])")
    done = subprocess.run([sys.executable, "-c", code, str(small_matmul), str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data == {**json.loads((tmp_path / "out" / "results.json").read_text()), "rebuild": data["rebuild"]}
    assert data["rebuild"].endswith(f"rebuild {tmp_path / 'out'} -o OUT.vmfb") and len(data["candidates"]) == 3
    assert "rebuild with:" in done.stderr and "best" in done.stderr


def test_report_on_a_tune_model_directory_plots_the_dispatches_and_the_model_and_says_the_rebuild(tmp_path,
                                                                                                  monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the table's rows whole, whatever terminal runs the tests
    dispatches = [{"name": "m$async_dispatch_3_matmul", "shape": "m", "share": 0.6, "status": "kept", "default_ms": 2.0,
                   "tuned_ms": 1.0, "speedup": 2.0, "model_speedup": 1.4, "timed": "dispatch", "profile_ms": 1.2},
                  {"name": "m$async_dispatch_5_softmax", "shape": "s", "share": 0.1, "status": "no winner",
                   "default_ms": 0.2, "timed": "dispatch", "profile_ms": 0.2}]
    (tmp_path / "results.json").write_text(json.dumps({
        "kind": "model", "entry": "m", "target": "cuda:sm_80", "input": str(tmp_path / "m.mlir"), "dispatches": dispatches,
        "figure": {"default_ms": 2.0, "tuned_ms": 1.4, "speedup": 1.43, "lower": 1.4, "rounds": 4, "relative_error": 0.0},
        "verdict": "the tuned model is 1.43x the default"}))
    result = run_cli("report", tmp_path)
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "names after m$async_dispatch_" in out and " 3_matmul " in out and "1.0 -> " not in out
    assert "2.000 -> 1.000" in out and "1.43x" in out and f"rebuild {tmp_path} -o OUT.vmfb" in out
    assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _page_sections(page: str) -> dict[str, str]:
    """The text of each <section id=...> of a page, read by the standard library's HTML parser."""
    from html.parser import HTMLParser

    class Sections(HTMLParser):
        def __init__(self):
            super().__init__()
            self.current, self.text, self.images = None, {}, {}

        def handle_starttag(self, tag, attrs):
            if tag == "section":
                self.current = dict(attrs)["id"]
            elif tag == "img" and self.current:
                self.images[self.current] = dict(attrs)["src"]

        def handle_endtag(self, tag):
            if tag == "section":
                self.current = None

        def handle_data(self, data):
            if self.current:
                self.text[self.current] = self.text.get(self.current, "") + " " + data

    parser = Sections()
    parser.feed(page)
    return {**{k: " ".join(v.split()) for k, v in parser.text.items()}, **{f"{k}:img": v for k, v in parser.images.items()}}


def test_report_html_writes_one_self_contained_page_of_the_table_verdict_plot_and_rebuild(tmp_path, monkeypatch):
    """Issue 63: `report DIR --html`: the report as printed, the verdict first, the plot embedded
    (nothing fetched), the rebuild command; for a tune run and for a tune-model run."""
    import base64

    from tuner.core.results import Result, Status

    monkeypatch.setenv("COLUMNS", "400")
    results = [Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=i == 0, knobs={}, flags=[],
                      status=Status.OK, times_ms=[ms] * 3, median_ms=ms, spread_pct=1.0, first_pass_speedup=2.0 / ms,
                      round_ratios=list(ratios)) for i, ms, ratios in ((0, 2.0, ()), (1, 1.0, (1.9, 1.8, 1.86, 1.2)))]
    tuned = tmp_path / "tune"
    tuned.mkdir()
    (tuned / "results.json").write_text(json.dumps({"dispatch": "d", "target": "llvm-cpu",
                                                    "candidates": [x.to_json() for x in results]}))
    result = run_cli("report", str(tuned), "--html")
    assert result.exit_code == 0, result.output
    assert f"wrote {tuned / 'report.html'}" in result.output
    page = _page_sections((tuned / "report.html").read_text())
    assert page["verdict"].startswith("Verdict candidate 1 (cfg 1) is 1.83x the default")
    assert "cfg 1" in page["report"] and "1.83x" in page["report"] and "best: candidate 1" in page["report"]
    assert base64.b64decode(page["plot:img"].removeprefix("data:image/png;base64,")) == (tuned / "results.png").read_bytes()
    assert page["rebuild"].endswith(f"rebuild {tuned} -o OUT.vmfb")
    assert "http" not in (tuned / "report.html").read_text().split("<body>")[1]  # nothing to fetch

    model = tmp_path / "model"
    model.mkdir()
    (model / "results.json").write_text(json.dumps({
        "kind": "model", "entry": "m", "target": "cuda:sm_80", "input": str(tmp_path / "m.mlir"),
        "dispatches": [{"name": "m$async_dispatch_3_matmul", "shape": "m", "share": 0.6, "status": "kept",
                        "default_ms": 2.0, "tuned_ms": 1.0, "speedup": 2.0, "model_speedup": 1.4, "timed": "dispatch"}],
        "figure": {"default_ms": 2.0, "tuned_ms": 1.4, "speedup": 1.43, "lower": 1.4, "rounds": 4, "relative_error": 0.0},
        "verdict": "the tuned model is 1.43x the default"}))
    assert run_cli("report", str(model), "--html").exit_code == 0
    page = _page_sections((model / "report.html").read_text())
    assert page["verdict"] == "Verdict the tuned model is 1.43x the default"
    assert "3_matmul" in page["report"] and "2.000 -> 1.000" in page["report"]
    assert page["plot:img"].startswith("data:image/png;base64,") and page["rebuild"].endswith(f"rebuild {model} -o OUT.vmfb")


def test_the_cli_called_inside_another_program_leaves_that_programs_signals_alone():
    """The stop watcher (which ends its process 60 s after a signal) belongs to the program
    `iree-tuner` / `python -m tuner.cli` alone: `main` called in another process (here pytest's)
    sets no wakeup fd, so that program's own signals stay its own."""
    import signal

    result = run_cli("report", "--help")  # the group's callback runs, then the subcommand's help
    assert result.exit_code == 0, result.output
    previous = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(previous)
    assert previous == -1


@pytest.mark.slow
def test_json_with_compile_only_prints_what_the_step_left_for_the_device(tmp_path, small_matmul):
    # Issue 60 (minor): both exited 0 with nothing on stdout.
    import json as json_module

    tuned = run_cli("tune", small_matmul, "--budget", "2", "--compile-only", "--json", "--output", tmp_path / "t")
    step = json_module.loads(tuned.stdout)
    assert step["compile_only"] and step["step"] == "candidates" and step["candidates"] == 3
    assert step["next"] == f"iree-tuner benchmark {(tmp_path / 't').resolve()}"
    model = run_cli("tune-model", small_matmul, "--budget", "2", "--compile-only", "--json", "--output", tmp_path / "m")
    assert json_module.loads(model.stdout)["step"] == "profile"


@pytest.mark.slow
@pytest.mark.slow
def test_a_search_of_one_batch_says_each_candidates_result_before_its_confirmation_rounds(tmp_path, small_matmul):
    """Issue 60: with a budget of 8 or less the search is one batch, and its per-candidate lines
    came only when the batch ended, after the confirmation rounds (a SIGTERM there lost them)."""
    from tuner import api
    from tuner.core.settings import EvalSettings, Listeners, RunOptions, SearchSettings

    events: list[tuple] = []
    listen = Listeners(progress=lambda phase, done, total: events.append(("progress", phase)),
                       on_result=lambda r: events.append(("result", r.candidate_id)),
                       on_results=lambda results: events.append(("batch", len(results))))
    settings = EvalSettings(repetitions=1, min_time_s=0.01, confirm_rounds=2, confirm_top=2, quiet_wait_s=0.0)
    api.tune(small_matmul, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=3),
             run=RunOptions(settings, strategy="sequential"), listen=listen)
    said = [e[1] for e in events if e[0] == "result"]
    assert sorted(said) == [0, 1, 2, 3]  # the baseline and the three candidates, each once
    first_confirm = next(i for i, e in enumerate(events) if e == ("progress", "confirm"))
    last_said = max(i for i, e in enumerate(events) if e[0] == "result")
    assert last_said < first_confirm < events.index(next(e for e in events if e[0] == "batch"))


def test_progress_in_a_log_is_a_line_per_phase_with_its_own_elapsed_time_and_nothing_before_the_first():
    """Issue 63: in a log every bar was printed at the end, with elapsed times that matched no
    stage ("re-time 8/8 0:21:37"); a run that failed before any progress printed a blank line."""
    import io

    from rich.console import Console

    from tuner.cli.say import progress_bars

    now = [100.0]
    out = io.StringIO()
    with progress_bars(Console(file=out, force_terminal=False, width=200), clock=lambda: now[0]):
        pass
    assert out.getvalue() == ""  # nothing happened: nothing said
    with progress_bars(Console(file=out, force_terminal=False, width=200), clock=lambda: now[0]) as progress:
        progress("compile", 0, 4)
        now[0] += 10
        progress("compile", 2, 4)  # 10 s in: not yet worth a line
        now[0] += 25
        progress("compile", 3, 4)  # 35 s in: a line
        now[0] += 5
        progress("compile", 4, 4)
        now[0] += 100  # a later phase counts from its own start
        progress("re-time", 1, 2)
        now[0] += 8
        progress("re-time", 2, 2)
        progress("re-time", 2, 2)  # told again: not said again
    assert out.getvalue().splitlines() == ["compile: 3/4, 35 s", "compile: 4/4 done, 40 s", "re-time: 2/2 done, 8 s"]
    terminal = io.StringIO()
    with progress_bars(Console(file=terminal, force_terminal=True, width=120)):
        pass
    assert terminal.getvalue() == ""


def test_a_device_that_cannot_run_the_targets_modules_is_refused_before_anything_is_made(tmp_path, small_matmul):
    # Issue 63: `--device cuda` with the llvm-cpu target compiled first and failed 8 s later on libcuda.
    for command in ("tune", "tune-model"):
        result = run_cli(command, small_matmul, "--device", "cuda", "--output", tmp_path / command)
        assert_one_error_line(result, 3, "--device cuda does not run llvm-cpu modules: name a local-task or "
                                         "local-sync device")
        assert not (tmp_path / command).exists()
    assert_one_error_line(run_cli("tune", small_matmul, "--target", "cuda:sm_80", "--device", "local-task",
                                  "--output", tmp_path / "o"), 3, "--device local-task does not run cuda:sm_80 modules")


@pytest.mark.parametrize("option, repetition, warmup", [((), "0.1s", "0.05"), (("--min-time", "0.02"), "0.02s", "0.02")])
def test_min_time_sets_each_repetition_and_its_warm_up_in_the_benchmark_command(monkeypatch, tmp_path, option,
                                                                               repetition, warmup):
    """`--min-time` reaches iree-benchmark-module: each repetition at least that long, its warm-up
    as long but at most 0.05 s (the default repetition, 0.1 s, keeps 0.05 s)."""
    from types import SimpleNamespace

    from tuner import api
    from tuner.evaluation import runtime_tools
    from tuner.core.running import ModuleRun

    monkeypatch.delenv("IREE_TUNER_MIN_TIME", raising=False)  # the suite's own default (conftest)
    commands = []
    monkeypatch.setattr(runtime_tools, "run_tool", lambda cmd, *a, **k: commands.append(cmd) or SimpleNamespace(ok=False))

    def tune(input_file, target, output_dir, dispatch, pipeline, search, run, listeners):
        runtime_tools.benchmark(tmp_path / "m.vmfb", ModuleRun("local-task", "main", (), run.settings.repetitions,
                                                               run.settings.min_time_s))
        raise SystemExit(0)

    monkeypatch.setattr(api, "tune", tune)
    run_cli("tune", SAMPLES / "matmul_1024x1024x1024_f32.mlir", "--output", tmp_path / "o", *option)
    [command] = commands
    assert f"--benchmark_min_time={repetition}" in command and f"--benchmark_min_warmup_time={warmup}" in command
