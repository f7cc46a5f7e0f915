"""The learned search's cost model as a seam of its own (tuner.search.cost_model): the search
takes whatever model it is given and follows its predictions; the forest it uses by default
predicts what it was fitted to."""

import numpy as np
import pytest

from tests.test_search import _problem, _scores, _space
from tuner.search import Budget, run_search
from tuner.search.cost_model import ForestCostModel
from tuner.search.model import ModelSearch


class Designed:
    """Predicts a designed score for each point (by its standardized features' row, looked up in
    the search's own matrix): the mean is `prediction[index]`, the spread none; counts its fits."""

    def __init__(self, search_x: np.ndarray, prediction: np.ndarray) -> None:
        self.search_x, self.prediction, self.fits = search_x, prediction, 0

    def fit(self, x, y, weights, seed) -> None:
        assert len(x) == len(y) == len(weights)
        self.fits += 1

    def predict(self, x):
        rows = [int(np.flatnonzero((self.search_x == row).all(axis=1))[0]) for row in x]
        return self.prediction[rows], np.zeros(len(rows))


def test_the_learned_search_takes_next_the_point_its_cost_model_predicts_best():
    space = _space(_problem())
    search = ModelSearch(space, seed=0, warmup=8)
    target = len(space) // 2  # a point the warm-up is unlikely to reach, designed to be predicted best
    prediction = np.zeros(len(space))
    prediction[target] = 5.0
    search.cost_model = Designed(search._x, prediction)
    steps = run_search(search, _scores(space), Budget(16), batch_size=8)
    assert search.cost_model.fits >= 1 and steps[8].index == target  # the first batch after the warm-up


def test_the_forest_predicts_higher_where_it_was_fitted_higher_and_is_surer_where_it_saw_points():
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (60, 3))
    y = 2.0 * x[:, 0]  # the score rises with the first feature alone
    model = ForestCostModel(trees=16)
    model.fit(x, y, np.ones(len(y)), seed=1)
    mean, spread = model.predict(np.array([[-0.9, 0, 0], [0.0, 0, 0], [0.9, 0, 0]]))
    assert mean[0] < mean[1] < mean[2] and (spread >= 0).all()
    with pytest.raises(RuntimeError, match="predict before fit"):
        ForestCostModel().predict(x)
