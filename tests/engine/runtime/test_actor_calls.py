"""A call to an actor (an asynchronous fit's parameter server) whose worker has left the
cluster ends as soon as the scheduler no longer lists that worker, not at its timeout.

An actor method that waits for an event shows a call that is answered; a call that is
never answered stands for one to a worker gone mid-call.  Nothing here is timed: with
the check missing, the call would wait out its 600 s limit and the test's own timeout
(300 s) would fail it.
"""

import logging
import threading

import pytest

from dask_dgd._engine.runtime.executor import DaskExecutor

pytestmark = pytest.mark.timeout(300)


class Blocker:
    """An actor whose ``wait`` returns only once ``release`` was called (the workers are
    threads of this process: the fixture releases every instance at the end)."""

    instances = []

    def __init__(self):
        self.event = threading.Event()
        Blocker.instances.append(self)

    def wait(self):
        self.event.wait()
        return "released"

    def release(self):
        self.event.set()


async def _remove(address, dask_scheduler=None):
    await dask_scheduler.remove_worker(address, stimulus_id="test-remove")


@pytest.fixture
def executor(make_cluster):
    yield DaskExecutor(make_cluster(2, processes=False, silence_logs=logging.CRITICAL))
    for blocker in Blocker.instances:
        blocker.release()
    Blocker.instances.clear()


def test_an_actor_call_answers_within_its_timeout(executor):
    worker = executor.workers()[0]
    future, actor = executor.start_actor(Blocker, (), {}, worker=worker, key="blocker-answers")
    executor.call_actor_within(600, actor.release, worker=worker)
    assert executor.call_actor_within(600, actor.wait, worker=worker) == "released"
    executor.release_runners(([future], [actor]))


class NeverAnswered:
    """An actor call in flight that no one answers (as one to a worker that left in the
    middle of a graceful close, or whose address no longer accepts connections, can be
    for as long as the connect timeout)."""

    def result(self, timeout=None):
        threading.Event().wait(timeout)
        raise TimeoutError


def test_an_actor_call_ends_once_its_worker_has_left_the_cluster(executor):
    worker = executor.workers()[0]
    executor.client.run_on_scheduler(_remove, worker)
    with pytest.raises(TimeoutError, match=f"the actor's worker {worker} left the cluster"):
        executor.call_actor_within(600, NeverAnswered, worker=worker)


def test_a_call_to_a_worker_still_there_waits_for_its_timeout(executor):
    worker = executor.workers()[0]
    with pytest.raises(TimeoutError) as info:
        executor.call_actor_within(2.5, NeverAnswered, worker=worker)  # asked after, about 2 times
    assert "left the cluster" not in str(info.value)


def test_without_its_worker_named_a_call_waits_for_its_timeout(executor):
    worker = executor.workers()[0]
    _, actor = executor.start_actor(Blocker, (), {}, worker=worker, key="blocker-unnamed")
    with pytest.raises(TimeoutError):
        executor.call_actor_within(0.2, actor.wait)
