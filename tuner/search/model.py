"""A search that learns from what it measures (in the spirit of Helion's LFBO pattern search):
a cost model over the points' features (tuner.search.cost_model: a random forest unless another
is given) is fitted to every score seen so far (failures in as the worst outcome), ranks the
whole unvisited space, and the next batch takes the most
promising points, spread apart, plus one drawn at random; refit, repeat.

- Scores are log speedups, so a 2x and a 0.5x config weigh alike around the baseline.
- Acquisition: the forest's mean plus its spread across trees (an upper confidence bound), so a
  region the forest knows little about is tried before it is written off.
- Batch diversity: each pick after the first is discounted by its closeness (in standardized
  features) to points already picked in the batch, so a batch does not spend itself on one
  neighbourhood.
- Until `warmup` points have a score (seeds count), it follows the pipeline's preference order
  (one slot per batch at random).
- Learning across runs (`warm_start`): measurements of other dispatches of the same pipeline on
  the same device join the forest's data after the warm-up, at a weight that falls as this
  dispatch's own measurements come in. Opt-in: replayed, it has not helped (BENCHMARKS.md)."""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

from tuner.search.base import Search
from tuner.search.cost_model import CostModel, ForestCostModel
from tuner.search.prior import MIN_PRIOR_POINTS, Prior
from tuner.search.simple import PreferenceSearch

# The worst outcome a failure stands for: this far below the worst log speedup seen.
FAILURE_PENALTY = 1.0
# How much a measurement of another dispatch weighs against one of this dispatch.
# (Replayed against the recorded spaces, BENCHMARKS.md: weight 0.5 and letting the prior stand
# for the warm-up were worse on the B^T and 4096^3 spaces than 0.2 after the usual warm-up.)
PRIOR_WEIGHT = 0.2


class ModelSearch(Search):
    name = "model"
    adaptive = True

    def __init__(self, *args, warmup: int = 8, trees: int = 48, explore: float = 1.0, prior_warmup: bool = True,
                 cost_model: Optional[CostModel] = None, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.warmup = warmup
        self.cost_model: CostModel = cost_model or ForestCostModel(trees)
        # Warm up along the pipeline's preference order rather than at random: what its authors
        # knew is the best guess before anything is measured (one slot per batch stays random).
        self._prior = PreferenceSearch(self.space) if prior_warmup else None
        self.explore = explore
        # The pipeline's preferences are features too: its authors' knowledge of what tends to be
        # fast, which the forest may follow or ignore as the measurements say.
        x = np.hstack([self.space.features, self.space.tiers.astype(float)])
        spread = x.std(axis=0) if len(x) else np.ones(0)
        self._mean = x.mean(axis=0) if len(x) else np.zeros(x.shape[1])
        self._scale = np.where(spread > 0, spread, 1.0)
        self._x = (x - self._mean) / self._scale if len(x) else x
        self.fits = 0
        self._prior_x = np.zeros((0, x.shape[1]))  # other dispatches' points (warm_start), standardized
        self._prior_y = np.zeros(0)  # their log speedups
        self._prior_ok: list[float] = []  # their speedups

    def warm_start(self, prior: Prior) -> bool:
        """Start from measurements of other dispatches (tuner.search.prior); False (and nothing
        changes) where there are too few of them to say anything."""
        if len(prior) < MIN_PRIOR_POINTS or self._x.shape[1] == 0:
            return False
        x, y = prior.matrix(self.space)
        self._prior_x, self._prior_y = (x - self._mean) / self._scale, y
        self._prior_ok = [p.speedup for p in prior.points]
        return True

    def _order(self, n: int) -> list[int]:
        left = self.unvisited()
        if not left:
            return []
        scored = [(i, s) for i, s in self.scores.items()]
        ok = [s for _, s in scored if s is not None and s > 0] + self._prior_ok
        if len(scored) < self.warmup or len(ok) < 2 or self._x.shape[1] == 0:
            return self._warmup(left, n)
        acquisition = self._acquisition(scored, ok, left)
        return self._pick(left, acquisition, n)

    def _warmup(self, left: list[int], n: int) -> list[int]:
        if self._prior is None or n < 2:
            return self.rng.sample(left, min(n, len(left)))
        self._prior.proposed |= self.proposed
        picks = [p.index for p in self._prior.propose(n - 1)]
        rest = [i for i in left if i not in set(picks)]
        return picks + ([self.rng.choice(rest)] if rest else [])

    def _acquisition(self, scored: list[tuple[int, Optional[float]]], ok: list[float], left: list[int]) -> np.ndarray:
        """The cost model fitted to every score so far, its prediction for each unvisited point:
        mean + explore x spread."""
        worst = math.log(min(ok)) - FAILURE_PENALTY
        y = np.array([math.log(s) if s is not None and s > 0 else worst for _, s in scored])
        seed = self.rng.randrange(2**31)
        x = np.vstack([self._x[[i for i, _ in scored]].reshape(len(scored), self._x.shape[1]), self._prior_x])
        # Other dispatches' points weigh less as this one's own measurements come in.
        prior_weight = PRIOR_WEIGHT * self.warmup / (self.warmup + len(scored))
        weights = np.concatenate([np.ones(len(scored)), np.full(len(self._prior_y), prior_weight)])
        self.cost_model.fit(x, np.concatenate([y, self._prior_y]), weights, seed)
        self.fits += 1
        mean, spread = self.cost_model.predict(self._x[left])
        return mean + self.explore * spread

    def _pick(self, left: list[int], acquisition: np.ndarray, n: int) -> list[int]:
        """The best by acquisition, each next one discounted by closeness to those picked; the
        last slot of a batch of 4 or more goes to a uniformly random point."""
        explore_slot = n >= 4 and len(left) > n
        greedy = n - 1 if explore_slot else n
        scale = float(acquisition.std()) or 1.0
        value = acquisition.copy()
        x = self._x[left]
        width = 0.5 * x.shape[1]  # squared distance at which closeness has fallen to 1/e
        chosen: list[int] = []
        for _ in range(min(greedy, len(left))):
            j = int(np.argmax(value))
            chosen.append(j)
            value[j] = -np.inf
            closeness = np.exp(-((x - x[j]) ** 2).sum(axis=1) / width)
            value = value - 0.5 * scale * closeness
        picks = [left[j] for j in chosen]
        if explore_slot:
            rest = [i for i in left if i not in set(picks)]
            if rest:
                picks.append(self.rng.choice(rest))
        return picks
