"""The host's result as a second reference for a model tuned on a GPU target.

On a GPU target every build of the model is checked against the compiler's default build on that
GPU. That protects against a config that computes something else, but not against a default that
is itself wrong. IREE 3.13's default CUDA build of ResNet-50 in f16 is off llvm-cpu's result by
a relative error of 0.97, and its channels-last build's result is entirely non-finite
(BENCHMARKS.md, issue 35). So once per run the same program is built for llvm-cpu on this host
and run on the same inputs. Where the GPU default agrees with it, nothing changes. Where it does
not, every build is checked against the host's result instead, and that is said: the model's
builds (tuner.stages.model_timing.compare) and each dispatch's candidates (host_reference, taken by
tuner.evaluation.measure.Measurer), so a dispatch that the default computes wrong can still get a
config that computes it right.

Rewrites are exact, so one program serves for every variant: the program as given, but with its
half-precision reductions that accumulate computed in f32 (tuner.rewrite.F32_REDUCTIONS), as torch
computes them; IREE's own f16 reductions made wav2vec2's whole f16 result 0.19 off on llvm-cpu.
Where that rewrite changes the program, the reference is built on a CPU target too (there it is
otherwise the default build itself), so that a default wrong on every target is seen."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Optional

import numpy as np

from tuner.evaluation.runtime_tools import read_output, run_once
from tuner.rewrite import F32_REDUCTIONS
from tuner.core.settings import HostReference
from tuner.run_dir import write_file
from tuner.stages.base import MODEL_INPUTS, StageEnv, parsed_model
from tuner.stages.ledger import HOST
from tuner.stages.variants import Variant, build_variant
from tuner.targets import parse_target

HOST_REFERENCE = "host-reference"  # DIR/host-reference/: its build and result
RESULT = "result.npy"  # its checked result, as the numerics check reads it (f32 for raw types)


def host_reference(env: StageEnv) -> Optional[HostReference]:
    """The host's result as the dispatch tunings take it (tuner.evaluation.measure.Measurer): the
    inputs it ran on and the .npy it is saved in; None where there is none (host_output)."""
    if host_output(env) is None:
        return None
    return HostReference(env.output_dir / MODEL_INPUTS, env.output_dir / HOST_REFERENCE / RESULT)


def host_output(env: StageEnv) -> Optional[np.ndarray]:
    """The checked result of the model built for llvm-cpu and run on this host on the run's
    inputs (once per run), or None: the target is the host's own, no result is checked, or the
    build or run failed (said once)."""
    if env.workload.checked_output is None:
        return None
    if env.target.device.startswith("local") and _exact_program(env) is None:
        return None
    if env.cache.host_result is None:
        with env.ledger.timed(HOST):
            env.cache.host_result = (_build_and_run(env),)
    return env.cache.host_result[0]


def _exact_program(env: StageEnv) -> Optional[Path]:
    """The model's program with its half-precision reductions in f32, or None where it has none:
    the flag stage's own rewrite of it where that was made first (`RunCache.rewritten`, by the
    rewrite's name), else written once a run to DIR/host-reference/program.mlir and recorded
    there for the flag stage."""
    if F32_REDUCTIONS.name not in env.cache.rewritten:
        out = env.output_dir / HOST_REFERENCE / "program.mlir"
        changed = parsed_model(env).write(F32_REDUCTIONS, out)
        env.cache.changes[F32_REDUCTIONS.name] = changed
        if changed:
            env.say(f"host reference: {len(changed)} half-precision reduction(s) accumulated in f32, as torch does "
                    f"({changed[0]}{', ...' if len(changed) > 1 else ''})")
        env.cache.rewritten[F32_REDUCTIONS.name] = out if changed else None
    return env.cache.rewritten[F32_REDUCTIONS.name]


def _build_and_run(env: StageEnv) -> Optional[np.ndarray]:
    directory = env.output_dir / HOST_REFERENCE
    host = parse_target("llvm-cpu")
    built = build_variant(env.model, Variant(HOST_REFERENCE, source=_exact_program(env)), host, directory, env.ctx,
                          env.settings.compile_timeout_s)
    if not built.ok:
        env.say(f"host reference: the llvm-cpu build failed ({built.error}); builds are checked against the "
                f"{env.target.name} default only")
        return None
    settings = replace(env.settings, check_numerics=True).module_run(host.device, env.workload, env.inputs())
    run = run_once(built.vmfb, settings, directory / "output")
    if not run.ok:
        env.say(f"host reference: the llvm-cpu build did not run ({run.first_error()}); builds are checked "
                f"against the {env.target.name} default only")
        return None
    out = read_output(directory / "output", settings)
    if out is None or not np.all(np.isfinite(out)):
        env.say("host reference: the llvm-cpu result is not finite for these inputs; not used")
        return None
    write_file(directory / RESULT, lambda f: np.save(f, out))
    return out
