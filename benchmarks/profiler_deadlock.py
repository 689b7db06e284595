"""Distributed's worker profiler deadlocks CPython 3.11 before 3.11.9 (gh-106883).

``python -m benchmarks.profiler_deadlock [--runs 3] [--seconds 60]`` runs, in fresh
processes, an in-process ``LocalCluster`` (2 single-threaded workers, the profiler
sampling every 1 ms) whose tasks secede from the worker's thread pool (a thread starts
and ends with each task, as with an asynchronous fit's group loops) and leave behind
cycles of objects whose finalizers give up the GIL (as a ``distributed.Future``'s
``__del__`` does); a garbage collection after every few allocations
(``gc.set_threshold(5)``) makes the rare instant the deadlock needs, a collection
inside ``sys._current_frames``, frequent.  Each run goes on for ``--seconds`` and is
called hung when it prints no progress for 30 s (a deadlocked process stops all its
threads, so the watch is this parent process).  It prints, for the profiler on and off,
how many runs hung and the tasks done.  With the profiler off (what
:func:`dask_dgd._engine.runtime.clusters.cluster_config` sets on these interpreters)
no run should hang; on CPython 3.11.9+ or 3.12+ neither setting should.
"""

import argparse
import selectors
import subprocess
import sys
import time

CHILD = r"""
import gc, logging, sys, time
import dask
from distributed import Client, LocalCluster, secede

gc.set_threshold(5)

class Cycle:
    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)  # gives up the GIL, as a Future's __del__ does in its socket write

def deep(n):
    return deep(n - 1) if n else body()

def body():
    secede()  # a thread starts in the pool; this one ends with the task
    junk = [Cycle() for _ in range(20)]
    return sum(range(20000))

def task(i):
    return deep(30)  # frames without frame objects, made by sys._current_frames

config = {"distributed.worker.profile.enabled": sys.argv[1] == "on", "distributed.worker.profile.interval": "1ms"}
with dask.config.set(config), LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0",
                                           silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
    done, t0 = 0, time.time()
    while time.time() - t0 < float(sys.argv[2]):
        client.gather(client.map(task, range(50), pure=False))
        done += 50
        print(done, flush=True)
"""

#: Seconds without progress after which a run is called hung.
HUNG_AFTER = 30.0


def run_once(profiler, seconds):
    """``(hung, tasks done)`` of one child process."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, profiler, str(seconds)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    done, last = 0, time.monotonic()
    try:
        while True:
            if not sel.select(timeout=1.0):
                if time.monotonic() - last > HUNG_AFTER:
                    return True, done
                continue
            line = proc.stdout.readline()
            if not line:
                return False, done
            done, last = int(line), time.monotonic()
    finally:
        proc.kill()
        proc.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args(argv)
    print(f"Python {sys.version.split()[0]}; {args.runs} runs of {args.seconds:g} s per setting")
    print("| worker profiler | runs hung | tasks done per run |")
    print("|---|---|---|")
    for profiler in ("on", "off"):
        results = [run_once(profiler, args.seconds) for _ in range(args.runs)]
        hung = sum(h for h, _ in results)
        done = ", ".join(str(d) + (" (hung)" if h else "") for h, d in results)
        print(f"| {profiler} | {hung} of {args.runs} | {done} |", flush=True)


if __name__ == "__main__":
    main()
