"""A context on a database of its own, by settings alone, with its outbox, inbox and dead letters.

`OUTBOX_CONTEXT_DATABASES = {"invoices": "billing"}` (app label -> an alias of DATABASES) puts a
context's tables on that database, and the kernel's tables beside them, so that a context's state
and the events that announce it, or a handler's work and its inbox row, stay in one transaction;
contexts on different databases meet only through the broker, as the choreography has them do
anyway. The rest of the project stays on `default`. `DATABASE_ROUTERS` must name the router,
`ContextDatabases` (a system check says so). Where the kernel works (outbox.core.working_database)
is set by each entry point from here: `atomic(context)`, a dispatch, a relay's `--database`.
"""

from contextlib import AbstractContextManager, ContextDecorator

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.utils.connection import ConnectionProxy

from outbox.core import working_database
from outbox.core.publishing import handling_a_message
from outbox.core.subscriptions import context_of
from outbox.core.working_database import current, kernel_databases

KERNEL = "outbox"  # the kernel's app label: its tables are on every database a context is on


def routed() -> bool:
    return bool(settings.OUTBOX_CONTEXT_DATABASES)


def database_of(context: str | None) -> str:
    """The database `context`'s tables (and its kernel tables) are on."""
    return settings.OUTBOX_CONTEXT_DATABASES.get(context, DEFAULT_DB_ALIAS) if context else DEFAULT_DB_ALIAS


def database_of_subscriber(subscriber: str) -> str:
    """The database a subscriber's inbox rows, cursors and dead letters are on: its context's."""
    return database_of(context_of(subscriber))


class _ContextConnection(ConnectionProxy):
    _alias = property(lambda self: database_of(self.__dict__["_context"]))

    def __init__(self, context: str):
        self.__dict__["_connections"], self.__dict__["_context"] = connections, context


def connection_of(context: str) -> ConnectionProxy:
    """`django.db.connection` for a context's own SQL: the connection of the database its tables
    are on, wherever the settings put them (`connection = connection_of("invoices")`, once)."""
    return _ContextConnection(context)


def atomic(context: str | None = None, *, using: str | None = None) -> "transaction.Atomic | _AtomicIn":
    """`transaction.atomic()` for a service's state change and the events that announce it, on its context's
    database (`using`: another alias; neither: the database the kernel works in now), where `publish()` inside
    then writes. Inside a handler it joins the handler's transaction without a savepoint."""
    # Dispatch rolls a handler's transaction back whole when the handler raises, so a savepoint would buy only two
    # round trips for every service a handler calls; a handler that catches a service's error is retried, never
    # acknowledged with its work undone (WorkRolledBack). Elsewhere, the API or the admin can catch a refusal.
    savepoint = not handling_a_message()
    if not routed():
        return transaction.atomic(using=using or DEFAULT_DB_ALIAS, savepoint=savepoint)
    return _AtomicIn(using or (database_of(context) if context else current()), savepoint=savepoint)


class _AtomicIn(ContextDecorator):
    """Django's `atomic(using)`, the kernel working in `using` for the block."""

    def __init__(self, using: str, *, savepoint: bool = True):
        self.using, self.savepoint = using, savepoint
        self._blocks: list[AbstractContextManager] = []
        self.atomic = transaction.atomic(using=using, savepoint=savepoint)

    def _recreate_cm(self):  # as a decorator: a block of its own for each call (and each thread)
        return _AtomicIn(self.using, savepoint=self.savepoint)

    def __enter__(self):
        block = working_database.working_in(self.using)
        block.__enter__()
        self._blocks.append(block)
        try:
            return self.atomic.__enter__()
        except BaseException:
            self._blocks.pop().__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info):
        try:
            return self.atomic.__exit__(*exc_info)
        finally:
            self._blocks.pop().__exit__(None, None, None)


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
