"""The embedded cluster as a new user meets it: a plain script, no ``__main__`` guard,
fed to ``python -`` (where worker processes could not even be spawned), with a dask
DataFrame of mixed float and bool columns.  It must train, and say once on stderr that
it started a cluster and how to use one's own."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = """\
import numpy as np, pandas as pd, dask.dataframe as dd
import dask_dgd

rng = np.random.default_rng(0)
df = pd.DataFrame({"a": rng.normal(size=400), "flag": rng.normal(size=400) > 0})
y = (df["a"] + df["flag"] + rng.logistic(size=400) > 0.5).astype(int)
ddf = dd.from_pandas(df, npartitions=4)
for _ in range(2):  # the second fit reuses the cluster, silently
    model = dask_dgd.LogisticRegression().fit(ddf, dd.from_pandas(y, npartitions=4))
ref = dask_dgd.LogisticRegression().fit(df, y)
print(np.abs(model.coef_ - ref.coef_).max() < 1e-6, float(model.predict(ddf).compute().mean()))
"""

ANNOUNCEMENT = (r"dask_dgd: no Dask client given, so started an embedded LocalCluster of \d+ single-threaded "
                r"worker threads in this process, dashboard \S+; reused by later fits\. To use your own cluster, "
                r"create a distributed\.Client first or pass client=\.\.\.\n")


@pytest.mark.slow
def test_a_script_without_main_guard_trains_on_the_embedded_threads(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-"], input=SCRIPT, cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert re.fullmatch(ANNOUNCEMENT, proc.stderr), proc.stderr
    same, mean = proc.stdout.split()
    assert same == "True" and 0.2 < float(mean) < 0.8
