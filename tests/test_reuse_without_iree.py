"""Constraint generation reused by a compiler that is not IREE: `constraints/`, `pipelines/`'s
problems and `pipelines.describe` import without IREE, and a described op gives the same valid
space as the dispatch the tuner reads from IREE."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from constraints.fast_enumerate import enumerate_space
from pipelines.describe import gpu_target, mma

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "other_compiler.py"
# Runs a script with every `iree` module unimportable (an import raises ImportError).
BLOCK_IREE = """
import importlib.abc, runpy, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "iree" or name.startswith("iree."):
            raise ImportError("IREE is unimportable in this test: " + name)
sys.meta_path.insert(0, Block())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _example():
    spec = importlib.util.spec_from_file_location("other_compiler", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_example_client_runs_with_iree_unimportable():
    run = subprocess.run([sys.executable, "-c", BLOCK_IREE, str(EXAMPLE)], capture_output=True, text=True, cwd=REPO)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("matmul 2048x2048x1024 on made-up-gpu: ") and int(lines[0].split(": ")[1].split()[0]) > 0
    assert any(line.startswith("attention ") and int(line.split(": ")[1].split()[0]) > 0 for line in lines)


def test_the_blocker_does_block_iree(tmp_path):
    """The test above proves nothing if the blocker lets IREE through."""
    script = tmp_path / "imports_iree.py"
    script.write_text("import iree.compiler\n")
    run = subprocess.run([sys.executable, "-c", BLOCK_IREE, str(script)], capture_output=True, text=True, cwd=REPO)
    assert run.returncode != 0 and "IREE is unimportable in this test" in run.stderr


# sm_80 as a client would describe it from NVIDIA's documentation (not from IREE's target
# attribute): 32-wide warps, 1024 threads and 163 KiB of shared memory per block, mma.sync
# 16x8x16 for f16 and bf16 (IREE lists WMMA too; neither side offers it to TileAndFuse).
SM80 = gpu_target("sm_80", subgroup_size=32, max_threads=1024, shared_memory_bytes=166912, mma=[
    mma("NV_MMA_SYNC_F32_16x8x16_F16", 16, 8, 16, "f16", "f16", "f32"),
    mma("NV_MMA_SYNC_F16_16x8x16_F16", 16, 8, 16, "f16", "f16", "f16"),
    mma("NV_MMA_SYNC_F32_16x8x16_BF16", 16, 8, 16, "bf16", "bf16", "f32"),
])


def _iree_space(sample: str, pipeline_name: str):
    from pipelines import pipeline_for
    from tuner.driver import read_program

    *_, program = read_program(REPO / "sample_dispatches" / sample, "cuda:sm_80", None)
    dispatch = program.dispatches[0]
    pipeline = pipeline_for(dispatch, pipeline_name)
    return {tuple(sorted(c.items())) for c in enumerate_space(pipeline.build_problem(dispatch))}


@pytest.mark.parametrize("sample, described, pipeline", [
    ("matmul_4096x4096x4096_f16f16f32.mlir", lambda ex: ex.matmul_configs(SM80, 4096, 4096, 4096),
     "llvmgpu_tile_and_fuse"),
    ("attention_8x1024x1024x64_f16.mlir", lambda ex: ex.attention_configs(SM80, 8, 1024, 1024, 64),
     "llvmgpu_vector_distribute_attention"),
], ids=["matmul", "attention"])
def test_a_described_op_gives_the_same_configs_as_the_iree_path(sample, described, pipeline):
    ours = {tuple(sorted(c.items())) for c in described(_example())}
    iree = _iree_space(sample, pipeline)
    assert ours and ours == iree
