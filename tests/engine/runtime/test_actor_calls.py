"""A call to an actor (an asynchronous fit's parameter server) whose worker has left the
cluster ends as soon as the scheduler no longer lists that worker, not at its timeout.

An actor method that answers after a few seconds shows a call answered across several
checks of its worker; a call that is never answered stands for one to a worker gone
mid-call.  Nothing here is timed: with
the check missing, the call would wait out its 600 s limit and the test's own timeout
(300 s) would fail it.
"""

import logging
import threading

import pytest

from dask_dgd._engine.runtime.executor import DaskExecutor

pytestmark = pytest.mark.timeout(300)


class Blocker:
    """An actor whose ``wait`` returns only once the event is set: by the fixture, on the
    instance itself (the workers are threads of this process; an actor runs one method
    at a time, so a ``release`` call through the actor would queue behind ``wait``)."""

    instances = []

    def __init__(self):
        self.event = threading.Event()
        Blocker.instances.append(self)

    def wait(self):
        self.event.wait()
        return "released"

    def nap(self, seconds):
        """Answers after ``seconds``: past a few of the call's checks of its worker."""
        threading.Event().wait(seconds)
        return "rested"


async def _remove(address, dask_scheduler=None):
    await dask_scheduler.remove_worker(address, stimulus_id="test-remove")


@pytest.fixture
def executor(make_cluster):
    yield DaskExecutor(make_cluster(2, processes=False, silence_logs=logging.CRITICAL))
    for blocker in Blocker.instances:
        blocker.event.set()
    Blocker.instances.clear()


def test_an_actor_call_answered_after_several_checks_of_its_worker_returns_the_answer(executor):
    worker = executor.workers()[0]
    future, actor = executor.start_actor(Blocker, (), {}, worker=worker, key="blocker-answers")
    assert executor.call_actor_within(600, actor.nap, 2.5, worker=worker) == "rested"  # (ACTOR_POLL: 1 s)
    executor.release_runners(([future], [actor]))


class NeverAnswered:
    """An actor call in flight that no one answers (as one to a worker that left in the
    middle of a graceful close, or whose address no longer accepts connections, can be
    for as long as the connect timeout)."""

    def result(self, timeout=None):
        threading.Event().wait(timeout)
        raise TimeoutError

    def done(self):
        return False


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
