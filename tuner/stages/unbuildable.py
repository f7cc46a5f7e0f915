"""A model IREE's defaults cannot build or run (issue 58, item 3): real exports hit a compiler
failure on one dispatch ("failed to distribute" on a reduction over integers, on cuda) or a kernel
the driver refuses at load (a large weight inlined as constant data, over PTX's limit). Before
tune-model profiles the model, its default build is compiled and run once on the device; where it
fails, the dispatch the compiler names and its message are said, and the model-wide choices
(flag sets and rewrites, tuner.stages.flag_options), then no constant inlined into dispatches
(NO_INLINED_CONSTANTS), are built and run in turn: the first that
builds and runs is where the run starts, as if the user had given it (its flags in every build and
in model_flags.txt, its rewritten program the one tuned). Where none does, one line names the
dispatch and the compiler's message."""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from pipelines.model_flags import NO_INLINED_CONSTANTS, short_flags
from tuner.discovery.program import discover_program
from tuner.errors import ToolError
from tuner.evaluation.device_identity import device_available
from tuner.evaluation.runtime_tools import run_once
from tuner.stages.base import RunCache, StageEnv
from tuner.stages.builtin import build_once, with_flags
from tuner.stages.flag_options import ModelOption, model_options, rewritten_program
from tuner.stages.repair import pins_for
from tuner.stages.variants import BuiltVariant, Variant

LOAD_CHECK = "load-check"  # DIR/variants/NAME/load-check: the output of a build's one run


def why_not(env: StageEnv, built: BuiltVariant) -> str:
    """"" where the build compiled and its entry runs once on the run's device; else why not (the
    compile's error, naming the dispatch where the compiler does, or the run's first error line)."""
    if not built.ok:
        return built.error
    settings = replace(env.settings, check_numerics=True).module_run(env.device, env.workload, env.inputs())
    run = run_once(built.vmfb, settings, built.vmfb.parent / LOAD_CHECK)
    return "" if run.ok else f"does not run on {env.device}: {run.first_error()}"


def buildable_start(env: StageEnv, pipeline: Optional[str]) -> tuple[StageEnv, str]:
    """`env` and "" where the model builds and runs with IREE's defaults; else `env` with the
    target, program and discovery of the first model-wide choice that builds and runs, and the
    line that says so. Raises ToolError (one line) where none does; where every build compiles
    and none runs alike, the device is said to be the cause, not the model."""
    default = build_once(env, Variant("default"))
    failure = why_not(env, default)
    if not failure:
        return env, ""
    if default.ok and not device_available(env.device):  # nothing would run: no choice is tried
        raise ToolError(f"the model builds but {failure}: the runtime finds no {env.device} on this "
                        f"machine (name another with --device, or run where the device is)")
    pins = pins_for(env, Variant("default"), pipeline)
    if pins:  # one dispatch the compiler cannot compile, given a config of the tuner's that can
        repaired = replace(env, target=with_flags(env.target, (), pins), cache=RunCache())
        why = why_not(repaired, build_once(repaired, Variant("default")))
        if not why:
            line = (f"IREE's defaults do not build the model ({failure}); with a config of the tuner's for "
                    + ", ".join(f"{p.dispatch.name} ({p.label})" for p in pins)
                    + f" they do, and every build of the run carries {'them' if len(pins) > 1 else 'it'}")
            env.say(line)
            return repaired, line
    env.say(f"IREE's defaults do not build and run the model: {failure}; trying the model-wide choices")
    run_errors = []
    tried = 0
    for option in [*model_options(env, pipeline), ModelOption(NO_INLINED_CONSTANTS)]:
        program = rewritten_program(env, option.rewrite) if option.rewrite else None
        if option.rewrite and program is None:
            continue
        tried += 1
        built = build_once(env, Variant(option.directory, option.flags, source=program))
        why = why_not(env, built)
        if not why:
            source = program or env.model
            target = with_flags(env.target, option.flags)
            found = discover_program(source, target, env.ctx).for_running(env.workload.parameters, env.dynamic_size)
            line = (f"IREE's defaults do not build and run the model ({failure}); with {short_flags(option.label)} "
                    f"it does, and the run tunes from there")
            env.say(line)
            return replace(env, model=source, target=target, program=found, cache=RunCache()), line
        env.say(f"  {short_flags(option.label)}: {why}")
        if built.ok:
            run_errors.append(why)
    if tried and len(run_errors) == tried and set(run_errors) == {failure}:
        raise ToolError(f"the model builds but {failure}, and so does every model-wide choice: "
                        f"the device, not the model")
    raise ToolError(f"the model does not build and run with IREE's defaults ({failure}), nor with any of the "
                    f"{tried} model-wide choices")
