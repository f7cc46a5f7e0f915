"""Stages of model tuning and the clients made of them (`tune-model`; a client of your own).

Names are imported on first use (PEP 562), so that the runtime-only parts
(`tuner.stages.model_timing`, `tuner.stages.plan`) import on a machine without the compiler."""

from importlib import import_module

_WHERE = {
    "DispatchOutcome": "base", "ModelFigure": "base", "ModelState": "base", "Stage": "base", "StageEnv": "base",
    "run_stages": "base",
    "DispatchStage": "builtin", "FlagStage": "flags", "MergeStage": "merge",
    "ModelTuning": "model_client", "default_stages": "model_client", "tune_model": "model_client",
    "ModelOptions": "model_client",
    "BuiltVariant": "variants", "SpecPart": "variants", "Variant": "variants", "build_variant": "variants",
    "Comparison": "model_timing", "ModelBenchmark": "model_timing", "compare": "model_timing",
    "iree_benchmark": "model_timing",
}
__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(f"module 'tuner.stages' has no attribute {name!r}")
    return getattr(import_module(f"tuner.stages.{_WHERE[name]}"), name)
