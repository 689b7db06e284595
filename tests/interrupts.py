"""Callbacks that interrupt a fit at a given step (for checkpoint tests).

Module level, so that they pickle with the estimator's parameters."""


class Interrupted(Exception):
    """Raised by the callbacks below."""


class StopAt:
    """A callback that raises at a given step."""

    def __init__(self, step):
        self.step = step

    def __call__(self, record):
        if record["step"] == self.step:
            raise Interrupted(f"interrupted at step {self.step}")


class StopAfter(StopAt):
    """Raise at the first record at or past the step (asynchronous records skip steps)."""

    def __call__(self, record):
        if record["step"] >= self.step:
            raise Interrupted(f"interrupted at step {record['step']}")
