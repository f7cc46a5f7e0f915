"""Several GPUs timing at once: each device's in-process timings run in a process of its own
(tuner.evaluation.device_worker), since two devices' threads in one process deadlocked in CUPTI
on the H200 x2. CPU-only: the requests here stand in for a device's (no CUDA is touched)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tuner.core.running import ModuleRun
from tuner.evaluation import device_calls, in_model


class WhereAmI:
    """A request that answers with the process it ran in."""

    def __call__(self) -> int:
        return os.getpid()


class Refuse:
    def __call__(self):
        raise in_model.NotInProcess("input0.4xf8E4M3FN.bin: raw inputs of f8E4M3FN are not read in-process")


class Crash:
    """A device fault that takes the process with it."""

    def __call__(self):
        os._exit(3)


@pytest.fixture
def importable(monkeypatch):
    """The processes import this file's requests as the test imported them (by its folder)."""
    here = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p))


@pytest.fixture
def requests_importable(importable):
    """A run on two GPUs, apart, for the test's length."""
    with device_calls.timing_apart(["cuda://0", "cuda://1"]) as apart:
        assert apart
        yield


def test_only_a_run_on_several_cuda_devices_times_them_apart_and_only_while_it_runs():
    for one in (["cuda://0"], ["local-task", "local-sync"], ["cuda://0", "local-task"]):
        with device_calls.timing_apart(one) as apart:
            assert not apart
            assert device_calls.on_device("cuda://0", WhereAmI()) == os.getpid()
    with device_calls.timing_apart(["cuda://0", "cuda://1"]) as apart:
        assert apart
    assert not device_calls._APART  # the next run (a test's, a client's) times here again


def test_each_device_runs_its_requests_in_a_process_of_its_own_and_keeps_it(requests_importable):
    first = device_calls.on_device("cuda://0", WhereAmI())
    second = device_calls.on_device("cuda://1", WhereAmI())
    assert len({first, second, os.getpid()}) == 3
    assert device_calls.on_device("cuda://0", WhereAmI()) == first  # one process a device, for the run
    # a local device is this process's threads' still: only CUDA devices deadlock in CUPTI
    assert device_calls.on_device("local-task", WhereAmI()) == os.getpid()


def test_a_device_process_raises_the_requests_exception_here(requests_importable, tmp_path):
    with pytest.raises(in_model.NotInProcess, match="f8E4M3FN"):
        device_calls.on_device("cuda://1", Refuse())
    # a real request: the module file it names is not there (the process's MODULES.get fails)
    timing, run = in_model.time_kernels(tmp_path / "missing.vmfb", ModuleRun("cuda://1", "main", ()), ("d_0",))
    assert timing is None and not run.ok and "FileNotFoundError" in run.first_error()
    assert in_model.time_model(tmp_path / "missing.vmfb", ModuleRun("cuda://1", "main", ())) is None


def test_a_device_process_that_dies_fails_its_request_and_the_next_starts_another(requests_importable):
    before = device_calls.on_device("cuda://1", WhereAmI())
    with pytest.raises(RuntimeError, match=r"the timing process of cuda://1 ended \(exit code 3\)"):
        device_calls.on_device("cuda://1", Crash())
    after = device_calls.on_device("cuda://1", WhereAmI())
    assert after != before and after != os.getpid()


def test_device_processes_end_with_the_run(importable):
    with device_calls.timing_apart(["cuda://0", "cuda://1"]):
        pid = device_calls.on_device("cuda://0", WhereAmI())
        os.kill(pid, 0)  # there while the run is
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
