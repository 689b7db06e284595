"""Peer code that several suites share: whether Spark can run here.

``linear`` and ``wide`` both time Spark MLlib; it needs pyspark and a working Java.
"""

import subprocess

from .._common import one_line as _one_line
from .._common import why_unimportable


def why_no_java():
    """``None`` when ``java -version`` works, else why not (one line)."""
    try:
        proc = subprocess.run(
            ["java", "-version"], capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"`java -version` failed: {_one_line(err)}"
    if proc.returncode:
        tail = " ".join(proc.stderr.split())[:200]
        return f"`java -version` exited with {proc.returncode}: {tail}"
    return None


def why_no_spark():
    """None when pyspark imports and ``java -version`` works, else why not."""
    return why_unimportable("pyspark") or why_no_java()
