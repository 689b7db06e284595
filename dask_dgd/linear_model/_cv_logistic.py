r"""Helpers of the cross-validated logistic path: its per-class attributes (binary or
multinomial) and the rows its held-out scores weigh.

:class:`~dask_dgd.linear_model._cv.LogisticRegressionCV` trains every (fold, ``C``)
model of a problem with ``m`` classes as ``m`` stacked parameter columns (a
:class:`~dask_dgd.losses.MultinomialLogistic` loss with ``n_outputs = m``, see
:mod:`dask_dgd.losses._path`); for two classes, one column of the binary loss.  Here the
path is laid out as scikit-learn's ``LogisticRegressionCV`` (its legacy attributes,
``use_legacy_attributes=True``): dictionaries keyed by class, each holding that class's
own coefficient path for the multinomial model, and the same held-out scores under
every key (the score of a fold is the model's, not a class's).

Class weights weigh the training rows only: as scikit-learn's, a held-out fold is
scored with its rows' sample weights (:func:`scoring_shards`).
"""

import numpy as np

from .._engine.data.blocks import encode_shard

__all__ = ["path_attributes", "scoring_shards"]


def scoring_shards(shards, classes, class_weight):
    """The blocks the held-out scores are summed over, or None to use the training's.

    The training blocks carry ``sample_weight * class_weight[y]``; with class weights,
    the held-out rows are scored on blocks encoded a second time without them (the same
    ``X`` on the same workers, only ``y`` and the weights are new), so that the scores
    are scikit-learn's, and a class of weight 0 still counts in them.

    Parameters
    ----------
    shards : ShardSet
        The rows, labels not yet encoded.
    classes : ndarray of shape (n_classes,)
    class_weight : dict, "balanced" or None

    Returns
    -------
    ShardSet or None
    """
    if class_weight is None:
        return None
    return shards.transform(encode_shard, classes, None, name="dgd-encode-scoring", token_suffix="-scoring")


def path_attributes(classes, C, l1_ratio, scores, paths, single):
    """``C_``, ``l1_ratio_``, ``scores_`` and ``coefs_paths_`` as scikit-learn's.

    Parameters
    ----------
    classes : ndarray of shape (n_classes,)
    C, l1_ratio : float
        The chosen penalty.
    scores : ndarray of shape (n_folds, n_Cs, n_l1_ratios)
        Held-out score of every fold and penalty.
    paths : ndarray of shape (n_folds, n_Cs, n_l1_ratios, n_dof) or \
(n_folds, n_Cs, n_l1_ratios, n_dof, n_classes)
        The solutions (intercept last along ``n_dof``): one vector per model for two
        classes, one per class (last axis, in ``classes`` order) otherwise.
    single : bool
        Drop the ``n_l1_ratios`` axis (the estimator was given no ``l1_ratios``).

    Returns
    -------
    C_, l1_ratio_ : ndarray of shape (1,) or (n_classes,)
        The chosen penalty, repeated for every class of the multinomial model.
    scores_ : dict
        ``{class: scores}`` for ``classes[1]`` (binary) or every class.
    coefs_paths_ : dict
        ``{class: path}``, ``path`` of shape ``(n_folds, n_Cs, [n_l1_ratios,] n_dof)``:
        the binary model's under ``classes[1]``, or each class's own row of the
        multinomial coefficients under that class.

    Examples
    --------
    >>> import numpy as np
    >>> scores, paths = np.zeros((3, 4, 1)), np.zeros((3, 4, 1, 5, 3))
    >>> C_, _, scores_, paths_ = path_attributes(np.array(["a", "b", "c"]), 1.0, 0.0, scores, paths, True)
    >>> C_.tolist(), [str(c) for c in scores_], paths_["c"].shape
    ([1.0, 1.0, 1.0], ['a', 'b', 'c'], (3, 4, 5))
    """
    if single:
        scores, paths = scores[:, :, 0], paths[:, :, 0]
    if paths.ndim == scores.ndim + 1:  # binary: one model, reported under the positive class
        return np.array([float(C)]), np.array([float(l1_ratio)]), {classes[1]: scores}, {classes[1]: paths}
    n = len(classes)
    return (np.full(n, float(C)), np.full(n, float(l1_ratio)), {c: scores.copy() for c in classes},
            {c: np.ascontiguousarray(paths[..., j]) for j, c in enumerate(classes)})
