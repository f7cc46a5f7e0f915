"""Every candidate the pipeline emits for the sample dispatches compiles, and the compiled
dispatch carries exactly the candidate's config (read back from the configured executables)."""

from dataclasses import replace

import pytest

from pipelines import pipeline_for
from tuner.candidates import generate_candidates
from tuner.discovery import discover
from tuner.compile_stage import EvalSettings, compile_all
from tuner.results import Status
from tests.conftest import SAMPLES

# Enough to cover data tiling and every register-tile shape the preferences produce first.
PER_SAMPLE = 8


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("*.mlir")))
def test_all_candidates_compile_and_carry_their_config(sample, ctx, cpu, tmp_path):
    [dispatch] = discover(SAMPLES / sample, cpu, ctx)
    pipeline = pipeline_for(dispatch)
    candidates = generate_candidates(dispatch, pipeline, PER_SAMPLE, ctx)
    assert len(candidates) == PER_SAMPLE + 1 and candidates[0].is_baseline
    built = compile_all(candidates, SAMPLES / sample, cpu, tmp_path, EvalSettings(), ctx)
    failures = {b.result.label: b.result.error for b in built if not b.result.ok}
    assert not failures
    for b in built:
        assert b.vmfb is not None and b.vmfb.stat().st_size > 0


def test_a_config_that_did_not_take_effect_is_caught(ctx, cpu, tmp_path):
    path = SAMPLES / "matmul_1024x1024x1024_f32.mlir"
    [dispatch] = discover(path, cpu, ctx)
    tiled = generate_candidates(dispatch, pipeline_for(dispatch), 3, ctx)[2]
    assert tiled.config.compilation_info
    baseline = generate_candidates(dispatch, pipeline_for(dispatch), 0, ctx)[0]
    # Ask for the tiled config but ship the empty spec: the read-back must notice.
    sneaky = replace(tiled, spec=baseline.spec)
    [built] = compile_all([sneaky], path, cpu, tmp_path, EvalSettings(), ctx)
    assert built.result.status == Status.CONFIG_NOT_APPLIED
    assert "lowering_config is" in built.result.error
