"""IREE codegen pipelines: each builds a constraint problem for a dispatch and turns solutions into configs."""

from pipelines.base import Config, ConfiguredDispatch, Pipeline, check_config
from pipelines.dispatch import (MATCHED_BY_STRUCTURE, PARALLEL_KINDS, REDUCTION_KINDS, ConvDims, DefaultConfig, Dispatch, DispatchKind, FusedOp, MmaIntrinsic,
                                TargetFacts)
from pipelines.registry import PIPELINES, flags_to_take, known_pipeline, pipeline_for, taking_flags, why_untunable

__all__ = [
    "Config",
    "ConfiguredDispatch",
    "Pipeline",
    "check_config",
    "ConvDims",
    "DefaultConfig",
    "Dispatch",
    "DispatchKind",
    "FusedOp",
    "MATCHED_BY_STRUCTURE",
    "PARALLEL_KINDS",
    "REDUCTION_KINDS",
    "MmaIntrinsic",
    "TargetFacts",
    "PIPELINES",
    "flags_to_take",
    "known_pipeline",
    "pipeline_for",
    "taking_flags",
    "why_untunable",
]
