"""Every registered codegen pipeline (pipelines.PIPELINES) against the seam it implements
(pipelines.base.Pipeline), on the dispatches it takes among the samples (sample_dispatches/ and
tests/fixtures/kinds/, discovered on llvm-cpu, also with data tiling materialized early, on cuda
and on rocm): a new pipeline file is checked by being registered (issue 61 item 3)."""

import math
from pathlib import Path

import pytest
from iree.compiler import ir

from constraints import enumerate_solutions
from pipelines import PIPELINES
from pipelines.model_flags import EARLY_MATERIALIZATION
from tuner.discovery.program import discover_program
from tuner.targets import parse_target

REPO = Path(__file__).resolve().parent.parent
SAMPLES = sorted((REPO / "sample_dispatches").glob("*.mlir")) + sorted((REPO / "tests" / "fixtures" / "kinds").glob("*.mlir"))
WAYS = [("llvm-cpu", ()), ("llvm-cpu", EARLY_MATERIALIZATION), ("cuda:sm_80", ()), ("rocm:gfx942", ())]
PER_PIPELINE = 2  # dispatches checked per pipeline (the first it takes, by sample name)


@pytest.fixture(scope="module")
def taken() -> dict:
    """Each pipeline's name -> the sample dispatches it takes (`supports`), in sample order."""
    ctx = ir.Context()
    found: dict = {name: [] for name in PIPELINES}
    for target_name, flags in WAYS:
        target = parse_target(target_name)
        for sample in SAMPLES:
            for d in discover_program(sample, target, ctx, flags).dispatches:
                for name, pipeline in PIPELINES.items():
                    if pipeline.supports(d) and len(found[name]) < PER_PIPELINE:
                        found[name].append(d)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_each_pipeline_takes_a_sample_and_turns_solutions_of_its_problem_into_configs_of_its_knobs(name, taken):
    pipeline = PIPELINES[name]
    assert taken[name], f"{name} takes none of the samples: add a sample of what it takes"
    ctx = ir.Context()
    for d in taken[name]:
        assert pipeline.declines(d) is None, (name, d.name)  # taken, so not declined
        problem = pipeline.build_problem(d)
        solutions = list(enumerate_solutions(problem, 3))
        assert solutions, (name, d.name)
        admitted = [s for s in solutions if pipeline.admits(d, s)]
        assert admitted, (name, d.name)  # its own space holds configs it takes
        for solution in admitted:
            assert problem.admits(solution), (name, solution)  # a solution meets its problem's rules
            config = pipeline.to_config(d, solution, ctx)
            # The config says which knobs made it (those of the problem, and any optional ones)
            # and what to read back to prove it took effect.
            assert set(config.knobs) <= {k.name for k in problem.knobs} | set(pipeline.optional_knobs), config.knobs
            assert all(config.knobs[k] == v for k, v in solution.items() if k in config.knobs)
            assert config.compilation_info or config.flags, (name, solution)
            if config.compilation_info:
                assert str(ir.Attribute.parse(config.compilation_info, ctx)) == config.compilation_info
                assert config.expect_lowering_config or config.expect_translation_info, (name, solution)
            # What a learned search reads of it (none where the pipeline gives none): numbers.
            features = pipeline.features(d, solution)
            assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in features.values()), features


@pytest.mark.slow
def test_a_pipeline_declines_what_it_does_not_take_with_a_reason_or_says_nothing_of_another_kind(taken):
    """Across the pipelines' taken dispatches: each other pipeline either takes it, names why it
    declines it (a sentence), or stays silent (None) on a kind it is not for."""
    dispatches = [d for ds in taken.values() for d in ds]
    for name, pipeline in PIPELINES.items():
        for d in dispatches:
            why = pipeline.declines(d)
            if pipeline.supports(d):
                assert why is None, (name, d.name, why)
            else:
                assert why is None or (isinstance(why, str) and len(why.split()) >= 4), (name, d.name, why)


def test_every_hook_of_a_pipeline_belongs_to_exactly_one_concern():
    """Pipeline is its concerns joined (pipelines.base.CONCERNS): a hook defined on Pipeline
    itself, or in two concerns, would escape what the constraint sources forward by concern."""
    from collections import Counter

    from pipelines.base import CONCERNS, HOOKS, Pipeline

    public = {name for name in dir(Pipeline) if not name.startswith("_")}
    assert public == set(HOOKS)
    assert not [name for name in vars(Pipeline) if not name.startswith("_")]
    owners = Counter(name for concern in CONCERNS for name in vars(concern) if not name.startswith("_"))
    assert [name for name, n in owners.items() if n > 1] == []
