"""Timing GPU dispatches: kernel records to dispatch times (inside the model's own call), and the
dumped-benchmark fallback, bounded where a benchmark runs for seconds. No GPU needed: records come
from fixtures recorded on the H100, tools are scripted."""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from tuner.errors import TargetError
from tuner.evaluation import cupti, in_model
from tuner.evaluation.cupti import KernelRecord
from tuner.build.kernels import executable_of, kernel_names
from tuner.evaluation.in_model import time_calls, time_kernels, times_in_model
from tuner.evaluation.kernel_times import belongs, per_call
from tuner.evaluation.measure import Built
from tuner.evaluation.runtime_tools import ModuleRun
from tuner.profiling.timing import ProfileJob, time_profile
from tuner.core.results import Result, Status

FIXTURES = Path(__file__).parent / "fixtures" / "cupti"


def _record(name: str, start: int, ms: float) -> KernelRecord:
    return KernelRecord(name, start, start + int(ms * 1e6))


def test_kernel_records_become_each_dispatchs_time_per_call():
    records = [
        _record("m_dispatch_1_matmul_64x64x64_f16", 0, 0.010),
        _record("m_dispatch_16_softmax_64x64_f16", 100, 0.020),  # not dispatch_1's
        _record("m_dispatch_1_matmul_64x64x64_f16", 200, 0.012),  # runs twice per call
        _record("other_dispatch_1_matmul_64x64x64_f16", 300, 5.0),  # another module's kernel
        _record("m_dispatch_1_matmul_64x64x64_f16", 400, 0.010),
        _record("m_dispatch_16_softmax_64x64_f16", 500, 0.022),
        _record("m_dispatch_1_matmul_64x64x64_f16", 600, 0.012),
    ]
    times = per_call(records, ["m_dispatch_1_matmul_64x64x64_f16", "m_dispatch_16_softmax_64x64_f16",
                               "m_dispatch_2_never_ran"], calls=2)
    assert set(times) == {"m_dispatch_1_matmul_64x64x64_f16", "m_dispatch_16_softmax_64x64_f16"}
    matmul = times["m_dispatch_1_matmul_64x64x64_f16"]
    assert matmul.runs == 2 and matmul.ms == pytest.approx(0.022)  # (10+12+10+12 us) / 2 calls
    assert times["m_dispatch_16_softmax_64x64_f16"].ms == pytest.approx(0.021)


def test_an_executable_name_takes_every_kernel_of_that_dispatch_and_no_other():
    assert executable_of("bert_layer_async_dispatch_16_batch_matmul_16x2048x2048x64_f16") == \
        "bert_layer_async_dispatch_16"
    assert belongs("m_dispatch_1_matmul_8x8x8_f16", "m_dispatch_1")
    assert not belongs("m_dispatch_16_matmul_8x8x8_f16", "m_dispatch_1")
    assert executable_of("not_an_iree_kernel") is None
    # The program's `forward$async` is `forward_async` in the kernel's symbol.
    assert belongs("forward_async_dispatch_3_softmax_8x8_f16", "forward$async_dispatch_3_softmax_8x8_f16")
    assert belongs("forward_async_dispatch_3_softmax_8x8_f16", "forward$async_dispatch_3")


def test_a_split_k_candidate_is_timed_by_the_split_op_and_the_dispatch_adding_its_parts():
    assert kernel_names("m_dispatch_7_matmul_128x128x8192_f16") == ("m_dispatch_7",)
    assert kernel_names("m_dispatch_7_matmul_128x128x8192_f16", 4) == ("m_dispatch_7", "m_dispatch_8")


def test_recorded_h100_kernels_name_every_dispatch_of_the_model():
    """Records CUPTI gave on the H100 for two calls of a BERT layer in torch's layout, with a
    kernel of another module interleaved: each dispatch the profile listed is found, with the
    runs per call the program says."""
    recorded = json.loads((FIXTURES / "bert_torch_layout_h100.json").read_text())
    records = [KernelRecord.from_json(r) for r in recorded["records"]]
    times = per_call(records, list(recorded["runs"]), recorded["calls"])
    assert set(times) == set(recorded["runs"])
    assert {n: t.runs for n, t in times.items()} == recorded["runs"]
    foreign = [r for r in records if not any(belongs(r.name, w) for w in recorded["runs"])]
    assert foreign, "the fixture holds kernels of another module"
    # Each dispatch's time per call within 10% of torch.profiler's figure for the same module,
    # taken in another session by other code (benchmarks/gpu_model_kernels.py).
    for name, t in times.items():
        assert t.ms == pytest.approx(recorded["torch_profiler_ms"][name], rel=0.10), name


class _FakeTracer:
    """Gives, for each trace, the kernels the fake module's calls ran in it."""

    def __init__(self, module) -> None:
        self.module = module

    @contextmanager
    def trace(self, device=None):
        self.module.launched = []
        out: list = []
        yield out
        out += [r for r in self.module.launched if device is None or r.device == device]  # as CUPTI's Tracer


class _FakeModule:
    ordinal = None  # the device its kernels run on: any

    def __init__(self, kernels: dict[str, float]) -> None:
        self.kernels = kernels
        self.calls = 0
        self.launched: list = []
        self.read: list[int] = []  # the calls whose result was copied to the host

    def call(self, read: bool = True):
        self.calls += 1
        if read:
            self.read.append(self.calls)
        for name, ms in self.kernels.items():
            self.launched.append(_record(name, self.calls * 1000, ms))


def test_time_calls_counts_calls_per_repetition_and_sums_the_wanted_kernels(monkeypatch):
    module = _FakeModule({"m_dispatch_3_matmul": 0.05, "m_dispatch_4_generic": 0.5})
    monkeypatch.setattr(cupti, "tracer", lambda: _FakeTracer(module))
    timing = time_calls(module, ["m_dispatch_3", "m_dispatch_4"], repetitions=3, min_time_s=0.0, warmup=2)
    assert len(timing.per_repetition) == 3 and timing.calls == 1
    assert module.calls == 2 + 3 * timing.calls
    # A result is read after the warm-up calls and after each repetition's last call only: a
    # copy after every timed call would be timed with them.
    assert module.read == [1, 2, 3, 4, 5]
    many = _FakeModule({"m_dispatch_3_matmul": 0.05})
    monkeypatch.setattr(cupti, "tracer", lambda: _FakeTracer(many))
    assert time_calls(many, ["m_dispatch_3"], repetitions=2, min_time_s=10.0, warmup=2).calls == 1000  # (the most)
    assert many.read == [1, 2, 2 + 1000, 2 + 2000]
    assert timing.times(["m_dispatch_3"]) == pytest.approx((0.05, 0.05, 0.05))
    assert timing.times(["m_dispatch_3", "m_dispatch_4"]) == pytest.approx((0.55, 0.55, 0.55))


def test_a_candidate_whose_kernels_never_ran_is_a_failed_run_not_an_exception(monkeypatch, tmp_path):
    module = _FakeModule({"m_dispatch_4_generic": 0.5})
    monkeypatch.setattr(cupti, "tracer", lambda: _FakeTracer(module))
    monkeypatch.setattr(in_model.MODULES, "get", lambda vmfb, settings: module)
    settings = ModuleRun("cuda", "main", (), repetitions=2, min_time_s=0.0)
    timing, run = time_kernels(tmp_path / "candidate.vmfb", settings, ("m_dispatch_3",))
    assert timing is None and not run.ok and "no kernel of m_dispatch_3 ran in @main's call" in run.first_error()


class _OnDevice(_FakeModule):
    """A fake module whose calls run on one CUDA device while another device's kernels are
    recorded too (CUPTI's records are process-wide): a comparison spread over two GPUs, the other
    one warming up. Its `ordinal` is its device's, as a LoadedModule's."""

    def __init__(self, kernels: dict[str, float], device: int, other: float) -> None:
        super().__init__(kernels)
        self.device, self.other = device, other
        self.ordinal = device

    def call(self, read: bool = True):
        before = len(self.launched)
        super().call(read)
        self.launched[before:] = [KernelRecord(r.name, r.start_ns, r.end_ns, device=self.device)
                                  for r in self.launched[before:]]
        self.launched.append(KernelRecord("other_dispatch_1", 0, int(self.other * 1e6), device=1 - self.device))


def test_a_whole_model_is_timed_by_every_kernel_and_memset_of_its_own_device_per_call(monkeypatch, tmp_path):
    module = _OnDevice({"main$async_dispatch_0_matmul": 0.25, "gemm_512x1024x64_f16": 0.5, cupti.MEMSET: 0.03},
                       device=1, other=7.0)
    monkeypatch.setattr(cupti, "tracer", lambda: _FakeTracer(module))
    monkeypatch.setattr(in_model.MODULES, "get", lambda vmfb, settings: module)
    timing = in_model.time_model(tmp_path / "model.vmfb", ModuleRun("cuda://1", "main", (), repetitions=3))
    # the external kernel and the memset count as IREE's own kernels do; device 0's kernels are
    # another model's
    assert timing.times_ms == pytest.approx((0.78, 0.78, 0.78))
    assert in_model.device_ordinal("cuda") == 0 and in_model.device_ordinal("cuda://3") == 3
    assert in_model.device_ordinal("cuda://GPU-8a1b") is None  # not an ordinal: every kernel counts


def test_a_whole_model_that_fails_in_the_process_has_no_timing(monkeypatch, tmp_path):
    def fail(vmfb, settings):
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")
    monkeypatch.setattr(in_model.MODULES, "get", fail)
    assert in_model.time_model(tmp_path / "model.vmfb", ModuleRun("cuda", "main", ())) is None
    silent = _OnDevice({}, device=0, other=1.0)  # ran no kernel of its device
    monkeypatch.setattr(cupti, "tracer", lambda: _FakeTracer(silent))
    monkeypatch.setattr(in_model.MODULES, "get", lambda vmfb, settings: silent)
    assert in_model.time_model(tmp_path / "model.vmfb", ModuleRun("cuda", "main", ())) is None


def test_tune_model_times_the_whole_model_in_process_only_on_cuda_with_cupti(monkeypatch):
    from tuner.stages import model_timing

    monkeypatch.setattr(in_model, "why_not_in_model", lambda: None)
    assert model_timing.model_timer("cuda://0", "auto") is in_model.time_model
    assert model_timing.model_timer("cuda", "alone") is model_timing.iree_benchmark
    assert model_timing.model_timer("local-task", "auto") is model_timing.iree_benchmark
    monkeypatch.setattr(in_model, "why_not_in_model", lambda: "CUPTI could not be loaded: no libcupti found")
    assert model_timing.model_timer("cuda", "auto") is model_timing.iree_benchmark
    assert "kernel time" in model_timing.timing_method(in_model.time_model)
    assert "iree-benchmark-module" in model_timing.timing_method(model_timing.iree_benchmark)

    class Unhashable:  # a client's timer, as examples/custom_stages.py brings one
        __hash__ = None

        def __call__(self, vmfb, settings):
            return None
    assert model_timing.timing_method(Unhashable()) == "the client's timer"


def test_a_built_candidate_keeps_the_kernels_it_is_timed_by(tmp_path):
    result = Result(candidate_id=1, key="k", label="x", is_baseline=False, knobs={}, flags=[], status=Status.OK)
    built = Built(result, tmp_path / "0001" / "candidate.vmfb", "f16", None, (), (), kernels=("m_dispatch_3",))
    again = Built.from_json(built.to_json(tmp_path), tmp_path)
    assert again.kernels == ("m_dispatch_3",) and again.dispatch_benchmark is None


def test_gpu_timing_in_the_model_needs_cupti_and_a_cuda_device(monkeypatch):
    monkeypatch.setattr(in_model, "why_not_in_model", lambda: "CUPTI could not be loaded: no libcupti found")
    assert not times_in_model("auto", "cuda")  # falls back, said by the profile's method
    with pytest.raises(TargetError, match="--gpu-timing model: CUPTI could not be loaded"):
        times_in_model("model", "cuda")
    monkeypatch.setattr(in_model, "why_not_in_model", lambda: None)
    assert times_in_model("auto", "cuda") and times_in_model("model", "cuda://1")
    assert not times_in_model("alone", "cuda")
    assert not times_in_model("auto", "hip") and not times_in_model("auto", "local-task")
    assert not times_in_model("auto", "cuda", dispatch_benchmark=True)  # the program is one dispatch already
    with pytest.raises(TargetError, match="unknown GPU timing 'fast'"):
        times_in_model("fast", "cuda")


_SCRIPTED_BENCHMARK = '''#!{python}
"""iree-benchmark-module of a GPU profile: the model's whole call takes 1 ms; the dispatch
benchmark `slow` never finishes a call in time (IREE 3.13's dumped benchmarks of some models),
`long` takes 5 ms per call, every other one 0.1 ms."""
import json, sys, time
args = sys.argv[1:]
module = next(a for a in args if a.startswith("--module="))
name = module.rsplit("/", 1)[-1].split(".")[0]
reps = int(next((a for a in args if a.startswith("--benchmark_repetitions=")), "=1").split("=", 1)[1])
if name == "slow":
    time.sleep(60)
ms = {{"program": 1.0, "long": 5.0}}.get(name, 0.1)
rows = [{{"run_type": "iteration", "real_time": ms * 1e6, "time_unit": "ns", "items_per_second": 1e3 / ms}}] * reps
print(json.dumps({{"benchmarks": rows}}))
'''


@pytest.fixture
def scripted_gpu_tools(tmp_path, monkeypatch):
    from tuner.tools import TOOLS_ENV

    directory = tmp_path / "tools"
    directory.mkdir()
    tool = directory / "iree-benchmark-module"
    tool.write_text(_SCRIPTED_BENCHMARK.format(python=sys.executable))
    tool.chmod(0o755)
    monkeypatch.setenv(TOOLS_ENV, str(directory))
    return directory


def _alone_job(**kw) -> ProfileJob:
    dispatches = ("m_dispatch_0_fast", "m_dispatch_1_slow", "m_dispatch_2_long")
    return ProfileJob(
        device="cuda", module="program.vmfb", inputs={"main": []}, runs={d: 1 for d in dispatches},
        entry_of={d: "main" for d in dispatches}, untimed={}, mode="alone",
        alone={"m_dispatch_0_fast": ["fast.vmfb", "f"], "m_dispatch_1_slow": ["slow.vmfb", "f"],
               "m_dispatch_2_long": ["long.vmfb", "f"]},
        repetitions=1, timeout_s=120.0, launch=["launch.vmfb", "f"],
        fallback="CUPTI could not be loaded (install the cuda extra)", **kw)


def test_a_dumped_benchmark_that_runs_for_seconds_is_abandoned_in_bounded_time_and_said(scripted_gpu_tools, tmp_path):
    start = time.monotonic()
    measured = time_profile(_alone_job(), tmp_path)
    assert time.monotonic() - start < 20  # not the 60 s the slow benchmark's call would take
    assert set(measured.times) == {"m_dispatch_0_fast"}
    assert measured.untimed["m_dispatch_1_slow"].startswith("abandoned: one call of its dumped benchmark did not finish")
    assert measured.untimed["m_dispatch_2_long"] == ("abandoned: one call of its dumped benchmark took 5.000 ms, "
                                                     "longer than the model's whole call (1.000 ms)")
    assert "the fallback, bounded: CUPTI could not be loaded" in measured.method


def test_no_dumped_benchmark_starts_after_the_profiles_wall_bound(scripted_gpu_tools, tmp_path):
    measured = time_profile(_alone_job(wall_bound_s=0.0), tmp_path)
    assert measured.times == {}
    assert all(measured.untimed[d] == "not timed: the profile's bound of 0 s was reached"
               for d in ("m_dispatch_0_fast", "m_dispatch_1_slow", "m_dispatch_2_long"))


@pytest.mark.slow
def test_a_module_loaded_in_process_computes_what_iree_run_module_computes(tmp_path):
    """The in-process loader (used on CUDA with CUPTI) on the CPU: the same inputs, the same result."""
    from tests.conftest import iree_compile, write_matmul
    from tuner.evaluation.runtime_tools import read_output, run_once

    source = write_matmul(tmp_path / "mm.mlir", 64, 32, 16)
    iree_compile(source, "--iree-hal-target-device=local", "--iree-hal-local-target-device-backends=llvm-cpu",
                 "-o", tmp_path / "mm.vmfb")
    rng = np.random.default_rng(0)
    inputs = []
    for i, shape in enumerate(((64, 16), (16, 32))):
        inputs.append(tmp_path / f"input{i}.npy")
        np.save(inputs[-1], rng.standard_normal(shape).astype(np.float32))
    settings = ModuleRun("local-task", "mm", tuple(inputs))
    loaded = in_model.LoadedModule(tmp_path / "mm.vmfb", settings)
    out = loaded.call()
    mine = (out[0] if isinstance(out, (list, tuple)) else out).to_host()
    assert run_once(tmp_path / "mm.vmfb", settings, tmp_path / "out").ok
    np.testing.assert_allclose(mine, read_output(tmp_path / "out", settings), rtol=1e-6)


@pytest.mark.slow
def test_two_machines_compile_for_timing_in_the_model_and_say_what_the_device_side_lacks(tmp_path):
    """`tune --compile-only --gpu-timing model` (no CUPTI needed here) builds whole-model candidates
    to be timed by their kernels, with no dispatch benchmark; `benchmark DIR` where no CUDA device
    or no CUPTI is found refuses in one line instead of timing them some other way."""
    from tests.conftest import SAMPLES, assert_one_error_line, run_cli

    out = tmp_path / "out"
    compiled = run_cli("tune", SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir", "--target", "cuda:sm_80",
                       "--compile-only", "--gpu-timing", "model", "--budget", "2", "--output", out)
    assert compiled.exit_code == 0, compiled.output
    built = json.loads((out / "manifest.json").read_text())["candidates"]
    ok = [b for b in built if b["result"]["status"] == "ok"]
    assert len(ok) == 3 and all(b["kernels"] == ["matmul_dispatch_0"] and b["dispatch_vmfb"] is None for b in ok), ok
    assert not list(out.rglob("dispatch.vmfb"))
    assert_one_error_line(run_cli("benchmark", out), 3, "--gpu-timing model:")


def test_a_manifest_built_both_ways_is_timed_in_the_model_only_where_cupti_loads(monkeypatch, tmp_path):
    """`benchmark DIR` on a manifest compiled with `--gpu-timing auto` (kernels named and the
    dispatch benchmark built) times in the model where CUPTI loads and the timing allows it, and
    alone elsewhere; one compiled for the model alone has no other way."""
    from tuner.benchmark_dir import in_model_here

    result = Result(candidate_id=1, key="k", label="x", is_baseline=False, knobs={}, flags=[], status=Status.OK)
    vmfb, bench = tmp_path / "0001" / "candidate.vmfb", tmp_path / "0001" / "dispatch.vmfb"
    both = [Built(result, vmfb, "f32", None, (), (), bench, "main_dispatch_0_benchmark", kernels=("m_dispatch_0",))]
    model_only = [Built(result, vmfb, "f32", None, (), (), kernels=("m_dispatch_0",))]
    alone_only = [Built(result, vmfb, "f32", None, (), (), bench, "main_dispatch_0_benchmark")]
    monkeypatch.setattr(in_model, "why_not_in_model", lambda: None)  # CUPTI loads
    assert in_model_here(both, "auto", "cuda", "auto")
    assert not in_model_here(both, "auto", "cuda", "alone")
    assert not in_model_here(both, "ray", "cuda", "auto")  # a cluster's workers time alone
    assert not in_model_here(alone_only, "auto", "cuda", "auto")
    assert in_model_here(model_only, "auto", "cuda", "alone")  # nothing else to time
    monkeypatch.setattr(in_model, "why_not_in_model", lambda: "CUPTI could not be loaded: no libcupti found")
    assert not in_model_here(both, "auto", "cuda", "auto")
    assert in_model_here(model_only, "auto", "cuda", "auto")  # and _runner says CUPTI is missing
    with pytest.raises(TargetError, match="--gpu-timing model: CUPTI"):
        in_model_here(both, "auto", "cuda", "model")


@pytest.mark.slow
def test_two_machines_compile_both_timings_by_default_on_cuda(tmp_path):
    """`tune --compile-only --target cuda:...` with the default `--gpu-timing auto` names each
    candidate's kernels and builds its dispatch benchmark too: the benchmark side times inside the
    model where CUPTI loads (the claim is then of the module's call), alone elsewhere."""
    from tests.conftest import SAMPLES, run_cli

    out = tmp_path / "out"
    compiled = run_cli("tune", SAMPLES / "matmul_4096x4096x4096_f16f16f32.mlir", "--target", "cuda:sm_80",
                       "--compile-only", "--budget", "1", "--output", out)
    assert compiled.exit_code == 0, compiled.output
    built = json.loads((out / "manifest.json").read_text())["candidates"]
    ok = [b for b in built if b["result"]["status"] == "ok"]
    assert len(ok) == 2, built
    assert all(b["kernels"] == ["matmul_dispatch_0"] and b["dispatch_vmfb"] for b in ok), ok
    assert all((out / b["dispatch_vmfb"]).is_file() for b in ok)


STUCK_CALL = """
import signal, time
from tuner.cli.options import terminate
from tuner.evaluation.device_calls import on_device_thread
signal.signal(signal.SIGTERM, terminate)
def stuck():
    print("in the device call", flush=True)
    time.sleep(300)  # a kernel that never returns
on_device_thread("cuda", stuck)
"""


def test_a_stopped_run_exits_while_a_device_call_is_stuck(tmp_path):
    """SIGTERM during an in-process device call that never returns: the run ends (the device
    thread is a daemon and the exit waits for it a few seconds at most), instead of staying until
    the call returns, as an H100 run under `timeout -s TERM` did."""
    import signal
    import subprocess

    script = tmp_path / "stuck.py"
    script.write_text(STUCK_CALL)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parent.parent)
    try:
        assert proc.stdout.readline().strip() == "in the device call"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)  # the stuck call lasts 300 s: waiting on it would fail here
    finally:
        proc.kill()
    assert proc.returncode != 0 and "Terminated" in proc.stderr.read()


def test_loaded_modules_are_dropped_oldest_first_past_their_count_or_their_bytes(monkeypatch, tmp_path):
    """A comparison keeps its modules loaded; past `keep` of them, or past `keep_bytes` of
    module and parameter files, the least recently used go before the next is uploaded."""
    loads = []
    monkeypatch.setattr(in_model, "LoadedModule", lambda path, settings: loads.append(path.name) or path.name)
    files = {}
    for name, size in (("a.vmfb", 60), ("b.vmfb", 30), ("c.vmfb", 10), ("w.irpa", 20)):
        files[name] = tmp_path / name
        files[name].write_bytes(b"x" * size)
    plain = ModuleRun("cuda", "main", ())
    counted = in_model.ModuleCache(keep=2, keep_bytes=10 ** 6)
    for name in ("a.vmfb", "b.vmfb", "a.vmfb", "c.vmfb", "a.vmfb", "b.vmfb"):
        counted.get(files[name], plain)
    # a used again before c came: b, the least recently used, went for c, then c for b
    assert loads == ["a.vmfb", "b.vmfb", "c.vmfb", "b.vmfb"]
    loads.clear()
    weighed = in_model.ModuleCache(keep=8, keep_bytes=100)
    for name in ("a.vmfb", "b.vmfb", "c.vmfb", "a.vmfb"):  # 60 + 30 + 10: all fit
        weighed.get(files[name], plain)
    assert loads == ["a.vmfb", "b.vmfb", "c.vmfb"]
    # c with a 20-byte parameter file (another key, 30 bytes): b, the least recently used, goes
    weighed.get(files["c.vmfb"], ModuleRun("cuda", "main", (), runtime_flags=(f"--parameters=model={files['w.irpa']}",)))
    weighed.get(files["a.vmfb"], plain)  # still loaded
    # b again (30 more than the 100 held): c (10), then the weighted c (30) go; a, used last, stays
    weighed.get(files["b.vmfb"], plain)
    weighed.get(files["a.vmfb"], plain)
    assert loads[3:] == ["c.vmfb", "b.vmfb"]


def test_a_model_whose_inputs_cannot_be_uploaded_here_is_timed_by_the_tool_every_time(monkeypatch, tmp_path):
    """Inputs of a kind the process cannot upload: from the first timing on, every build of the
    model is timed by iree-benchmark-module (wall time), so no comparison mixes the two, and the
    timing method says so."""
    from tuner.core.running import Timing
    from tuner.stages import model_timing

    def refuse(vmfb, settings):
        raise in_model.NotInProcess("input0.4xf8E4M3FN.bin: raw inputs of f8E4M3FN are not read in-process")

    tool = []
    monkeypatch.setattr(in_model, "TOOL_TIMED", set())
    monkeypatch.setattr(model_timing, "TOOL_TIMED", in_model.TOOL_TIMED)
    monkeypatch.setattr(in_model.MODULES, "get", refuse)
    monkeypatch.setattr(in_model, "benchmark", lambda vmfb, settings: (tool.append(vmfb.name) or Timing((2.0, 2.0)), None))
    settings = ModuleRun("cuda", "main", (tmp_path / "input0.4xf8E4M3FN.bin",))
    assert "kernel time" in model_timing.timing_method(in_model.time_model, lambda: settings.inputs)
    assert in_model.time_model(tmp_path / "a.vmfb", settings).median_ms == 2.0
    monkeypatch.setattr(in_model.MODULES, "get", lambda vmfb, settings: pytest.fail("loaded after the inputs were refused"))
    assert in_model.time_model(tmp_path / "b.vmfb", settings).median_ms == 2.0
    assert tool == ["a.vmfb", "b.vmfb"]
    assert "iree-benchmark-module" in model_timing.timing_method(in_model.time_model, lambda: settings.inputs)
