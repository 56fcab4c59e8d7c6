"""The database the kernel works in now, for the code below the entry points that decide it.

An entry point (a dispatch, a relay, a command, a service's `atomic(context)`) says which database
its work is in (outbox.placement decides it); everything the kernel does inside (the inbox row, the
cursor, the dead letter, publish(), a lease) reads it here, as Django's ORM reads a model's
database from its router. Nothing is set on the default topology: it is `default`.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import cast

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.connection import ConnectionProxy

# Set for a block (`working_in`). A thread that sets nothing works in its process's database:
# `default`, or a relay's (`serving`). Threads start without a context of their own (a relay's
# sweeper, heartbeat and wake-up threads), hence a process-wide fallback.
_current: ContextVar[str | None] = ContextVar("outbox_database", default=None)
_served = DEFAULT_DB_ALIAS


def current() -> str:
    return _current.get() or _served


def kernel_databases() -> list[str]:
    """Every database with the kernel's tables: `default` and each a context was put on."""
    return list(dict.fromkeys([DEFAULT_DB_ALIAS, *settings.OUTBOX_CONTEXT_DATABASES.values()]))


@contextmanager
def serving(alias: str) -> Iterator[None]:
    """For the block, this process works in `alias` wherever nothing else says: a relay's database,
    for every thread it starts (its sweeper, heartbeats and wake-up), and a command's."""
    global _served
    if alias not in connections.settings:
        raise ValueError(f"{alias!r} is not a database of DATABASES")
    before, _served = _served, alias
    try:
        yield
    finally:
        _served = before


@contextmanager
def working_in(alias: str) -> Iterator[None]:
    """For the block, this thread's kernel works in `alias` (its outbox, inbox, letters, leases)."""
    token = _current.set(alias)
    try:
        yield
    finally:
        _current.reset(token)


class _CurrentConnection(ConnectionProxy):
    """`django.db.connection` for the kernel: the connection of the database it works in now."""

    _alias = property(lambda self: current())

    def __init__(self):
        self.__dict__["_connections"] = connections


# Typed as what it stands for: every attribute is the current database's connection's.
connection = cast(BaseDatabaseWrapper, _CurrentConnection())
