"""Inputs as IREE accepts them: the function that runs the tuned dispatch is the one run and timed
(never another function of the module), whatever the dialect (linalg or torch) or the function
op (func.func, util.func), with bf16, scalar or no arguments; a dynamic dispatch is skipped with
why while the others stay tunable; f64 runs as the compiler demotes it; IREE's own dispatch
benchmark files are tuned with their baked config overridden, on the target they were dumped for."""

import json

import pytest
from iree.compiler import ir

from tests.conftest import assert_one_error_line, run_cli, iree_compile
from tuner import api
from tuner.discovery.read_back import read_configured
from tuner.core.settings import EvalSettings, RunOptions, SearchSettings
from tuner.errors import InputError
from tuner.targets import cuda, parse_target

FAST = EvalSettings(repetitions=1, min_time_s=0.01, confirm_rounds=1, confirm_top=1, quiet_wait_s=0.0)
MATMUL = """
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<{m}x{n}xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
  %r = linalg.matmul ins(%a, %b : tensor<{m}x{k}x{t}>, tensor<{k}x{n}x{t}>) outs(%f : tensor<{m}x{n}xf32>) -> tensor<{m}x{n}xf32>
"""


def _mm(m, n, k, t="f32"):
    return MATMUL.format(m=m, n=n, k=k, t=t)


TWO_FUNCTIONS = f"""
func.func @mm_a(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>) -> tensor<64x64xf32> {{{_mm(64, 64, 32)}
  return %r : tensor<64x64xf32>
}}
func.func @mm_b(%a: tensor<256x128xbf16>, %b: tensor<128x192xbf16>, %s: f32) -> (tensor<256x192xf32>, f32) {{{_mm(256, 192, 128, "bf16")}
  return %r, %s : tensor<256x192xf32>, f32
}}
"""
UTIL_FUNC = f"""
util.func public @main(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>) -> tensor<64x64xf32> {{{_mm(64, 64, 32)}
  util.return %r : tensor<64x64xf32>
}}
"""
NO_ARGUMENTS = f"""
func.func @noargs() -> tensor<64x64xf32> {{
  %a = util.unfoldable_constant dense<1.0> : tensor<64x32xf32>
  %b = util.unfoldable_constant dense<0.5> : tensor<32x64xf32>{_mm(64, 64, 32)}
  return %r : tensor<64x64xf32>
}}
"""
TORCH = """
func.func @main(%arg0: !torch.vtensor<[64,32],f32>, %arg1: !torch.vtensor<[32,48],f32>) -> !torch.vtensor<[64,48],f32> {
  %0 = torch.aten.mm %arg0, %arg1 : !torch.vtensor<[64,32],f32>, !torch.vtensor<[32,48],f32> -> !torch.vtensor<[64,48],f32>
  return %0 : !torch.vtensor<[64,48],f32>
}
"""
BF16_RESULT = """
func.func @linear(%a: tensor<64x128xbf16>, %b: tensor<128x96xbf16>) -> tensor<64x96xbf16> {
  %z = arith.constant 0.0 : bf16
  %e = tensor.empty() : tensor<64x96xbf16>
  %f = linalg.fill ins(%z : bf16) outs(%e : tensor<64x96xbf16>) -> tensor<64x96xbf16>
  %r = linalg.matmul ins(%a, %b : tensor<64x128xbf16>, tensor<128x96xbf16>) outs(%f : tensor<64x96xbf16>) -> tensor<64x96xbf16>
  return %r : tensor<64x96xbf16>
}
"""
ONE_DYNAMIC = f"""
func.func @dyn_mm(%a: tensor<?x32xf32>, %b: tensor<32x64xf32>) -> tensor<?x64xf32> {{
  %c0 = arith.constant 0 : index
  %m = tensor.dim %a, %c0 : tensor<?x32xf32>
  %z = arith.constant 0.0 : f32
  %e = tensor.empty(%m) : tensor<?x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %r = linalg.matmul ins(%a, %b : tensor<?x32xf32>, tensor<32x64xf32>) outs(%f : tensor<?x64xf32>) -> tensor<?x64xf32>
  return %r : tensor<?x64xf32>
}}
func.func @static_mm(%a: tensor<128x64xf32>, %b: tensor<64x96xf32>) -> tensor<128x96xf32> {{{_mm(128, 96, 64)}
  return %r : tensor<128x96xf32>
}}
"""


def _tune_cli(path, text, out, *extra):
    """`iree-tuner tune` of `text` written to `path`, one candidate and one confirmation round."""
    path.write_text(text)
    return run_cli("tune", path, "--num-candidates", "1", "--repetitions", "1", "--confirm-rounds", "1",
                   "--output", out, *extra)


def _tune(tmp_path, text, name="in.mlir"):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out"
    tuning = api.tune(path, "llvm-cpu", out, search=SearchSettings(budget=1), run=RunOptions(FAST, strategy="sequential"))
    return tuning, json.loads((out / "results.json").read_text())


@pytest.mark.slow
def test_the_function_that_runs_the_dispatch_is_the_one_timed(tmp_path):
    # mm_b's dispatch is the larger: tuned by default. The old tuner ran @mm_a with 256x256 inputs.
    tuning, data = _tune(tmp_path, TWO_FUNCTIONS)
    assert tuning.dispatch.name.startswith("mm_b_dispatch") and data["entry"] == "mm_b"
    assert all(r.ok for r in tuning.results), [(r.status, r.error) for r in tuning.results]
    # bf16 arguments (as raw bits), a scalar argument, two results of which the tensor is checked.
    assert tuning.results[0].relative_error == 0.0 and tuning.results[1].relative_error < 1e-4
    # The other function's dispatch, asked for by name, runs and is timed through @mm_a.
    a_name = "mm_a_dispatch_0_matmul_64x64x32_f32"
    tuning_a = api.tune(tmp_path / "in.mlir", "llvm-cpu", tmp_path / "out-a", dispatch_name=a_name, search=SearchSettings(budget=1), run=RunOptions(FAST))
    assert json.loads((tmp_path / "out-a" / "results.json").read_text())["entry"] == "mm_a"
    assert all(r.ok for r in tuning_a.results)


@pytest.mark.parametrize("text, entry", [(UTIL_FUNC, "main"), (NO_ARGUMENTS, "noargs"), (TORCH, "main"),
                                         (BF16_RESULT, "linear")],
                         ids=["util.func", "no arguments", "torch dialect", "bf16 result"])
@pytest.mark.slow
def test_inputs_iree_accepts_reach_a_timed_baseline(tmp_path, text, entry):
    tuning, data = _tune(tmp_path, text)
    assert data["entry"] == entry
    baseline = tuning.results[0]
    assert baseline.is_baseline and baseline.ok and baseline.median_ms > 0, baseline.error
    assert all(r.ok for r in tuning.results), [(r.status, r.error) for r in tuning.results]


@pytest.mark.slow
def test_a_dynamic_dispatch_is_skipped_with_why_and_the_others_are_tuned(tmp_path):
    path = tmp_path / "dyn.mlir"
    result = _tune_cli(path, ONE_DYNAMIC, tmp_path / "out")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "tuning static_mm_dispatch_0_matmul_128x96x64_f32" in text
    assert "skipped dyn_mm_dispatch_0_matmul_Dx64x32_f32: linalg.matmul: dynamic shapes" in text
    assert json.loads((tmp_path / "out" / "results.json").read_text())["entry"] == "static_mm"
    assert_one_error_line(run_cli("tune", path, "--dispatch", "dyn_mm_dispatch_0_matmul_Dx64x32_f32",
                                  "--output", tmp_path / "out2"), 2, "no tunable dispatch named")


@pytest.mark.slow
def test_f64_runs_as_the_compiler_demotes_it(tmp_path):
    # IREE demotes f64 to f32 by default, the function's arguments included: the inputs are read
    # from the program after that lowering, so they are f32 and the module runs.
    tuning, data = _tune(tmp_path, """
func.func @mm(%a: tensor<64x32xf64>, %b: tensor<32x64xf64>) -> tensor<64x64xf64> {
  %z = arith.constant 0.0 : f64
  %e = tensor.empty() : tensor<64x64xf64>
  %f = linalg.fill ins(%z : f64) outs(%e : tensor<64x64xf64>) -> tensor<64x64xf64>
  %r = linalg.matmul ins(%a, %b : tensor<64x32xf64>, tensor<32x64xf64>) outs(%f : tensor<64x64xf64>) -> tensor<64x64xf64>
  return %r : tensor<64x64xf64>
}
""")
    assert tuning.dispatch.lhs_type == "f32" and all(r.ok for r in tuning.results)
    assert {i.element_type for i in api.open_session(tmp_path / "in.mlir", "llvm-cpu", None, None).workload.inputs} == {"f32"}


MODEL = """
func.func @model(%x: tensor<128x256xf32>, %w1: tensor<256x512xf32>, %w2: tensor<512x128xf32>,
                 %w3: tensor<512x128xf32>) -> (tensor<128x128xf32>, tensor<128x128xf32>) {
  %z = arith.constant 0.0 : f32
  %e1 = tensor.empty() : tensor<128x512xf32>
  %f1 = linalg.fill ins(%z : f32) outs(%e1 : tensor<128x512xf32>) -> tensor<128x512xf32>
  %h = linalg.matmul ins(%x, %w1 : tensor<128x256xf32>, tensor<256x512xf32>) outs(%f1 : tensor<128x512xf32>) -> tensor<128x512xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%h : tensor<128x512xf32>) outs(%e1 : tensor<128x512xf32>) {
  ^bb0(%a: f32, %o: f32):
    %t = math.tanh %a : f32
    linalg.yield %t : f32
  } -> tensor<128x512xf32>
  %e2 = tensor.empty() : tensor<128x128xf32>
  %f2 = linalg.fill ins(%z : f32) outs(%e2 : tensor<128x128xf32>) -> tensor<128x128xf32>
  %y = linalg.matmul ins(%r, %w2 : tensor<128x512xf32>, tensor<512x128xf32>) outs(%f2 : tensor<128x128xf32>) -> tensor<128x128xf32>
  %y3 = linalg.matmul ins(%r, %w3 : tensor<128x512xf32>, tensor<512x128xf32>) outs(%f2 : tensor<128x128xf32>) -> tensor<128x128xf32>
  return %y, %y3 : tensor<128x128xf32>, tensor<128x128xf32>
}
"""


def test_dispatches_lists_every_dispatch_of_a_model(tmp_path, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    from iree.compiler import ir

    from tuner.discovery.program import configure
    from tuner.targets import parse_target

    path = tmp_path / "model.mlir"
    path.write_text(MODEL + ONE_DYNAMIC)
    result = run_cli("dispatches", path, "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["dispatches"]
    # Independently: every executable export of the program as the compiler configured it.
    with ir.Context():
        module = ir.Module.parse(configure(path, parse_target("llvm-cpu"), ()))
        exports = []
        module.operation.walk(lambda op: (exports.append(ir.StringAttr(op.attributes["sym_name"]).value)
                                          if op.name == "hal.executable.export" else None, ir.WalkResult.ADVANCE)[1])
    assert sorted(r["name"] for r in rows) == sorted(exports) and len(rows) == 4
    by_entry = {}
    for r in rows:
        by_entry.setdefault(r["entry"].split(":")[0].lstrip("@"), []).append(r)
    # The two 128x128x512 matmuls share one executable, run twice per call of @model.
    assert sorted(r["runs"] for r in by_entry["model"]) == [1, 2]
    assert all(r["pipeline"] == "llvmcpu_double_tiling" for r in by_entry["model"])
    [dynamic] = [r for r in rows if "dynamic shapes" in r["why_not"]]
    # Its function runs (a size is chosen for the dynamic dimension); the dispatch stays dynamic.
    assert dynamic["pipeline"] == "" and dynamic["entry"] == "dyn_mm"
    table = run_cli("dispatches", path)  # piped (not a terminal): every name whole, usable as --dispatch
    assert table.exit_code == 0 and "4 dispatches, 3 tunable" in " ".join(table.output.split())
    assert all(any(name in line.split() for line in table.output.replace("│", " ").splitlines()) for name in exports)


@pytest.mark.slow
def test_dispatches_profile_times_each_dispatch_and_the_whole_function(tmp_path):
    path = tmp_path / "model.mlir"
    path.write_text(MODEL)
    out = tmp_path / "profile"
    result = run_cli("dispatches", path, "--profile", "--json", "--output", out)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)  # the progress bar goes to stderr
    rows = data["dispatches"]
    assert len(rows) == 2 and all(r["ms"] > 0 and r["untimed"] == "" for r in rows)
    assert sorted(r["runs"] for r in rows) == [1, 2]
    # Shares are of the entry's summed dispatch time (each dispatch alone x its runs per call).
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    totals = [r["ms"] * r["runs"] for r in rows]
    assert [r["share"] for r in rows] == pytest.approx([t / sum(totals) for t in totals])
    assert [r["share"] for r in rows] == sorted((r["share"] for r in rows), reverse=True)
    assert data["entry_ms"]["model"] > 0 and 0 < data["coverage"]["model"] < 1.5
    assert data["method"] == "each dispatch inside the program, by the runtime's own profile"  # on the CPU
    # The same profile says how long the command buffers executed: the call less its host work,
    # so the dispatches cover more of it than of the whole call.
    assert 0 < data["busy_ms"]["model"] < data["entry_ms"]["model"] * 1.2
    assert data["busy_coverage"]["model"] > data["coverage"]["model"]
    # What was compiled and profiled stays where it was asked to go.
    assert (out / "program.vmfb").is_file() and (out / "model.ireeprof").is_file()


@pytest.mark.slow
def test_the_users_own_inputs_are_checked_and_used(tmp_path, small_matmul):
    import numpy as np

    a = np.full((128, 64), 0.5, np.float32)
    b = np.arange(64 * 256, dtype=np.float32).reshape(64, 256) / 1000
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "out"
    result = run_cli("tune", small_matmul, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy",
                     "--num-candidates", "1", "--repetitions", "1", "--confirm-rounds", "1", "--output", out)
    assert result.exit_code == 0, result.output
    # The baseline's output (the numerics reference) is the product of these inputs.
    reference = np.load(out / "candidates" / "0000" / "output-local-task.npy")
    assert np.allclose(reference, a @ b, rtol=1e-5)
    # Compiled here, measured elsewhere: the inputs travel in the directory.
    compiled = tmp_path / "compiled"
    assert run_cli("tune", small_matmul, "--input", tmp_path / "a.npy", "--input", tmp_path / "b.npy",
                   "--num-candidates", "1", "--compile-only", "--output", compiled).exit_code == 0
    measured = run_cli("benchmark", compiled, "--repetitions", "1", "--confirm-rounds", "1")
    assert measured.exit_code == 0, measured.output
    assert np.allclose(np.load(compiled / "candidates" / "0000" / "output-local-task.npy"), a @ b, rtol=1e-5)
    # Wrong count, wrong shape, wrong type: one line each.
    assert_one_error_line(run_cli("tune", small_matmul, "--input", tmp_path / "a.npy", "--output", tmp_path / "o1"),
                          2, "takes 2 arguments")
    np.save(tmp_path / "b_t.npy", b.T.copy())
    assert_one_error_line(run_cli("tune", small_matmul, "--input", tmp_path / "a.npy", "--input", tmp_path / "b_t.npy",
                                  "--output", tmp_path / "o2"), 2, "argument 1 of @mm is 64x256xf32")
    np.save(tmp_path / "b64.npy", b.astype(np.float64))
    assert_one_error_line(run_cli("tune", small_matmul, "--input", tmp_path / "a.npy", "--input", tmp_path / "b64.npy",
                                  "--output", tmp_path / "o3"), 2, "float64")
    # Five bytes that are no .npy file: said as such (numpy would call them pickled data).
    (tmp_path / "five.npy").write_bytes(b"hello")
    assert_one_error_line(run_cli("tune", small_matmul, "--input", tmp_path / "a.npy", "--input", tmp_path / "five.npy",
                                  "--output", tmp_path / "o4"), 2, "five.npy: not a .npy file")


@pytest.mark.slow
def test_tune_picks_by_measured_share_and_says_how(tmp_path):
    path = tmp_path / "model.mlir"
    result = _tune_cli(path, MODEL, tmp_path / "out")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "the largest measured share of 2 tunable dispatches" in text
    assert "each dispatch inside the program, by the runtime's own profile" in text
    assert (tmp_path / "out" / "profile" / "model.ireeprof").is_file()
    # With no device at hand it says it went by FLOPs: the 128x512x256 matmul (33.5 MFLOP a run).
    compiled = run_cli("tune", path, "--num-candidates", "1", "--compile-only", "--output", tmp_path / "compiled")
    assert compiled.exit_code == 0, compiled.output
    text = " ".join(compiled.output.split())
    assert "tuning model_dispatch_0_matmul_128x512x256_f32: the largest of 2 tunable dispatches by FLOPs" in text


def _dispatch_benchmark(tmp_path, target, text=UTIL_FUNC):
    """The dispatch benchmark file IREE 3.13 itself dumps for `text` on `target`."""
    src = tmp_path / "model.mlir"
    src.write_text(text)
    dump = tmp_path / "dumped"
    iree_compile(str(src), *target.compile_flags,
                    f"--iree-hal-dump-executable-benchmarks-to={dump}", "-o", str(tmp_path / "model.vmfb"))
    [path] = dump.glob("*.mlir")
    return path


@pytest.mark.slow
def test_a_dispatch_benchmark_file_is_tuned_with_its_baked_config_overridden(tmp_path):
    path = _dispatch_benchmark(tmp_path, parse_target("llvm-cpu"))
    tuning = api.tune(path, "llvm-cpu", tmp_path / "out", search=SearchSettings(budget=2), run=RunOptions(FAST, strategy="sequential"))
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    # Its benchmark function is what runs: the dispatch alone, in batches.
    assert data["entry"].endswith(tuning.dispatch.name) and data["input"].endswith("/imported/" + path.name)
    assert all(r.timing.startswith("local-task: dispatch alone") for r in tuning.results if r.ok)
    baseline, *candidates = tuning.results
    assert baseline.ok and baseline.median_ms > 0, baseline.error
    # The compiler configures the copy afresh: its default is the config baked into the file ...
    with ir.Context() as ctx:
        [baked] = [d for d in read_configured([path.read_text()], ctx) if d.op_name == "linalg.matmul"]
    assert tuning.dispatch.default.lowering_config == baked.lowering_config
    # ... and each candidate's own config was read back from its compile, in a binary of its own.
    tuned = [r for r in candidates if r.ok and r.knobs]
    assert tuned, [(r.status, r.error) for r in candidates]
    assert all(r.binary_hash != baseline.binary_hash for r in tuned)


@pytest.mark.slow
def test_a_dispatch_benchmark_for_another_target_is_refused_in_one_line(tmp_path):
    path = _dispatch_benchmark(tmp_path, cuda())
    assert_one_error_line(run_cli("tune", path, "--target", "llvm-cpu", "--output", tmp_path / "out"), 2,
                          "an IREE dispatch benchmark for cuda sm_80, but --target llvm-cpu compiles for llvm-cpu")


@pytest.mark.slow
@pytest.mark.parametrize("target_name", ["cuda", "rocm:gfx942"])
def test_a_gpu_dispatch_benchmark_takes_a_spec_at_the_codegen_stage(tmp_path, target_name):
    # No GPU here: compile-only, which verifies each candidate's config in its compile. The file
    # is an executable already, past where a preprocessing spec acts: on rocm every candidate of
    # one (shared/models/bert_f16_dispatch15_gfx942_benchmark.mlir) compiled with the compiler's
    # own config until its configs went in at the codegen stage. K is long against the output,
    # where split-K would be offered; it splits the op before dispatches form, so it is not here.
    f16 = f"""
util.func public @main(%a: tensor<64x4096xf16>, %b: tensor<4096x64xf16>) -> tensor<64x64xf32> {{{_mm(64, 64, 4096, "f16")}
  util.return %r : tensor<64x64xf32>
}}
"""
    path = _dispatch_benchmark(tmp_path, parse_target(target_name), f16)
    tuning = api.tune(path, target_name, tmp_path / "out", search=SearchSettings(budget=2),
                      run=RunOptions(compile_only=True))
    built = tuning.manifest.built
    assert all(b.result.ok for b in built), [(b.result.status, b.result.error) for b in built]
    assert all(not any(f.startswith("--iree-preprocessing-transform-spec-filename") for f in b.result.flags)
               for b in built)
    assert len({b.result.binary_hash for b in built}) >= 2  # a candidate's code is not the default's
    # What is timed there is the candidate's own module, through the benchmark function.
    assert all(b.dispatch_vmfb == b.vmfb and b.dispatch_function.endswith(tuning.dispatch.name) for b in built)


def test_tune_chooses_across_functions_by_time_over_the_whole_file():
    """A file of several functions: the dispatch that takes the most time of the whole file is
    tuned, not the one with the largest share of its own function (every one-dispatch function's
    dispatch is 100% of it), and the share said is of the file."""
    from types import SimpleNamespace as D

    from tuner.profiling.timing import DispatchTime, Profile

    small, large, other = D(name="f1_d0", flops=10), D(name="f2_d0", flops=30), D(name="f3_d0", flops=20)
    measured = Profile({"f1_d0": DispatchTime("f1_d0", 1.0, 1, "f1"),
                        "f2_d0": DispatchTime("f2_d0", 1.5, 2, "f2"),  # 3 ms a call, 60% of f2
                        "f2_d1": DispatchTime("f2_d1", 2.0, 1, "f2"),  # not tunable, still the file's time
                        "f3_d0": DispatchTime("f3_d0", 2.0, 1, "f3")},
                       {"f1": 1.1, "f2": 5.2, "f3": 2.1}, {}, "by a test")
    best, how = api.choose_dispatch([small, other, large], {"f2_d0": 2}, measured)
    assert best is large
    assert "across 3 functions" in how and "3.000 ms a call of @f2" in how
    assert "38% of the file's summed dispatch time" in how  # 3 of 8 ms
    # One function: the share is its own.
    one = Profile({"a": DispatchTime("a", 1.0, 1, "f"), "b": DispatchTime("b", 3.0, 1, "f")}, {"f": 4.0}, {}, "m")
    best, how = api.choose_dispatch([D(name="a", flops=50), D(name="b", flops=1)], {}, one)
    assert best.name == "b" and "75% of @f's dispatch time" in how
    # No times (compile-only): FLOPs per call of its function, runs counted.
    best, how = api.choose_dispatch([large, small], {"f1_d0": 4}, None)
    assert best is small and "by FLOPs (compile-only" in how


@pytest.mark.slow
def test_a_bf16_result_is_read_as_raw_bits_and_widened_to_its_values(tmp_path):
    """IREE's .npy writer refuses bf16 ("unsupported data encoding"): the result comes back as raw
    bits and is widened to f32, equal (to bf16's precision) to numpy's product of the same inputs."""
    import numpy as np

    from tuner.discovery.raw_types import raw_to_f32
    from tuner.discovery.workload import TensorSpec, Workload
    from tuner.evaluation.runtime_tools import ModuleRun, read_output, run_once

    (tmp_path / "m.mlir").write_text(BF16_RESULT)
    iree_compile(tmp_path / "m.mlir", "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host",
                 "-o", tmp_path / "m.vmfb")
    workload = Workload("linear", (TensorSpec((64, 128), "bf16"), TensorSpec((128, 96), "bf16")),
                       (TensorSpec((64, 96), "bf16"),))
    a_file, b_file = workload.write_inputs(tmp_path / "inputs")
    settings = ModuleRun("local-task", "linear", (a_file, b_file), 1, 0.01, 60.0, outputs=1, checked=0,
                         checked_type="bf16")
    run = run_once(tmp_path / "m.vmfb", settings, tmp_path / "out")
    assert run.ok, run.first_error()
    got = read_output(tmp_path / "out", settings)
    a = raw_to_f32(np.fromfile(a_file, dtype=np.uint16), "bf16").reshape(64, 128)
    b = raw_to_f32(np.fromfile(b_file, dtype=np.uint16), "bf16").reshape(128, 96)
    want = (a.astype(np.float64) @ b).ravel()
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 2 ** -7 * np.max(np.abs(want))  # bf16 keeps 8 bits
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2


def test_f8_raw_bits_widen_to_their_values():
    """Hand-counted bit patterns of the 8-bit floats (OCP FP8 and the FNUZ variants)."""
    import numpy as np

    from tuner.discovery.raw_types import f32_to_raw, raw_to_f32

    def values(element_type, *bits):
        return raw_to_f32(np.array(bits, dtype=np.uint8), element_type).tolist()

    # E4M3FN: 0 0111 000 = 1.0; 0 1111 110 = 1.75 * 2^8 = 448 (largest); 0 0000 001 = 2^-9; 0x7F NaN.
    assert values("f8E4M3FN", 0x38, 0x7E, 0x01, 0xB8) == [1.0, 448.0, 2.0 ** -9, -1.0]
    assert np.isnan(values("f8E4M3FN", 0x7F)[0])
    # E5M2: 0 01111 00 = 1.0; 0 11110 11 = 1.75 * 2^15 = 57344; 0 11111 00 = inf.
    assert values("f8E5M2", 0x3C, 0x7B, 0x7C) == [1.0, 57344.0, float("inf")]
    # FNUZ: bias one more, 0x80 the only NaN.
    assert values("f8E4M3FNUZ", 0x40) == [1.0] and values("f8E5M2FNUZ", 0x40) == [1.0]
    assert np.isnan(values("f8E4M3FNUZ", 0x80)[0])
    # Back to bits: the nearest finite value (0.3 lies between 0.28125 = 0x29 and 0.3125 = 0x2A).
    assert f32_to_raw(np.array([1.0, 0.3, -2.0, 1e6], dtype=np.float32), "f8E4M3FN").tolist() == [0x38, 0x2A, 0xC0, 0x7E]


def test_a_dynamic_dimension_is_sized_within_the_programs_hint():
    """Hand-counted: the default (or the user's size) clipped into util.assume.int's range and
    rounded to its divisor."""
    from tuner.discovery.workload import DimHint, TensorSpec

    assert DimHint(1, 16, 4096, 16).size(128) == 128
    assert DimHint(1, 16, 4096, 16).size(100) == 112  # up to a multiple of 16
    assert DimHint(1, 16, 4096, 16).size(5) == 16  # into the range
    assert DimHint(1, 16, 100, 32).size(100) == 96  # up would leave the range: down
    assert DimHint(0).size(128) == 128  # no hint
    spec = TensorSpec((1, -1), "i64", dynamic=(DimHint(1, 16, 4096, 16),)).sized(128)
    assert spec.shape == (1, 128) and spec.mlir == "1x?xi64" and spec.run_type == "1x128xi64"
    assert spec.fits((1, 48)) and not spec.fits((1, 40)) and not spec.fits((2, 48)) and not spec.fits((1, 8192))


TORCH_DYNAMIC = """
func.func @main(%arg0: !torch.vtensor<[1,?],si64>, %arg1: !torch.vtensor<[64,128],f32>, %arg2: !torch.vtensor<[128,96],f32>) -> (!torch.vtensor<[1,?],si64>, !torch.vtensor<[64,96],f32>) {
  %s0 = torch.symbolic_int "s0" {min_val = 2, max_val = 256} : !torch.int
  torch.bind_symbolic_shape %arg0, [%s0], affine_map<()[s0] -> (1, s0 * 16)> : !torch.vtensor<[1,?],si64>
  %int1 = torch.constant.int 1
  %0 = torch.aten.add.Tensor %arg0, %arg0, %int1 : !torch.vtensor<[1,?],si64>, !torch.vtensor<[1,?],si64>, !torch.int -> !torch.vtensor<[1,?],si64>
  torch.bind_symbolic_shape %0, [%s0], affine_map<()[s0] -> (1, s0 * 16)> : !torch.vtensor<[1,?],si64>
  %1 = torch.aten.mm %arg1, %arg2 : !torch.vtensor<[64,128],f32>, !torch.vtensor<[128,96],f32> -> !torch.vtensor<[64,96],f32>
  return %0, %1 : !torch.vtensor<[1,?],si64>, !torch.vtensor<[64,96],f32>
}
"""


@pytest.mark.slow
def test_a_dynamic_entry_runs_at_the_hints_size_or_the_users_inputs(tmp_path):
    """A decode step's token ids are `1x?xi64` (a torch export: the dimension is s0 * 16 for s0
    in 2..256, which IREE carries as util.assume.int into `main$async`): the static matmul is
    tuned, the function run at a size the hint allows, or at the size of the user's own input."""
    import numpy as np

    from tuner.driver import read_program

    path = tmp_path / "decode.mlir"
    path.write_text(TORCH_DYNAMIC)
    *_, program = read_program(path, "llvm-cpu", tmp_path / "work")
    [workload] = {w.entry: w for w in program.entries.values()}.values()
    assert workload.inputs[0].shape == (1, 128)
    # IREE 3.13 carries the symbolic shape as util.assume.int<umin = 16, umax = 4096, udiv = 16>.
    assert workload.dynamic_sizes() == ["argument 0 (i64) dimension 1: 128 (util.assume.int: 16..4096, a multiple of 16)"]
    *_, program = read_program(path, "llvm-cpu", tmp_path / "work", dynamic_size=40)
    assert next(iter(program.entries.values())).inputs[0].shape == (1, 48)
    np.save(tmp_path / "ids.npy", np.arange(64, dtype=np.int64).reshape(1, 64) % 5)
    np.save(tmp_path / "x.npy", np.ones((64, 128), dtype=np.float32))
    np.save(tmp_path / "w.npy", np.full((128, 96), 0.5, dtype=np.float32))
    result = run_cli("tune", path, "--num-candidates", "1", "--repetitions", "1", "--confirm-rounds", "1",
                     "--output", tmp_path / "out", "--input", tmp_path / "ids.npy", "--input", tmp_path / "x.npy",
                     "--input", tmp_path / "w.npy")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "tuning main$async_dispatch_1_matmul_64x96x128_f32" in text
    assert "dynamic size of @main's argument 0 (i64) dimension 1: 64" in text
    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert all(c["status"] == "ok" for c in data["candidates"]), data["candidates"]
    # A size the hint does not allow is refused in one line.
    np.save(tmp_path / "ids_bad.npy", np.zeros((1, 40), dtype=np.int64))
    assert_one_error_line(run_cli("tune", path, "--output", tmp_path / "bad", "--input", tmp_path / "ids_bad.npy",
                                  "--input", tmp_path / "x.npy", "--input", tmp_path / "w.npy"), 2,
                          "argument 0 of @main is 1x?xi64")


INITIALIZED = """
util.global private @w32 = #flow.parameter.named<"model"::"w"> : tensor<2048x4096xf32>
util.global private @w16 : tensor<2048x4096xf16>
util.initializer {
  %w = util.global.load @w32 : tensor<2048x4096xf32>
  %e = tensor.empty() : tensor<2048x4096xf16>
  %c = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
       ins(%w : tensor<2048x4096xf32>) outs(%e : tensor<2048x4096xf16>) {
  ^bb0(%in: f32, %out: f16):
    %t = arith.truncf %in : f32 to f16
    linalg.yield %t : f16
  } -> tensor<2048x4096xf16>
  util.global.store %c, @w16 : tensor<2048x4096xf16>
  util.return
}
util.func public @main(%x: tensor<32x2048xf16>) -> tensor<32x64xf32> {
  %w = util.global.load @w16 : tensor<2048x4096xf16>
  %ws = tensor.extract_slice %w[0, 0] [2048, 64] [1, 1] : tensor<2048x4096xf16> to tensor<2048x64xf16>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<32x64xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<32x64xf32>) -> tensor<32x64xf32>
  %r = linalg.matmul ins(%x, %ws : tensor<32x2048xf16>, tensor<2048x64xf16>) outs(%acc : tensor<32x64xf32>) -> tensor<32x64xf32>
  util.return %r : tensor<32x64xf32>
}
"""


@pytest.mark.slow
def test_a_dispatch_only_the_initializer_runs_is_listed_apart_and_never_tuned(tmp_path):
    # Converting f32 parameters to f16 when the module loads, as the toy Llama of
    # iree-test-suites does: by FLOPs the largest dispatch, which `tune` picked and stopped on
    # ("no public function runs _initializer_0_dispatch_0_...", exit 2).
    import subprocess

    from tuner.discovery.program import INITIALIZER_ONLY
    from tuner.tools import find_tool

    path = tmp_path / "initialized.mlir"
    path.write_text(INITIALIZED)
    archive = tmp_path / "w.irpa"
    subprocess.run([find_tool("iree-create-parameters"), "--data=w=2048x4096xf32", f"--output={archive}"],
                   check=True, capture_output=True)
    listed = {row.name: row for row in api.list_dispatches(path, "llvm-cpu").rows}
    [loading] = [row for name, row in listed.items() if name.startswith("_initializer_")]
    assert loading.why_not == INITIALIZER_ONLY and not loading.pipeline
    result = run_cli("tune", path, "--compile-only", "--budget", "1", "--parameters", f"model={archive}",
                     "--output", tmp_path / "out")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["meta"]["dispatch"].startswith("main_dispatch_")


@pytest.mark.slow
def test_a_dispatch_name_cut_at_its_dollar_by_the_shell_is_said_with_the_quoting_it_needs(tmp_path):
    # Unquoted, `--dispatch main$async_dispatch_1_...` reaches the tuner as `main`.
    path = tmp_path / "decode.mlir"
    path.write_text(TORCH_DYNAMIC)
    result = run_cli("tune", path, "--dispatch", "main", "--compile-only", "--output", tmp_path / "out")
    assert_one_error_line(result, 2, "no dispatch named 'main', but 'main$async_dispatch_1_matmul_64x96x128_f32' "
                                     "begins so: a name holding `$` must be single-quoted in the shell "
                                     "(--dispatch 'main$async_dispatch_1_matmul_64x96x128_f32')")
    listed = run_cli("dispatches", path, "--output", tmp_path / "listed")
    assert "--dispatch 'NAME' (single-quoted: the names hold `$`)" in " ".join(listed.output.split())


UNREAD_ARGUMENT = """
func.func @main(%a: tensor<64x64xf32>, %lengths: tensor<1xi64>) -> tensor<64x64xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<64x64xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<64x64xf32>) -> tensor<64x64xf32>
  %r = linalg.matmul ins(%a, %a : tensor<64x64xf32>, tensor<64x64xf32>) outs(%f : tensor<64x64xf32>) -> tensor<64x64xf32>
  return %r : tensor<64x64xf32>
}
"""


def test_an_argument_the_function_never_reads_takes_any_input(tmp_path):
    """An argument dead in the compiled program (the toy Llama's prefill never reads its sequence
    lengths) has no import to read its type from: the function is still runnable, with a
    one-element placeholder generated for it and any --input passed as it is (it said "an
    argument or result whose type could not be read", and the function could not be run)."""
    import numpy as np

    from tuner.discovery.program import discover_program
    from tuner.discovery.workload import Workload

    path = tmp_path / "unread.mlir"
    path.write_text(UNREAD_ARGUMENT)
    program = discover_program(path, parse_target("llvm-cpu"), ir.Context())
    workload = next(iter(program.entries.values()))  # the one dispatch's entry, or why it cannot run
    assert isinstance(workload, Workload), workload
    read, unread = workload.inputs
    assert not read.unread and read.shape == (64, 64) and unread.unread
    assert unread.mlir == "never read (any array)"
    assert [p.name for p in workload.write_inputs(tmp_path / "generated")] == ["input0.npy", "input1.npy"]
    assert Workload.from_json(workload.to_json()).inputs[1].unread  # a manifest keeps it
    np.save(tmp_path / "a.npy", np.ones((64, 64), np.float32))
    np.save(tmp_path / "lengths.npy", np.array([40, 2], np.int64))
    given = workload.given_inputs([tmp_path / "a.npy", tmp_path / "lengths.npy"], tmp_path / "given")
    assert given.inputs[1].shape == (2,) and given.inputs[1].element_type == "i64"
    assert np.load(tmp_path / "given" / "input1.npy").tolist() == [40, 2]
    np.save(tmp_path / "wrong.npy", np.ones((3, 3), np.float32))  # the argument read is still checked
    with pytest.raises(InputError, match="argument 0 of @main is 64x64xf32"):
        workload.given_inputs([tmp_path / "wrong.npy", tmp_path / "lengths.npy"], tmp_path / "given2")


def test_inputs_are_drawn_in_chunks_with_the_values_of_one_draw(monkeypatch):
    # Issue 60 (minor): a 65536x65536 f32 input was drawn as 32 GiB of float64 first; drawn in
    # chunks, an input is the same values as before (results and stores stay comparable).
    import numpy as np

    from tuner.discovery import workload
    from tuner.discovery.workload import TensorSpec

    monkeypatch.setattr(workload, "CHUNK", 7)  # every array below crosses chunk boundaries
    f32 = TensorSpec((5, 9), "f32").random(np.random.default_rng(3))
    assert f32.dtype == np.float32
    np.testing.assert_array_equal(f32, np.random.default_rng(3).uniform(-1.0, 1.0, size=(5, 9)).astype(np.float32))
    i64 = TensorSpec((4, 6), "i64").random(np.random.default_rng(3))
    np.testing.assert_array_equal(i64, np.random.default_rng(3).integers(0, 5, size=(4, 6), dtype=np.int64))
