"""Choreography for Django: a transactional outbox, idempotent handlers and dead letters, relayed by Dramatiq."""

import logging

# The distribution's version, in this one place: kernel/pyproject.toml reads it (setuptools'
# `dynamic = ["version"]`), and kernel/CHANGELOG.md's top heading names it (a test holds both).
__version__ = "0.1.0"

# A library adds no handler but this one (the Logging HOWTO): where the kernel's lines go is the
# project's to say, in its LOGGING (the guide's logging page shows how).
logging.getLogger(__name__).addHandler(logging.NullHandler())
