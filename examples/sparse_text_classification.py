"""Text classification from a sparse CSR matrix, trained on a local Dask cluster.

Generated sentences about two topics are hashed into a SciPy CSR matrix with
scikit-learn's ``HashingVectorizer`` (no vocabulary to fit, nothing downloaded).  The
matrix becomes a dask array of CSR row blocks with
``da.from_array(X, chunks=(rows, -1), asarray=False)``; ``dask_dgd.LogisticRegression``
trains on those blocks where they live, and the result is compared with scikit-learn
fitted on the whole CSR matrix in memory.

Run with ``python examples/sparse_text_classification.py``.
"""

import dask.array as da
import numpy as np
import scipy.sparse as sp
from distributed import Client, LocalCluster
from sklearn.feature_extraction.text import HashingVectorizer
from sklearn.linear_model import LogisticRegression as SkLogisticRegression

import dask_dgd

TOPICS = {
    "sports": "match goal team score player coach league season win referee stadium".split(),
    "finance": "market stock bank price investor bond rate profit fund trade economy".split(),
}
COMMON = "the a today new report says after big week first many people".split()


def make_sentences(n_samples, random_state=0):
    """``n_samples`` short sentences and their topic labels (0 finance, 1 sports);
    5% of the labels are flipped, so the classes are not perfectly separable."""
    rng = np.random.default_rng(random_state)
    names = sorted(TOPICS)
    labels = rng.integers(0, 2, n_samples)
    sentences = []
    for label in labels:
        own = rng.choice(TOPICS[names[label]], size=3)
        other = rng.choice(TOPICS[names[1 - label]], size=1)  # some words from the other topic
        filler = rng.choice(COMMON, size=4)
        words = np.concatenate([own, other, filler])
        rng.shuffle(words)
        sentences.append(" ".join(words))
    flip = rng.random(n_samples) < 0.05
    return sentences, np.where(flip, 1 - labels, labels)


def main(n_samples=4000, n_features=2**12, alpha=1e-3):
    sentences, labels = make_sentences(n_samples)
    vectorizer = HashingVectorizer(n_features=n_features, alternate_sign=False, norm="l2")
    X = vectorizer.transform(sentences).tocsr()
    print(f"X: {type(X).__name__} {X.shape}, {X.nnz} stored values "
          f"({X.nnz / (X.shape[0] * X.shape[1]):.2%} dense)")

    with (
        LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        # Row blocks of the CSR matrix stay CSR (asarray=False): nothing is densified.
        X_dask = da.from_array(X, chunks=(n_samples // 4, -1), asarray=False)
        y_dask = da.from_array(labels, chunks=n_samples // 4)
        print(f"dask array: {X_dask!r}")

        model = dask_dgd.LogisticRegression(alpha=alpha, tol=1e-6, client=client)
        model.fit(X_dask, y_dask)
        accuracy = float(model.score(X_dask, y_dask))
        proba = model.predict_proba(X_dask).compute()

    reference = SkLogisticRegression(C=1.0 / (alpha * n_samples), tol=1e-10, max_iter=1000)
    reference.fit(X, labels)
    coef_diff = float(np.max(np.abs(np.ravel(model.coef_) - np.ravel(reference.coef_))))
    proba_diff = float(np.max(np.abs(proba - reference.predict_proba(X))))

    print(f"fitted in {model.n_iter_} {model.solver_} iterations")
    print(f"training accuracy:                 {accuracy:.4f}")
    print(f"max |coef - scikit-learn coef|:    {coef_diff:.2e}")
    print(f"max |proba - scikit-learn proba|:  {proba_diff:.2e}")
    test = [
        "the team scored a late goal to win the match",
        "the bank raised the rate and stocks fell",
    ]
    predicted = model.predict(vectorizer.transform(test))  # in-memory CSR works too
    for sentence, label in zip(test, predicted):
        print(f"  {sorted(TOPICS)[label]:>7}: {sentence}")
    return {"accuracy": accuracy, "coef_diff": coef_diff, "proba_diff": proba_diff,
            "predicted": predicted.tolist(), "sparse": sp.issparse(X)}


if __name__ == "__main__":
    main()
