"""A context on a database of its own, by settings alone, with its outbox, inbox and dead letters.

`OUTBOX_CONTEXT_DATABASES = {"invoices": "billing"}` (app label -> an alias of DATABASES) puts a
context's tables on that database, and the kernel's tables beside them: every database that holds
a context has its own outbox, inbox, dead letters, stream cursors and leases. A context's state and
the events that announce it then stay in one transaction wherever its tables are, and a handler's
work and its inbox row likewise; contexts on different databases meet only through the broker, as
the choreography has them do anyway. Contexts left out stay on `default`, with the rest of the
project (auth, sessions, the admin's log). `DATABASE_ROUTERS = ["outbox.core.context_databases.
ContextDatabases"]` must be set with it (a system check says so).

Which database the kernel works in (`current()`):
- `atomic()` (a context's service): the database of the app whose code calls it, found from the
  caller's module as Django finds a model's app, for the block; so `publish()` inside writes to
  the outbox beside the state it announces, whoever called the service (a handler, the API, the
  admin, a command);
- dispatch: the database of the subscriber's context, for the inbox row, the cursor, the dead
  letter and the handler's transaction;
- a relay: the database it was started for (`relay_outbox --database`, `serving`), for its claims, wake-up,
  lease, sweep, retention and heartbeats: one relay process per database, since LISTEN/NOTIFY,
  leases and advisory locks belong to one database;
- anywhere else (the admin's pages of the kernel, the console), `default`; the console's story of
  a correlation id reads every database (`kernel_databases()`).

Nothing changes when the setting is empty (the default topology): `current()` is `default` and
`atomic()` is Django's, not wrapped.
"""

import sys
from collections.abc import Iterator
from contextlib import ContextDecorator, contextmanager
from contextvars import ContextVar

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, connections, router, transaction
from django.utils.connection import ConnectionProxy

KERNEL = "outbox"  # the kernel's app label: its tables are on every database a context is on

# Set for a block (`working_in`): by `atomic()` and by dispatch. A thread that sets nothing works in
# its process's database: `default`, or a relay's (`serve`). Threads start without a context of
# their own (a relay's sweeper, heartbeat and wake-up threads), hence a process-wide fallback.
_current: ContextVar[str | None] = ContextVar("outbox_database", default=None)
_served = DEFAULT_DB_ALIAS


def routed() -> bool:
    return bool(settings.OUTBOX_CONTEXT_DATABASES)


def of(context: str | None) -> str:
    """The database `context`'s tables (and its kernel tables) are on."""
    return settings.OUTBOX_CONTEXT_DATABASES.get(context, DEFAULT_DB_ALIAS) if context else DEFAULT_DB_ALIAS


def of_subscriber(subscriber: str) -> str:
    """The database a subscriber's inbox rows, cursors and dead letters are on: its context's."""
    from outbox.core.subscriptions import context_of  # which imports the kernel's models

    return of(context_of(subscriber))


def kernel_databases() -> list[str]:
    """Every database with the kernel's tables: `default` and each a context was put on."""
    return list(dict.fromkeys([DEFAULT_DB_ALIAS, *settings.OUTBOX_CONTEXT_DATABASES.values()]))


def current() -> str:
    return _current.get() or _served


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


connection = _CurrentConnection()


class _ContextConnection(ConnectionProxy):
    _alias = property(lambda self: of(self.__dict__["_context"]))

    def __init__(self, context: str):
        self.__dict__["_connections"], self.__dict__["_context"] = connections, context


def connection_of(context: str) -> ConnectionProxy:
    """`django.db.connection` for a context's own SQL: the connection of the database its tables
    are on, wherever the settings put them (`connection = connection_of("invoices")`, once)."""
    return _ContextConnection(context)


# Module name -> the label of the app it belongs to (None: none), found once per module.
_of_module: dict[str, str | None] = {}


def app_label(module: str) -> str | None:
    """The label of the installed app `module` belongs to (None: none), found once per module."""
    if module not in _of_module:
        app = apps.get_containing_app_config(module)
        _of_module[module] = app.label if app is not None else None
    return _of_module[module]


def of_caller(depth: int = 2) -> str:
    """The database of the app whose code called the function that calls this."""
    return of(app_label(sys._getframe(depth).f_globals.get("__name__", "")))


def of_model(model) -> str:
    """The database a context's `model` is written to (its app's); `default` on the default topology."""
    if not routed():
        return DEFAULT_DB_ALIAS
    return router.db_for_write(model)


class atomic_in(ContextDecorator):
    """Django's `atomic(using)`, the kernel working in `using` for the block (publish() writes there)."""

    def __init__(self, using: str, *, savepoint: bool = True):
        self.using, self.savepoint, self._tokens = using, savepoint, []
        self.atomic = transaction.atomic(using=using, savepoint=savepoint)

    def _recreate_cm(self):  # as a decorator: a block of its own for each call (and each thread)
        return atomic_in(self.using, savepoint=self.savepoint)

    def __enter__(self):
        self._tokens.append(_current.set(self.using))
        try:
            return self.atomic.__enter__()
        except BaseException:
            _current.reset(self._tokens.pop())
            raise

    def __exit__(self, *exc_info):
        try:
            return self.atomic.__exit__(*exc_info)
        finally:
            _current.reset(self._tokens.pop())


class ContextDatabases:
    """The router: a context's models on its database, the kernel's on the database it works in
    now (`current()`), everything else on `default`."""

    def db_for_read(self, model, **hints):
        label = model._meta.app_label
        if label == KERNEL:  # a row read from a database is saved there, else the one worked in now
            instance = hints.get("instance")
            return instance._state.db if instance is not None and instance._state.db else current()
        return settings.OUTBOX_CONTEXT_DATABASES.get(label)

    db_for_write = db_for_read

    def allow_relation(self, obj1, obj2, **hints):
        return None

    def allow_migrate(self, db, app_label, **hints):
        if app_label == KERNEL:
            return db in kernel_databases()
        return db == settings.OUTBOX_CONTEXT_DATABASES.get(app_label, DEFAULT_DB_ALIAS)


@checks.register()
def context_databases_are_routed(app_configs=None, **kwargs):
    if not routed():
        return []
    found = []
    router = f"{ContextDatabases.__module__}.{ContextDatabases.__qualname__}"
    if router not in settings.DATABASE_ROUTERS:
        found.append(
            checks.Error(
                "OUTBOX_CONTEXT_DATABASES is set but the kernel's router is not in DATABASE_ROUTERS",
                hint=f"add {router!r} to DATABASE_ROUTERS",
                id="outbox.E010",
            )
        )
    shared = {}
    for label, alias in settings.OUTBOX_CONTEXT_DATABASES.items():
        shared.setdefault(alias, []).append(label)
    for alias, labels_there in shared.items():
        if alias != DEFAULT_DB_ALIAS and len(labels_there) > 1:
            found.append(  # a context alone on its database needs no role; two there would share every table
                checks.Warning(
                    f"OUTBOX_CONTEXT_DATABASES puts {', '.join(sorted(labels_there))} on {alias!r} together: their "
                    "code runs as the project's role there, with no schema or row of its own",
                    hint="give each context a database of its own, or keep them on default",
                    id="outbox.W010",
                )
            )
    labels = {config.label for config in apps.get_app_configs()}
    for label, alias in settings.OUTBOX_CONTEXT_DATABASES.items():
        if label not in labels:
            found.append(checks.Error(f"OUTBOX_CONTEXT_DATABASES names {label!r}, not an app", id="outbox.E011"))
        if alias not in settings.DATABASES:
            found.append(
                checks.Error(
                    f"OUTBOX_CONTEXT_DATABASES puts {label!r} on {alias!r}, not in DATABASES", id="outbox.E012"
                )
            )
    return found
