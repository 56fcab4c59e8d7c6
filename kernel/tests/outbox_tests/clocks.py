"""A host whose clock is off, as the process under test reads it."""

from datetime import timedelta

from django.utils import timezone


def a_clock_off_by(monkeypatch, seconds: float) -> None:
    """This process's clock, as a host whose clock is `seconds` off would read it."""
    real_now = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real_now() + timedelta(seconds=seconds))
