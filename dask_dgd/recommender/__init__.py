"""Recommenders: matrix factorization of explicit ratings and implicit feedback.

Ratings are partitioned by user (balanced by number of ratings); each user's factors
live with its shard on a worker and never travel; only item gradients are reduced.
Ratings given as a dask array with CuPy blocks train on the GPU (the shards' arrays
live there); the fitted model is NumPy either way.
"""

from ._base import FactorizationBase
from ._metrics import evaluate_ranking, ndcg_at_k, precision_at_k, recall_at_k, train_test_split
from ._mf import ImplicitMatrixFactorization, MatrixFactorization
from ._model_selection import UserKFold, UserTimeSplit, rating_scorer

__all__ = [
    "FactorizationBase",
    "ImplicitMatrixFactorization",
    "MatrixFactorization",
    "UserKFold",
    "UserTimeSplit",
    "evaluate_ranking",
    "ndcg_at_k",
    "precision_at_k",
    "rating_scorer",
    "recall_at_k",
    "train_test_split",
]
