"""Waiting on a condition with a deadline, never a sleep-and-hope; a timeout fails the test."""

from collections.abc import Callable

from harness.waiting import wait_for


def wait_until(condition: Callable[[], object], *, timeout: float = 30.0, what: str = "condition"):
    """Poll `condition` until it is truthy; fail with `what` once `timeout` seconds pass."""
    try:
        return wait_for(condition, timeout=timeout, what=what)
    except TimeoutError as timeout_error:
        raise AssertionError(str(timeout_error)) from None
