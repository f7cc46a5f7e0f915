"""The evaluation strategies by name (`--strategy`): tuner.evaluation.evaluator's one-machine evaluators,
and "ray", tuner.cluster.evaluator's, imported only when asked for (Ray is optional)."""

from __future__ import annotations

from tuner.errors import InputError
from tuner.evaluation.evaluator import BaseEvaluator, Overlapped, Sequential

STRATEGIES: dict[str, type[BaseEvaluator]] = {e.name: e for e in (Sequential, Overlapped)}
CLUSTER = "ray"  # tuner.cluster.evaluator.RayEvaluator


def evaluator_class(strategy: str) -> type[BaseEvaluator]:
    """The evaluator named `strategy` (see STRATEGIES, or "ray"): every one is built the same way
    (BaseEvaluator's constructor)."""
    if strategy == CLUSTER:
        from tuner.cluster.evaluator import RayEvaluator

        return RayEvaluator
    if strategy not in STRATEGIES:
        raise InputError(f"unknown evaluation strategy {strategy!r}; choose one of "
                         f"{', '.join([*STRATEGIES, CLUSTER])}")
    return STRATEGIES[strategy]
