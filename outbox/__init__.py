"""Choreography for Django: a transactional outbox, idempotent handlers and dead letters, relayed by Dramatiq."""

# The distribution's version, in this one place: kernel/pyproject.toml reads it (setuptools'
# `dynamic = ["version"]`), and kernel/CHANGELOG.md's top heading names it (a test holds both).
__version__ = "0.1.0"
