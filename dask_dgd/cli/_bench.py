"""``dask-dgd bench``: run the repository's benchmark suites.

The suites live in the repository's ``benchmarks/`` folder, which is not installed with
dask_dgd, so the command runs ``python -m benchmarks run ...`` in a child process from
the clone's root and returns its exit status; nothing of ``benchmarks`` is imported
into this process.  The suite names are read from ``benchmarks/suites/__init__.py``
(its ``SUITES`` tuple) to reject an unknown suite before anything starts.
"""

import ast
import codecs
import os
import subprocess
import sys
import threading

from ._common import CommandError, UsageError, _int_at_least

__all__ = ["bench_arguments", "run_bench"]


def bench_arguments(p):
    p.add_argument("--suite", required=True, metavar="NAME",
                   help="a suite of the repository's benchmarks/ (linear, modes, straggler, skew, compression, "
                        "scaling, memory, recommender, climate) or 'all'")
    p.add_argument("--size", default="small", choices=["small", "full"],
                   help="small: a minute or two per suite; full: the reference figures")
    p.add_argument("--repeats", type=_int_at_least(1), default=None, help="override the suite's repeats")
    p.add_argument("--no-write", action="store_true",
                   help="print only; do not update benchmarks/RESULTS.md or benchmarks/out/")
    p.add_argument("--root", default=".", help="the repository clone that holds benchmarks/")


def _benchmarks_root(root):
    """The absolute path of the clone that holds ``benchmarks/`` (not installed with dask_dgd)."""
    root = os.path.abspath(root)
    if not os.path.isfile(os.path.join(root, "benchmarks", "__main__.py")):
        raise CommandError(
            f"no benchmarks/ folder in {root}: the benchmark suites live in the repository; run 'dask-dgd bench' "
            "from a clone's root (or pass --root) after pip install '.[bench]'"
        )
    return root


def _literal_suites(path):
    """``SUITES`` of ``benchmarks/suites/__init__.py`` when it is a literal, else None."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "SUITES" for t in targets):
            try:
                names = ast.literal_eval(node.value)
            except ValueError:
                return None
            if isinstance(names, (tuple, list)) and all(isinstance(n, str) for n in names):
                return tuple(names)
            return None
    return None


def suite_names(root):
    """The registered suites (``benchmarks.suites.SUITES``) of the clone at ``root``, in order.

    Read from the source when ``SUITES`` is a literal; otherwise a child process imports
    ``benchmarks.suites`` and prints them.
    """
    names = _literal_suites(os.path.join(root, "benchmarks", "suites", "__init__.py"))
    if names is not None:
        return names
    proc = subprocess.run(
        [sys.executable, "-c", "from benchmarks.suites import SUITES; print('\\n'.join(SUITES))"],
        cwd=root, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["(no message)"]
        raise CommandError(f"cannot read the suites of {os.path.join(root, 'benchmarks')}: {lines[-1]}")
    return tuple(proc.stdout.split())


def _pump(pipe, stream):
    """Copy a child's output to ``stream`` as it comes (``\\r`` progress lines included)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while True:
        chunk = os.read(pipe.fileno(), 65536)
        text = decoder.decode(chunk, final=not chunk)
        if text:
            stream.write(text)
            stream.flush()
        if not chunk:
            return


def _run(argv, cwd):
    """Run ``argv`` in ``cwd``; its output goes to this process's ``sys.stdout`` and ``sys.stderr``.

    When those are the process's own streams the child writes to them directly (terminal
    detection included); when they are replaced (e.g. ``contextlib.redirect_stdout``, a
    test's capture) its output is copied into them.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__:
        return subprocess.run(argv, cwd=cwd, check=False).returncode
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONIOENCODING": "utf-8"}
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        pumps = [threading.Thread(target=_pump, args=(pipe, stream), daemon=True)
                 for pipe, stream in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for t in pumps:
            t.start()
        try:
            for t in pumps:
                t.join()
            return proc.wait()
        except BaseException:  # e.g. KeyboardInterrupt: do not leave the child running
            proc.kill()
            raise


def run_bench(args):
    """``dask-dgd bench``: ``python -m benchmarks run ...`` in the clone; its exit status."""
    root = _benchmarks_root(args.root)
    suites = suite_names(root)
    if args.suite != "all" and args.suite not in suites:
        raise UsageError(f"unknown suite {args.suite!r}; choose one of {', '.join(suites)} or all")
    argv = ["run", "--suite", args.suite, "--size", args.size]
    if args.repeats is not None:
        argv += ["--repeats", str(args.repeats)]
    if args.no_write:
        argv += ["--no-write"]
    code = _run([sys.executable, "-m", "benchmarks", *argv], cwd=root)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell reports it
