"""The benchmark side: statistics, numerics, tools with timeouts, and no compiler dependency."""

import subprocess
import sys
import time

import numpy as np
import pytest

from tuner.evaluation.runtime_tools import Timing, relative_error, tolerance
from tuner.tools import run_tool


def test_runner_needs_neither_the_compiler_nor_z3():
    code = ("import sys, tuner.evaluation.runtime_tools, tuner.store, tuner.ranking, tuner.core.comparison, tuner.evaluation.device_identity, "
            "tuner.run_dir, tuner.benchmark_dir, tuner.profiling.timing, tuner.stages.model_timing, "
            "tuner.stages.plan, tuner.cli, tuner.cluster.workers, tuner.cluster.worker, tuner.cluster.connect, "
            "tuner.evaluation.measure, tuner.evaluation.passes, tuner.evaluation.in_model, tuner.evaluation.device_worker, tuner.evaluation.device_calls, tuner.evaluation.cupti, "
            "tuner.evaluation.kernel_times; "
            "print(sorted(m for m in sys.modules if m.startswith(('z3', 'iree.compiler'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_timing_statistics():
    t = Timing((10.0, 12.0, 11.0, 30.0, 9.0))
    assert t.median_ms == 11.0
    # Inclusive quartiles of (9, 10, 11, 12, 30) are 10 and 12: the outlier does not count.
    assert abs(t.spread_pct - 100 * 2 / 11) < 1e-9
    assert Timing((5.0,)).spread_pct == 0.0


def test_relative_error():
    ref = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    assert relative_error(ref.copy(), ref) == 0.0
    assert relative_error(ref * 1.01, ref) > tolerance("f32")
    assert relative_error(ref.reshape(3, 2), ref) == float("inf")
    bad = ref.copy()
    bad[0, 0] = np.nan
    assert relative_error(bad, ref) == float("inf")


def test_a_hung_tool_is_killed_on_time():
    start = time.perf_counter()
    run = run_tool(["sleep", "30"], timeout_s=0.3)
    assert run.timed_out and not run.ok
    assert time.perf_counter() - start < 5


@pytest.mark.slow
def test_a_compile_that_stops_using_cpu_is_hung_before_its_timeout_and_retried_once(monkeypatch):
    # As iree-compile deadlocks at its exit: work first, then no CPU at all.
    import tuner.tools as tools

    monkeypatch.setattr(tools, "COMPILE_IDLE_S", 1.0)
    monkeypatch.setattr(tools, "IDLE_POLL_S", 0.5)
    start = time.perf_counter()
    run = tools.run_tool_retrying_a_hang([sys.executable, "-c", "import time; sum(range(10**6)); time.sleep(60)"], 50)
    assert run.timed_out and run.hung and run.retried and time.perf_counter() - start < 20
    busy = tools.run_tool_retrying_a_hang(
        [sys.executable, "-c", "import time\nt = time.time()\nwhile time.time() - t < 3: pass\nprint('done')"], 50)
    assert busy.ok and busy.stdout.strip() == "done" and not busy.retried  # busier than the idle limit: left alone
