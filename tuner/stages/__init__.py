"""Stages of model tuning and the clients made of them (`tune-model`; a client of your own)."""

from tuner.stages.base import DispatchOutcome, ModelFigure, ModelState, Stage, StageEnv, run_stages
from tuner.stages.builtin import DispatchStage, FlagStage, MergeStage
from tuner.stages.tune_model import ModelTuning, default_stages, tune_model
from tuner.stages.variants import (BuiltVariant, Comparison, ModelBenchmark, SpecPart, Variant, build_variant,
                                   compare, iree_benchmark)

__all__ = ["BuiltVariant", "Comparison", "DispatchOutcome", "DispatchStage", "FlagStage", "MergeStage",
           "ModelBenchmark", "ModelFigure", "ModelState", "ModelTuning", "SpecPart", "Stage", "StageEnv", "Variant",
           "build_variant", "compare", "default_stages", "iree_benchmark", "run_stages", "tune_model"]
