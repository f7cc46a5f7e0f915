"""Cost models for the learned search (tuner.search.model.ModelSearch): what predicts a
config's score from its features, apart from how the search uses the prediction.

A cost model is fitted to the scores seen so far (log speedups, weighted) and predicts, for
each point asked about, a mean and a spread (how much it is unsure there); the search's
acquisition is mean + explore x spread. TVM MetaSchedule's CostModel and Helion's LFBO
surrogate are the same seam."""

from __future__ import annotations

from typing import Protocol

import numpy as np


class CostModel(Protocol):
    """Fitted to points `x` (rows of standardized features) with scores `y` and `weights`;
    `seed` makes a fit repeat (the search's own random stream draws it)."""

    def fit(self, x: np.ndarray, y: np.ndarray, weights: np.ndarray, seed: int) -> None: ...

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each row's predicted score and the spread of the prediction."""


class ForestCostModel:
    """A random forest (scikit-learn): the mean of its trees' predictions and their standard
    deviation as the spread."""

    def __init__(self, trees: int = 48) -> None:
        self.trees = trees
        self._forest = None

    def fit(self, x: np.ndarray, y: np.ndarray, weights: np.ndarray, seed: int) -> None:
        from sklearn.ensemble import RandomForestRegressor

        self._forest = RandomForestRegressor(n_estimators=self.trees, max_features=0.6, min_samples_leaf=1,
                                             random_state=seed, n_jobs=1)
        self._forest.fit(x, y, sample_weight=weights)

    def predict(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._forest is None:
            raise RuntimeError("predict before fit")
        per_tree = np.stack([t.predict(x) for t in self._forest.estimators_])
        return per_tree.mean(axis=0), per_tree.std(axis=0)
