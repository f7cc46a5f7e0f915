"""The external kernels' tiles chosen in the model (tuner.stages.kernel_tiles): which tiles each
problem is tried with, how the fastest is picked from one timing a build, that the rewrites build
each problem with the tiles they are given, and that the stage keeps the chosen tiles only where
the whole model is faster with them."""

from dataclasses import replace
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.test_external_gemm import _fixture_kernel, _program
from tuner.external.conv_kernel import ConvProblem, conv_tile_candidates
from tuner.external.gemm_kernel import GemmProblem, GemmTiles, tile_candidates
from tuner.rewrite import EXTERNAL_GEMM
from tuner.rewrite.external_gemm import external_gemms
from tuner.stages import kernel_tiles
from tuner.stages.base import ModelState, RunCache
from tuner.stages.ledger import Ledger
from tuner.stages.variants import BuiltVariant


def labels(tiles) -> list[str]:
    return [t.label for t in tiles]


def test_a_gemm_is_tried_with_the_rules_tiles_in_both_forms_then_the_spaces_other_shapes():
    # DeiT-S's MLP down, 1576x384 by K 1536: 64x64 makes 25 x 6 = 150 workgroups (a wave of
    # 132, the rule's), then the same in the TMA form; then, by the space's estimate (one wave
    # each), 128x64 (13 x 6 = 78 workgroups), 64x128 (25 x 3), their 13 row tiles 8 at a time
    assert labels(tile_candidates(GemmProblem(1576, 384, 1536, "f16", ()))) == [
        "64x64x64 w4 s4", "64x64x64 w4 s4 tma", "128x64x64 w4 s3 g8", "64x128x64 w4 s3 g8"]
    # 96 columns (Swin-T's first stage): only 32-wide column tiles divide them; the rule's K
    # step of 32, then the space's 64
    assert labels(tile_candidates(GemmProblem(1568, 96, 384, "f16", ()))) == [
        "64x32x32 w4 s4", "64x32x32 w4 s4 tma", "64x32x64 w4 s3 g8", "128x32x64 w4 s3 g8"]
    # a bias in the kernel: no TMA form (its epilogue is an activation at most)
    assert labels(tile_candidates(GemmProblem(1576, 384, 1536, "f16", ("bias",)))) == [
        "64x64x64 w4 s4", "128x64x64 w4 s3 g8", "64x128x64 w4 s3 g8", "128x128x64 w4 s3 g8"]
    assert len(tile_candidates(GemmProblem(1576, 384, 1536, "f16", ()), count=2)) == 2


def test_a_convolution_is_tried_with_the_rules_tiles_then_no_taller_ones_most_workgroups_first():
    # ResNet-50's 7x7 layer: 512 filters by 392 pixels; 64x64 makes 8 x 7 = 56 workgroups (the
    # rule's: none fills a wave), then 64x128 (8 x 4 = 32), 128x64 (4 x 7 = 28), 128x128 (16)
    resnet = ConvProblem(8, 512, 7, 7, 512, 3, 3, pads=(1, 1, 1, 1))
    assert labels(conv_tile_candidates(resnet)) == ["64x64x32 w4 s3", "64x128x32 w4 s3", "128x64x32 w4 s3",
                                                    "128x128x32 w8 s3"]
    # 32 filters (DenseNet-121): only 32-row tiles, which the rule keeps for groups that few
    dense = ConvProblem(8, 128, 56, 56, 32, 3, 3, pads=(1, 1, 1, 1))
    assert labels(conv_tile_candidates(dense)) == ["32x128x32 w4 s3", "32x64x32 w4 s3"]


def test_each_problem_keeps_the_tiles_of_the_build_where_its_kernel_ran_fastest():
    a, b, c = GemmTiles(64, 64, 64, 4, 4), GemmTiles(128, 64, 64, 4, 4), GemmTiles(64, 128, 64, 4, 4)
    picks = [{"gemm_x": a, "gemm_y": a, "gemm_z": a}, {"gemm_x": b, "gemm_y": b, "gemm_z": b},
             {"gemm_x": c, "gemm_y": a, "gemm_z": c}]
    times = [{"gemm_x": 0.020, "gemm_y": 0.010, "gemm_z": 0.010}, {"gemm_x": 0.012, "gemm_y": 0.011, "gemm_z": 0.0098},
             {"gemm_x": 0.015, "gemm_y": 0.009}]
    # x fastest in the second build, y in the third (with a, as in the first); z 2% faster at b,
    # within the margin: the rule's a
    assert kernel_tiles.fastest(picks, times) == {"gemm_x": b, "gemm_y": a, "gemm_z": a}
    assert kernel_tiles.fastest(picks, times, margin=0.01)["gemm_z"] == b


def _env(tmp_path: Path, model: Path) -> SimpleNamespace:
    return SimpleNamespace(model=model, target=SimpleNamespace(device="cuda", spec_entry="e", pinned=()),
                           output_dir=tmp_path, cache=RunCache(), say=lambda text: None, budget=None, ledger=Ledger())


def test_the_rewrite_builds_each_problem_with_the_tiles_the_stage_gives_it(tmp_path, monkeypatch):
    model = tmp_path / "model.mlir"
    model.write_text(_program("2,8,64", "64,128"))
    made = []
    source = lambda problem, tiles: made.append(tiles) or _fixture_kernel(problem, tiles)  # noqa: E731
    monkeypatch.setitem(kernel_tiles.TILEABLE, EXTERNAL_GEMM.name,
                        (partial(external_gemms, source=source), tile_candidates))
    state = ModelState(rewrites=(EXTERNAL_GEMM.name,), source=model)
    problem = GemmProblem(16, 128, 64, "f16", ("bias",))
    second = tile_candidates(problem)[1]
    program, given = kernel_tiles._program(_env(tmp_path, model), state, lambda options: options[1], "tiles-1")
    assert given == {problem.name: second} and made == [second]
    assert program == tmp_path / "kernel-tiles" / "model.tiles-1.mlir" and "hal.dispatch.extern" in program.read_text()


@pytest.mark.parametrize("speedup, kept", [(1.08, True), (0.97, False)])
def test_the_chosen_tiles_are_kept_only_where_the_model_is_faster_with_them(tmp_path, monkeypatch, speedup, kept):
    a, b = GemmTiles(64, 64, 64, 4, 4), GemmTiles(128, 64, 64, 4, 4)
    programs = iter([tmp_path / "t0.mlir", tmp_path / "t1.mlir", tmp_path / "t2.mlir", tmp_path / "t3.mlir"])

    def program(env, state, pick, name, chosen=None):
        if chosen is not None:
            return tmp_path / "chosen.mlir", chosen
        tiles = pick([a, b])
        return next(programs), {"gemm_x": tiles, "gemm_y": tiles}

    def built(env, variant):
        return BuiltVariant(variant, variant.source, None, ())

    def compare(env, reference, trials, directory, rounds=None):
        if rounds == 0:  # the numerics first: the last build computes another result
            return SimpleNamespace(paired={}, failed={trials[-1].variant.name: "off the default's"})
        paired = SimpleNamespace(speedup=speedup, beats_baseline=speedup > 1.0)
        return SimpleNamespace(paired={trials[0].variant.name: paired}, failed={})

    monkeypatch.setattr(kernel_tiles, "why_not_in_model", lambda: None)
    monkeypatch.setattr(kernel_tiles, "_program", program)
    monkeypatch.setattr(kernel_tiles, "prebuild", lambda env, variants: None)
    monkeypatch.setattr(kernel_tiles, "build_once", built)
    # x is faster at b (the second build), y at a: only x changes; the last build, off in its
    # result, is not timed (the fastest figures would be its)
    def times(env, builds, names):
        assert [b.ok for b in builds] == [True, True, True, False]
        return [{"gemm_x": 0.02, "gemm_y": 0.01}, {"gemm_x": 0.01, "gemm_y": 0.02}, {"gemm_x": 0.02, "gemm_y": 0.01}, {}]

    monkeypatch.setattr(kernel_tiles, "kernel_times", times)
    monkeypatch.setattr(kernel_tiles, "compare_on_model", compare)
    said = []
    env = _env(tmp_path, tmp_path / "m.mlir")
    env.say = said.append
    state = ModelState(rewrites=(EXTERNAL_GEMM.name,), source=tmp_path / "flags.mlir")
    after = kernel_tiles.KernelTileStage().run(state, env)
    assert after.source == (tmp_path / "chosen.mlir" if kept else tmp_path / "flags.mlir")
    assert after.notes[-1].startswith("external kernel tiles: " + ("1 of 2 problems" if kept else "the rule's kept"))
    assert said[0].startswith("  gemm_x: 128x64x64 w4 s4 in the model, 10.0 us (the rule's 64x64x64 w4 s4: 20.0 us)")
    # A run of the same directory resumed after the stage takes its choice as it was: nothing
    # built or timed again (Swin-T's resumed run on the H200 chose again in 34 s, and other tiles)
    for name in ("prebuild", "build_once", "kernel_times", "compare_on_model"):
        monkeypatch.setattr(kernel_tiles, name, lambda *a, **k: pytest.fail("built or timed again"))
    said.clear()
    again = kernel_tiles.KernelTileStage().run(state, env)
    assert again.source == after.source and said[0].endswith("(as an earlier run of this directory chose)")
    assert said[0].startswith("external kernel tiles: " + ("1 of 2 problems" if kept else "the rule's kept"))
    # another choice before the stage (other rewrites): chosen anew
    assert kernel_tiles._earlier_choice(env, replace(state, rewrites=("external-hopper-conv",))) is None


def test_no_tiles_are_tried_where_no_external_kernel_was_chosen_or_the_model_cannot_be_timed_inside(tmp_path,
                                                                                                   monkeypatch):
    stage, env = kernel_tiles.KernelTileStage(), _env(tmp_path, tmp_path / "m.mlir")
    plain = ModelState(rewrites=("nd-linear-as-matmul",), source=tmp_path / "p.mlir")
    assert stage.run(plain, env) == plain
    monkeypatch.setattr(kernel_tiles, "why_not_in_model", lambda: "CUPTI did not load (designed)")
    chosen = ModelState(rewrites=(EXTERNAL_GEMM.name,), source=tmp_path / "p.mlir")
    assert stage.run(chosen, env).notes == ("external kernel tiles: the rule's (CUPTI did not load (designed))",)
    # nor past the time left before the merge's share (the dispatch stage's floor is not this
    # stage's: on the H200 it ran 34-103 s in runs already past their budgets)
    from tuner.stages.time_budget import TimeBudget

    now = [0.0]
    env.budget = TimeBudget(100.0, clock=lambda: now[0])
    monkeypatch.setattr(kernel_tiles, "why_not_in_model", lambda: None)
    now[0] = 86.0
    assert stage.run(chosen, env).notes == ("external kernel tiles: the rule's (the time budget is spent)",)
    assert "choosing the external kernels' tiles" in env.budget.undone


def test_an_attention_is_tried_with_the_rules_tiles_then_the_spaces():
    from tuner.external.attention_kernel import AttentionProblem

    # the Llama layer's 32 heads of 1024 queries: 128 rows make 8 x 32 = 256 workgroups, a wave
    # (the rule's); by the space's estimate the other 128-row tiles (2 waves of 128 rows, against
    # 4 of 64 for 64-row ones), their keys 128 and 32 a step, then 64 rows
    llama = AttentionProblem(1, 32, 1024, 1024, 64, 64, causal=True)
    assert labels(kernel_tiles.TILEABLE["external-flash-attention"][1](llama)) == [
        "128x64 w4 s3", "128x128 w4 s3", "128x32 w4 s3", "64x64 w4 s3"]
    # BERT's 12 heads of 512: 128 rows make 48 workgroups, no wave; the rule's 64 rows first,
    # then the other 64-row tiles (96 workgroups, one wave), then 128 rows
    bert = AttentionProblem(1, 12, 512, 512, 64, 64)
    assert labels(kernel_tiles.TILEABLE["external-flash-attention"][1](bert)) == [
        "64x64 w4 s3", "64x128 w4 s3", "64x32 w4 s3", "128x64 w4 s3"]


@pytest.mark.slow
def test_the_stage_builds_each_candidate_program_for_cuda_and_keeps_the_faster_tiles(tmp_path, monkeypatch, ctx):
    """The stage end to end but for the device: the candidate programs rewritten with the
    fixture's kernel and built by iree-compile for cuda, their kernel times and the model's
    comparison designed (the second candidate's kernel faster, the model 1.1x with it)."""
    from tuner.core.settings import EvalSettings
    from tuner.targets import parse_target

    model = tmp_path / "model.mlir"
    model.write_text(_program("2,8,64", "64,128"))
    monkeypatch.setitem(kernel_tiles.TILEABLE, EXTERNAL_GEMM.name,
                        (partial(external_gemms, source=_fixture_kernel), tile_candidates))
    monkeypatch.setattr(kernel_tiles, "why_not_in_model", lambda: None)
    timed = []

    def times(env, builds, names):
        timed.append([b.ok for b in builds])
        return [{names[0]: 0.010 if j == 1 else 0.020} for j in range(len(builds))]

    def compare(env, reference, trials, directory, rounds=None):
        assert reference.ok and all(t.ok for t in trials)
        paired = {} if rounds == 0 else {trials[0].variant.name: SimpleNamespace(speedup=1.1, beats_baseline=True)}
        return SimpleNamespace(paired=paired, failed={})

    monkeypatch.setattr(kernel_tiles, "kernel_times", times)
    monkeypatch.setattr(kernel_tiles, "compare_on_model", compare)
    env = SimpleNamespace(model=model, target=parse_target("cuda"), output_dir=tmp_path / "run", ctx=ctx,
                          settings=EvalSettings(), cache=RunCache(), say=lambda text: None, budget=None,
                          ledger=Ledger(), progress=None)
    flags_program, _ = kernel_tiles._program(env, ModelState(rewrites=(EXTERNAL_GEMM.name,)), lambda o: o[0], "rule")
    state = kernel_tiles.KernelTileStage().run(ModelState(rewrites=(EXTERNAL_GEMM.name,), source=flags_program), env)
    problem = GemmProblem(16, 128, 64, "f16", ("bias",))
    rule, second = tile_candidates(problem)[:2]
    assert timed == [[True] * len(tile_candidates(problem))]  # every candidate built for cuda, then timed
    assert state.source == tmp_path / "run" / "kernel-tiles" / "model.tiles-chosen.mlir"
    assert state.notes[-1] == ("external kernel tiles: 1 of 1 problems on other tiles than the rule's, the model 1.10x "
                               f"({problem.name} {second.label})")  # the kept tiles named, for results.json
    assert env.ledger.counts["builds"] >= len(tile_candidates(problem)) + 1 and rule != second
