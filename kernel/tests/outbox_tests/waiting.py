"""Waiting on a condition with a deadline, never a sleep-and-hope; a timeout fails the test."""

import threading
import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], *, timeout: float = 30.0, what: str = "condition"):
    """Poll `condition` until it is truthy; fail with `what` once `timeout` seconds pass."""
    deadline, pause = time.monotonic() + timeout, threading.Event()
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        pause.wait(0.05)
    return value
