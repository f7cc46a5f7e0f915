"""IREE codegen pipelines: each builds a constraint problem for a dispatch and turns solutions into configs."""

from pipelines.base import Config, ConfiguredDispatch, Pipeline, check_config
from pipelines.dispatch import (REDUCTION_KINDS, ConvDims, DefaultConfig, Dispatch, DispatchKind, FusedOp, MmaIntrinsic,
                                TargetFacts)
from pipelines.registry import PIPELINES, pipeline_for, why_untunable

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
    "REDUCTION_KINDS",
    "MmaIntrinsic",
    "TargetFacts",
    "PIPELINES",
    "pipeline_for",
    "why_untunable",
]
