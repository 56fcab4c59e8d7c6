"""Waiting on a condition with a deadline, never a sleep-and-hope: for the workshop's rigs and the tests."""

import threading
import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], *, timeout: float, what: str) -> object:
    """Poll `condition` until it is truthy; raise TimeoutError naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        pause.wait(0.05)
