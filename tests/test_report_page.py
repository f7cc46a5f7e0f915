"""Issue 63: the page `report DIR --html` writes, opened in a real headless browser (Chromium): the
sections a person reads are there as the browser parsed them, the embedded plot is drawn on the
screen, and the History section lists every run the directory's store holds.

Chromium is found as `$CHROMIUM`, else `chromium`, `chromium-browser` or `google-chrome` on the
PATH (`.ci/run` installs Debian's `chromium` where it is missing); without one the test fails
saying so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from conftest import run_cli

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _chromium() -> str:
    found = os.environ.get("CHROMIUM") or next((p for p in map(shutil.which, BROWSERS) if p), None)
    assert found, ("no headless Chromium to open the report page in: install one (Debian: apt-get install "
                   "chromium) or set CHROMIUM to its path")
    return found


def _headless(page: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """Chromium run once on `page` without a display, its profile in `tmp` (nothing of the user's read)."""
    return subprocess.run([_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                           f"--user-data-dir={tmp / 'profile'}", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": str(tmp)})


def _tuned_directory(tmp_path: Path) -> Path:
    """A tune directory as a run leaves it: results.json, and a store written by two runs (the
    second measured one more config, 2.5x in its first pass, and confirmed it at 2.3x)."""
    from tuner.core.results import Result, Status
    from tuner.store import STORE, ResultStore

    def result(i, ms, ratios=()):
        return Result(candidate_id=i, key=f"k{i}", label=f"cfg {i}", is_baseline=i == 0, knobs={}, flags=[],
                      status=Status.OK, times_ms=[ms] * 3, median_ms=ms, spread_pct=1.0, first_pass_speedup=2.0 / ms,
                      round_ratios=list(ratios), dispatch="matmul_64")

    first = [result(0, 2.0), result(1, 1.0, (1.9, 1.8, 1.86, 1.2))]
    second = [result(2, 0.8, (2.2, 2.3, 2.4, 2.3))]
    directory = tmp_path / "tune"
    directory.mkdir()
    for run, results in (("host:1:2026-11-30T08:00:00", first), ("host:2:2026-11-30T09:00:00", second)):
        with ResultStore(directory / STORE, "3.13.0", "3.13.0", run=run) as store:
            for r in results:
                store.put(r)
            if run.startswith("host:2"):  # the second run confirmed its config beside the default
                store.put_confirmation([first[0], *results], 4, "cpu", "dispatch", loaded=False)
    (directory / "results.json").write_text(json.dumps({"dispatch": "matmul_64", "target": "llvm-cpu",
                                                        "candidates": [r.to_json() for r in first + second]}))
    return directory


def _colours(image) -> Counter:
    """How many pixels of `image` (RGB) have each colour."""
    import numpy as np

    colours, counts = np.unique(np.asarray(image).reshape(-1, 3), axis=0, return_counts=True)
    return Counter({tuple(int(v) for v in c): int(n) for c, n in zip(colours, counts)})


@pytest.mark.slow
def test_report_page_in_headless_chromium_shows_each_section_the_plot_and_every_stored_run(tmp_path):
    from PIL import Image

    directory = _tuned_directory(tmp_path)
    result = run_cli("report", str(directory), "--html")
    assert result.exit_code == 0, result.output
    page = directory / "report.html"

    dom = _headless(page, "--dump-dom", tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    sections = [part.split('"')[0] for part in dom.stdout.split('<section id="')[1:]]
    assert sections == ["verdict", "report", "plot", "history", "rebuild"]
    history = dom.stdout.split('<section id="history">')[1].split("</section>")[0]
    assert "host:1:2026-11-30T08:00:00" in history and "host:2:2026-11-30T09:00:00" in history
    assert "2.50x" in history and "2.30x" in history  # the second run's config: first pass, confirmed

    shot = tmp_path / "page.png"
    run = _headless(page, f"--screenshot={shot}", "--window-size=1400,2400", tmp=tmp_path)
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    screen = Image.open(shot).convert("RGB")
    assert screen.size == (1400, 2400)
    # The plot is on the screen: the saturated colours that fill its bars (each over 0.2% of its
    # pixels) are found on the screenshot, in solid areas of at least 50 pixels each.
    plot = Image.open(directory / "results.png").convert("RGB")
    counts = _colours(plot)
    filled = [c for c, n in counts.items() if max(c) - min(c) > 60 and n > 0.002 * plot.width * plot.height]
    assert filled, "the plot has no filled colour to look for"
    on_screen = _colours(screen)
    assert all(on_screen[c] >= 50 for c in filled), {c: on_screen[c] for c in filled}
    dark = sum(n for c, n in on_screen.items() if max(c) < 90)  # text drawn: the tables and the verdict
    assert dark > 5000


def test_store_history_counts_each_runs_results_and_leaves_the_store_file_as_it_was(tmp_path):
    from tuner.core.results import Result, Status
    from tuner.store import STORE, ResultStore, store_history

    directory = _tuned_directory(tmp_path)
    with ResultStore(directory / STORE, "3.13.0", "3.13.0", run="host:3:late") as store:  # a failed build, no default
        store.put(Result(candidate_id=3, key="k3", label="cfg 3", is_baseline=False, knobs={}, flags=[],
                         status=Status.COMPILE_FAILED, dispatch="other"))
    before = {p.name: p.read_bytes() for p in directory.iterdir() if p.name.startswith(STORE)}
    runs = store_history(directory / STORE)
    assert [r["run"] for r in runs] == ["host:1:2026-11-30T08:00:00", "host:2:2026-11-30T09:00:00", "host:3:late"]
    assert [(r["results"], r["ok"], r["failed"]) for r in runs] == [(2, 2, 0), (1, 1, 0), (1, 0, 1)]
    assert [r["best_first_pass"] for r in runs] == [pytest.approx(2.0), pytest.approx(2.5), None]
    assert [r["confirmed"] for r in runs] == [None, pytest.approx(2.3), None] and not runs[1]["confirmed_loaded"]
    assert runs[2]["dispatches"] == ["other"]
    assert {p.name: p.read_bytes() for p in directory.iterdir() if p.name.startswith(STORE)} == before
