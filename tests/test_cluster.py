"""`--strategy ray` on a local Ray cluster of two nodes (started and stopped here, CPU only): the
same candidates give the same statuses and winner as the local evaluator; a benchmark worker and
a compile worker killed mid-run lose nothing; a driver killed with -9 is resumed from the store.

Timings come from the tests' fake iree-benchmark-module with a known time per candidate
(conftest's _TIMED_BENCHMARK, passed to the cluster's workers through $IREE_TUNER_TOOLS);
compiles and numerics runs are real."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra: pip install -e '.[ray]'")

from tests.conftest import _TIMED_BENCHMARK, cli_process, kill_once_stored, stored_rows, write_matmul  # noqa: E402
from tests.test_tune_model import MLP  # noqa: E402
from tuner import api  # noqa: E402
from tuner.core.results import Status  # noqa: E402
from tuner.core.settings import EvalSettings, RunOptions, SearchSettings  # noqa: E402
from tuner.store import ResultStore  # noqa: E402
from tuner.versions import compiler_version, runtime_version  # noqa: E402

SETTINGS = EvalSettings(repetitions=2, min_time_s=0.01, confirm_rounds=4, confirm_top=3, baseline_every=5,
                        compile_workers=2)
TIMES = {0: 10.0, 1: 9.0, 2: 8.0, 3: 12.0, 4: 5.0, 5: 6.5}  # candidate 4 is the fastest: 2.0x

# The compiler: the real one, except that the first compile of a module whose path names
# `kill_candidate` kills the process that started it (a compile worker), once.
_COMPILE = '''#!{python}
import json, os, signal, sys
config = json.load(open({config!r}))
needle = config.get("kill_candidate")
marker = config["counter"] + ".compile-killed"
if needle and needle in os.getcwd() and not os.path.exists(marker):
    open(marker, "w").close()
    os.kill(os.getppid(), signal.SIGKILL)
    sys.exit(1)
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
'''


@pytest.fixture(scope="module", autouse=True)
def no_ray_sessions_left():
    """The Ray session directories this module's clusters leave in the system's temp folder
    (TMP/ray/session_*: logs, sockets) are removed after it: the tests leave nothing behind. Only
    this module starts Ray, and the suite runs each file on one worker."""
    import shutil
    import tempfile

    root = Path(tempfile.gettempdir()) / "ray"
    before = set(root.glob("session_*"))
    yield
    for session in set(root.glob("session_*")) - before:
        if not session.is_symlink():
            shutil.rmtree(session, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two Ray nodes on this machine (a head that compiles, and a second node), the fake tools
    installed on both; yields a function that configures the tools and returns the call counter."""
    from ray.cluster_utils import Cluster

    from tuner.cluster import connect as cluster_connect
    from tuner.cluster import reaper as cluster_reaper
    from tuner.tools import TOOLS_ENV, find_tool

    tools = tmp_path_factory.mktemp("cluster-tools")
    config = tools / "config.json"
    counter = tools / "calls"
    for name in ("iree-run-module", "iree-profile"):
        (tools / name).symlink_to(find_tool(name))
    for name, text in (("iree-benchmark-module", _TIMED_BENCHMARK), ("iree-compile", _COMPILE)):
        (tools / name).write_text(text.format(python=sys.executable, config=str(config), real=find_tool(name)))
        (tools / name).chmod(0o755)
    saved = os.environ.get(TOOLS_ENV)
    os.environ[TOOLS_ENV] = str(tools)
    # The nodes carry a mark of the fixture's own, as a run's local cluster does: the workers'
    # temporary directories are named after it and removed at the end (a joined cluster's are not)
    cluster_reaper.reap_after_exit()
    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"iree_compile": 2}})
    nodes.add_node(num_cpus=1)
    cluster_connect.connect(nodes.address)

    def configure(times: dict = TIMES, **rules) -> Path:
        config.write_text(json.dumps({"times": {str(k): v for k, v in times.items()}, "counter": str(counter),
                                      **rules}))
        counter.write_text("0")
        for marker in tools.glob("calls.*"):
            marker.unlink()
        return counter

    configure.address = nodes.address  # type: ignore[attr-defined]
    yield configure
    cluster_connect.shutdown()
    nodes.shutdown()
    cluster_reaper.reap_now()
    os.environ.pop(cluster_reaper.MARK_ENV, None)
    if saved is None:
        os.environ.pop(TOOLS_ENV, None)
    else:
        os.environ[TOOLS_ENV] = saved


@pytest.fixture
def matmul(tmp_path) -> Path:
    return write_matmul(tmp_path / "mm.mlir", 128, 256, 64)


def _statuses(tuning) -> dict[str, Status]:
    return {r.key: r.status for r in tuning.results}


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_the_cluster_gives_the_local_evaluators_statuses_and_winner(cluster, matmul, tmp_path):
    cluster(crash=2)  # candidate 2's timing crashes: a status on a worker as locally
    local = api.tune(matmul, "llvm-cpu", tmp_path / "local", search=SearchSettings(budget=5), run=RunOptions(SETTINGS, strategy="sequential"))
    cluster(crash=2)
    remote = api.tune(matmul, "llvm-cpu", tmp_path / "ray", search=SearchSettings(budget=5), run=RunOptions(SETTINGS, strategy="ray"))
    assert _statuses(remote) == _statuses(local)
    by_id = {r.candidate_id: r for r in remote.results}
    assert by_id[2].status == Status.RUN_FAILED and "crashed: SIGSEGV" in by_id[2].error
    assert all(r.ok for i, r in by_id.items() if i != 2)
    assert remote.ranking.best.candidate_id == local.ranking.best.candidate_id == 4
    assert remote.ranking.speedup(remote.ranking.best) == pytest.approx(2.0, rel=0.05)
    # Timed by the cluster's workers: one per node, each on a core the compiles keep off.
    devices = {r.device for r in remote.results}
    assert devices <= set(remote.stats.busy_s) and all("@" in d for d in devices)
    assert all("pinned to cores" in r.timing for r in remote.results if r.timing)
    # What rebuilds the winner names this machine's paths, not the compile node's.
    flags = (tmp_path / "ray" / "best_flags.txt").read_text()
    assert str((tmp_path / "ray" / "best_spec.mlir").resolve()) in flags and "iree-tuner-compile-" not in flags


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_workers_killed_mid_run_lose_nothing(cluster, matmul, tmp_path):
    # The 4th timing kills its benchmark worker; the first compile of candidate 3 kills its
    # compile worker. Both nodes' workers time, so the lost one's work goes to the other.
    cluster(kill_at=4, kill_candidate="/0003")
    tuning = api.tune(matmul, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=5), run=RunOptions(SETTINGS, strategy="ray"))
    assert len(tuning.results) == 6 and all(r.ok for r in tuning.results), \
        [(r.candidate_id, r.status, r.error) for r in tuning.results]
    assert tuning.ranking.best.candidate_id == 4
    [lost] = tuning.stats.lost_devices  # the killed worker, said in the stats and warnings
    assert "benchmark worker died" in lost and any("lost a benchmark device" in w for w in tuning.stats.warnings())
    survivors = {r.device for r in tuning.results if r.device and not lost.startswith(r.device + ":")}
    assert survivors and all("@" in d for d in survivors)  # the other worker timed what the lost one held
    assert (Path(os.environ["IREE_TUNER_TOOLS"]) / "calls.compile-killed").exists()
    # The next evaluation starts with a full set of workers again.
    cluster()
    again = api.tune(matmul, "llvm-cpu", tmp_path / "again", search=SearchSettings(budget=5), run=RunOptions(SETTINGS, strategy="ray"))
    assert not again.stats.lost_devices and len({r.device for r in again.results if r.device}) == 2
    with ResultStore(tmp_path / "out" / "results.sqlite", compiler_version(), runtime_version()) as store:
        assert {row["key"] for row in store.rows()} == {r.key for r in tuning.results}


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_a_driver_killed_with_sigkill_is_resumed_from_the_store(cluster, matmul, tmp_path):
    out = tmp_path / "out"
    store = out / "results.sqlite"
    args = ["tune", str(matmul), "--num-candidates", "5", "--repetitions", "2", "--output", str(out),
            "--strategy", "ray", "--ray-address", cluster.address]
    cluster(sleep=1.0)  # a second per timing: time to kill it
    kill_once_stored(cli_process(*args), store, 3)
    before = {r["key"]: r for r in stored_rows(store)}
    assert 3 <= len(before) < 6

    cluster()
    second = cli_process(*args)
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    data = json.loads((out / "results.json").read_text())
    assert len(data["candidates"]) == 6 and all(c["status"] == "ok" for c in data["candidates"])
    kept = {k for k, r in before.items() if r["status"] == "ok"} - {c["key"] for c in data["candidates"]
                                                                    if c["is_baseline"]}
    after = {r["key"]: r for r in stored_rows(store)}
    assert all(after[k]["written_at"] == before[k]["written_at"] for k in kept if k not in _confirmed(data))
    assert data["evaluation"]["reused"] == len(kept)
    assert data["evaluation"]["candidates"] == 6 - len(kept)
    assert data["best"] == 4


def _confirmed(data: dict) -> set[str]:
    return {c["key"] for c in data["candidates"] if c.get("rounds_ms")}


def test_workers_on_different_devices_are_refused():
    from tuner.cluster.workers import refuse_mixed
    from tuner.errors import InputError

    same = [{"identity": "cuda: NVIDIA H200"}, {"identity": "cuda: NVIDIA H200"}]
    refuse_mixed(same)
    with pytest.raises(InputError, match="different devices.*H100.*H200"):
        refuse_mixed([{"identity": "cuda: NVIDIA H200"}, {"identity": "cuda: NVIDIA H100 80GB HBM3"}])




@pytest.mark.slow  # starts Ray (and compiles for real)
def test_tune_model_tunes_its_dispatches_at_once_on_the_cluster(cluster, tmp_path, monkeypatch):
    import threading

    from tuner.stages import DispatchStage, builtin, tune_model

    # Each dispatch's search waits at a barrier for the other's: tuned one after the other, the
    # first would wait in vain and the barrier break.
    barrier = threading.Barrier(2, timeout=120)
    search = builtin.search_and_evaluate

    def at_once(*args, **kwargs):
        barrier.wait()
        return search(*args, **kwargs)

    monkeypatch.setattr(builtin, "search_and_evaluate", at_once)
    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    cluster()
    out = tmp_path / "out"
    tuning = tune_model(model, "llvm-cpu", out, run=RunOptions(SETTINGS, strategy="ray"), stages=[DispatchStage(budget=3, min_share=0.0)])
    tuned = [d for d in tuning.state.dispatches if d.status == "tuned"]
    # Three candidates each: the fastest is candidate 2 (8 ms against the default's 10).
    assert len(tuned) == 2 and all(d.speedup == pytest.approx(1.25, rel=0.05) for d in tuned), tuning.state.dispatches
    assert not barrier.broken


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_an_unreachable_cluster_or_one_that_cannot_compile_is_one_error_line(matmul, tmp_path):
    from tuner.cluster.connect import COMPILE_RESOURCE, compile_slots
    from tuner.errors import InputError

    run = cli_process("tune", str(matmul), "--strategy", "ray", "--ray-address", "127.0.0.1:1", "--budget", "2",
                      "--output", str(tmp_path / "out"))
    output, _ = run.communicate(timeout=300)
    assert run.returncode != 0 and "Traceback" not in output
    assert [line for line in output.splitlines() if line.startswith("error:")] == \
        ["error: no Ray cluster answers at 127.0.0.1:1 (Connection refused): start one with "
         f"`ray start --head --resources='{{\"{COMPILE_RESOURCE}\": N}}'` or give its address"]

    class NoCompileNode:  # what ray says of a cluster started without the resource
        @staticmethod
        def cluster_resources():
            return {"CPU": 8.0}

    with pytest.raises(InputError, match="no node of the Ray cluster can compile"):
        compile_slots(NoCompileNode)


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_a_model_plans_dispatch_step_is_timed_on_the_cluster(cluster, tmp_path):
    # Two machines: the compile side writes the profile step, then the dispatch step; the dispatch
    # step's manifests are timed by the cluster's workers (`benchmark DIR --strategy ray`).
    from tuner.stages import ModelOptions, tune_model
    from tuner.stages.plan import run_plan

    model = tmp_path / "mlp.mlir"
    model.write_text(MLP)
    out = tmp_path / "out"
    settings = EvalSettings(repetitions=1, min_time_s=0.01, confirm_rounds=1, confirm_top=1, quiet_wait_s=0.0)
    cluster()
    steps = []
    for _ in range(2):
        tune_model(model, "llvm-cpu", out, search=SearchSettings(budget=2), run=RunOptions(settings, compile_only=True), model=ModelOptions(top=2))
        steps.append(json.loads((out / "model-plan.json").read_text())["step"])
        run_plan(out, settings=settings, strategy="ray")
    assert steps == ["profile", "dispatches"]
    timed = [json.loads(p.read_text()) for p in sorted((out / "dispatches").glob("*/results.json"))]
    assert len(timed) == 2
    for data in timed:
        devices = {c["device"] for c in data["candidates"] if c.get("device")}
        assert devices and all("@" in d for d in devices), devices  # the cluster's workers, not this machine


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_files_of_the_same_name_from_different_runs_stay_apart_on_a_worker(cluster, tmp_path):
    # Two dispatches' candidates/0001/candidate.vmfb (or two runs' inputs/input0.npy) are different
    # files: a worker fetches each, never one for the other.
    from tuner.cluster.workers import RayRunner

    runner = RayRunner(ray, {}, {})
    paths = [tmp_path / name / "candidates" / "0001" / "candidate.vmfb" for name in ("a", "b")]
    for i, p in enumerate(paths):
        p.parent.mkdir(parents=True)
        p.write_bytes(bytes([i]) * 8)
    (name_a, [ref_a]), (name_b, [ref_b]) = (runner.file(p) for p in paths)
    assert name_a != name_b and name_a.endswith("/0001/candidate.vmfb")
    assert ray.get(ref_a) == bytes([0]) * 8 and ray.get(ref_b) == bytes([1]) * 8
    assert runner.file(paths[0])[0] == name_a  # put once, then the same
    paths[0].write_bytes(bytes([2]) * 9)  # rebuilt in place (a later round): sent again
    name_c, [ref_c] = runner.file(paths[0])
    assert name_c != name_a and ray.get(ref_c) == bytes([2]) * 9


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_a_worker_lost_during_the_confirmation_rounds_leaves_them_to_another(cluster, matmul, tmp_path):
    # The first pass takes about a dozen timings; the 16th falls in the confirmation rounds, which
    # run on one worker: it dies there, and the rounds are timed again on the other.
    counter = cluster(kill_at=16)
    tuning = api.tune(matmul, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=5), run=RunOptions(SETTINGS, strategy="ray"))
    assert int(counter.read_text()) > 16
    [lost] = tuning.stats.lost_devices
    assert lost.split(":")[0].endswith("/0")  # the first worker: the one the rounds run on
    best = tuning.ranking.best
    assert best.candidate_id == 4 and tuning.ranking.speedup(best) == pytest.approx(2.0, rel=0.05)
    assert len(best.round_ratios) == SETTINGS.confirm_rounds  # every round, none half-timed on the lost worker
    assert all(r.ok for r in tuning.results)


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_sigterm_ends_a_ray_run_like_any_other_run(cluster, matmul, tmp_path):
    # ray.init installs a SIGTERM handler of its own in the driver (exit 15 with a stack dump);
    # the tuner's is put back: one line, exit 143, no traceback.
    import signal
    import time

    cluster(sleep=60.0)  # each timing a minute: the run is mid-benchmark when it is ended
    out = tmp_path / "out"
    run = cli_process("tune", str(matmul), "--num-candidates", "2", "--repetitions", "1", "--output", str(out),
                      "--strategy", "ray", "--ray-address", cluster.address)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out / "results.sqlite").exists():
        assert run.poll() is None, run.stdout.read()
        time.sleep(0.2)
    time.sleep(20)  # compiled by now, and inside a minute-long timing on a worker
    assert run.poll() is None
    os.kill(run.pid, signal.SIGTERM)
    output, _ = run.communicate(timeout=120)
    cluster()
    assert run.returncode == 128 + signal.SIGTERM, output
    assert "terminated: every result measured so far is kept" in output and "Traceback" not in output


def test_rays_token_notice_is_kept_out_of_the_output_and_its_warning_that_auth_is_off_is_not():
    import logging

    from tuner.cluster.connect import NoTokenNotice

    def record(text):
        return logging.LogRecord("ray", logging.WARNING, __file__, 1, text, None, None)

    quiet = NoTokenNotice()
    assert not quiet.filter(record("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled"))
    assert quiet.filter(record("Token authentication is disabled for this Ray cluster. Anyone with access ..."))


def _raylet_of(parent: int) -> int | None:
    """The raylet a process started (its local cluster's), or None yet."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"raylet/raylet" in cmdline:
            return int(pid)
    return None


def _alive_under(raylet: int) -> list[str]:
    """The processes running (not zombies) with `raylet` as their RAY_RAYLET_PID: its agents,
    workers and what they started."""
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if f"RAY_RAYLET_PID={raylet}".encode() in env and state != "Z":
            alive.append(f"{pid} {name}")
    return alive


@pytest.mark.slow  # starts Ray (and compiles for real)
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_local_cluster_leaves_nothing_running_after_its_run_is_killed_with_sigkill(matmul, tmp_path):
    # Ray ties its head processes to the driver; the raylet's agents stayed up to a minute after
    # `kill -9` of the run (their parent gone), until the reaper (tuner.cluster.reaper). After
    # the module's other tests the fixture's cluster runs on this machine too: the run starts a
    # cluster of its own all the same (Ray joined that one and refused the CPU count before).
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    run = cli_process("tune", matmul, "--num-candidates", "2", "--output", tmp_path / "out", "--strategy", "ray",
                      env=env)
    deadline = time.monotonic() + 180
    raylet = None
    while time.monotonic() < deadline and not (raylet and len(_alive_under(raylet)) >= 2):
        assert run.poll() is None, run.stdout.read()
        raylet = raylet or _raylet_of(run.pid)
        time.sleep(0.5)
    assert raylet and len(_alive_under(raylet)) >= 2, "the local cluster's agents never came up"
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and _alive_under(raylet):
        time.sleep(0.5)
    assert _alive_under(raylet) == []


@pytest.mark.slow  # starts Ray (and compiles for real)
def test_a_run_on_a_local_cluster_leaves_no_directory_of_its_workers_behind(matmul, tmp_path):
    # The compile tasks' copies of the program (and the weights with it) and the benchmark
    # workers' files stayed in the temporary directory after every run, successful ones too.
    import shutil
    import tempfile
    import time

    temp = Path(tempfile.mkdtemp(prefix="t", dir="/tmp"))  # short: Ray's socket paths are limited in length
    try:
        env = {**{k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}, "TMPDIR": str(temp)}
        run = cli_process("tune", matmul, "--num-candidates", "2", "--output", tmp_path / "out", "--strategy", "ray",
                          "--repetitions", "1", env=env)
        output, _ = run.communicate(timeout=600)
        assert run.returncode == 0, output
        deadline = time.monotonic() + 15  # the reapers act once the processes that started them have ended
        while time.monotonic() < deadline and list(temp.glob("iree-tuner-*")):
            time.sleep(0.2)
        assert sorted(p.name for p in temp.glob("iree-tuner-*")) == []
    finally:
        shutil.rmtree(temp, ignore_errors=True)
