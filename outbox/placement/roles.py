"""Each context's code runs under a role of its own, so that PostgreSQL refuses it another context's
tables, whoever wrote the query and however: with `OUTBOX_CONTEXTS`, each listed app's tables are in
a schema of its own (made by `migrate`: outbox.placement.grants), and its role may use that schema
and its own rows of the kernel's tables, nothing else.

A handler runs under its context's role (`enter` at dispatch), a request under the role
`OUTBOX_CONTEXT_URLS` names for its path (the `context_roles` middleware), code that crosses
contexts on purpose under `acting_as`; operators (the admin, the console, the relay, every command)
as the project's own role, which owns every schema. On a direct connection the role is the
session's, set only when it changes; through a transaction pooler (`OUTBOX_TRANSACTION_POOLER`) a
session's setting would follow the server session to another client, so it is set for each
transaction (`SET LOCAL ROLE`), a statement outside one becoming one.
"""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from contextvars import ContextVar

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connection, connections, transaction
from django.db.backends.signals import connection_created
from psycopg.pq import TransactionStatus

from outbox.core.subscriptions import context_of, subscribers
from outbox.core.working_database import kernel_databases
from outbox.placement.databases import database_of

OPERATOR = None  # the role the project connects as: the owner of every schema
_UNKNOWN = object()  # a session whose role is being set
_IDLE = TransactionStatus.IDLE


def enabled(conn=None) -> bool:
    return bool(settings.OUTBOX_CONTEXTS) and (conn or connection).vendor == "postgresql"


def role_of(context: str | None) -> str | None:
    """The role `context`'s code runs under; None for the operator (or a context not listed)."""
    if context is None or context not in settings.OUTBOX_CONTEXTS:
        return OPERATOR
    return context_role(context)


def context_role(label: str) -> str:
    """The role of a context `OUTBOX_CONTEXTS` lists."""
    return f"{settings.OUTBOX_CONTEXT_ROLE_PREFIX}{label}"


def _runs_as(context: str | None) -> str | None:
    """The role set on `default`'s connection for `context`'s code: the operator's for a context on a
    database of its own, which is alone there and touches nothing of `default`'s (no SET ROLE)."""
    return role_of(context) if database_of(context) == DEFAULT_DB_ALIAS else OPERATOR


def search_path() -> str:
    schemas = ["public", settings.OUTBOX_SCHEMA, *settings.OUTBOX_CONTEXTS]
    return ", ".join(connection.ops.quote_name(s) for s in schemas)


def _set_role(cursor, role: str | None, *, local: bool) -> None:
    quote = connection.ops.quote_name
    if role is None:
        cursor.execute("SET LOCAL ROLE NONE" if local else "RESET ROLE")
    else:
        cursor.execute(f"SET {'LOCAL ' if local else ''}ROLE {quote(role)}")


def _session_role(conn) -> str | None:
    """The role this connection's session was last set to by `enter` (the operator on a new one).
    Kept on the psycopg connection itself, not Django's wrapper: a pool hands a thread a different
    one at each checkout, with whatever role its last user left it."""
    return getattr(conn.connection, "_outbox_role", OPERATOR)


# The role this thread's code is to run under: set by `enter`, applied to the connection at once
# if it is open, else by `set_search_path_and_role` when the thread next connects or checks one
# out of a pool. So a database that went away fails the first query (where the API answers 503),
# not the middleware, and a reconnection comes back under the role, not the operator's.
_wanted: ContextVar[str | None] = ContextVar("outbox_context_role", default=OPERATOR)
# Inside an `acting_as` block begun outside a transaction: through a pooler, each transaction the
# block begins is given `_wanted` (_per_transaction); a transaction begun before it is not.
_scoped: ContextVar[bool] = ContextVar("outbox_context_role_scoped", default=False)


def enter(context: str | None) -> str | None:
    """From here on this thread's code acts as `context` (None: the operator), for the session,
    set only when it changes; through a pooler `acting_as` sets it per transaction instead.
    Returns the role to give `leave` to go back."""
    before = _wanted.get()
    _wanted.set(_runs_as(context))
    conn = connections["default"]
    if conn.connection is not None and not conn.in_atomic_block and _per_session(conn):
        with suppress(DatabaseError):  # closed: the first query connects again, under the role, or fails there
            _apply(conn)
    return before


def leave(before: str | None, *, at_checkout: bool = False) -> None:
    """Back to the role `enter` found. With `at_checkout` (a request's) a pooled connection goes back to the pool with
    its role, as Django would return it when the request ends: the next checkout applies what its user wants, so
    consecutive requests of one context pay nothing, and one made in-process leaves no role behind."""
    _wanted.set(before)
    conn = connections["default"]
    if at_checkout and getattr(conn, "pool", None) and not conn.in_atomic_block:
        conn.close()  # back to the pool now, as Django would at the request's end (even in-process)
        return
    if conn.connection is not None and not conn.in_atomic_block and _per_session(conn):
        with suppress(DatabaseError):  # the connection went meanwhile (closed): a new one starts as the operator
            _apply(conn)


def _per_session(conn) -> bool:
    return enabled(conn) and not settings.OUTBOX_TRANSACTION_POOLER


def _apply(conn) -> None:
    role = _wanted.get()
    if _session_role(conn) == role:
        return
    # Unknown until PostgreSQL has answered: should a time limit interrupt this (Dramatiq raises it
    # in the thread), the next _apply sets the role again rather than trust a guess.
    conn.connection._outbox_role = _UNKNOWN
    try:
        with conn.cursor() as cursor:
            _set_role(cursor, role, local=False)
    except DatabaseError:  # the connection is gone (a restart, a failover): the next one gets the role
        conn.close()
        raise
    conn.connection._outbox_role = role


@contextmanager
def acting_as(context: str | None) -> Iterator[None]:
    """Run the block as `context` (None: the operator), then as before. Outside a transaction the session's role
    changes and changes back (through a pooler, each transaction's); inside one, the transaction's (SET LOCAL),
    unless it acts as `context` already, which costs nothing."""
    conn = connections["default"]
    if not enabled(conn):
        yield
        return
    if not conn.in_atomic_block:
        before = enter(context)
        scoped = _scoped.set(True)
        try:
            if settings.OUTBOX_TRANSACTION_POOLER:  # each transaction the block begins is given the role
                with conn.execute_wrapper(_per_transaction):
                    yield
            else:
                yield
        finally:
            _scoped.reset(scoped)
            leave(before)
        return
    role = _runs_as(context)
    local_before = getattr(conn, "_outbox_local_role", None)
    # What the transaction acts as now: a SET LOCAL of an enclosing block, or through a pooler
    # what _per_transaction gave it (what the code around wants), or the session's role.
    if local_before is not None:
        current = local_before[0]
    elif settings.OUTBOX_TRANSACTION_POOLER and _scoped.get():
        current = _wanted.get()
        give_transaction_its_role(conn)  # before this block's SET LOCAL, should nothing have run yet
    else:
        current = _session_role(conn)
    if current == role:
        yield
        return
    with conn.cursor() as cursor:
        _set_role(cursor, role, local=True)
    conn._outbox_local_role = (role,)  # type: ignore[attr-defined]  # the role this block set, on its connection
    try:
        yield
    finally:
        conn._outbox_local_role = local_before  # type: ignore[attr-defined]
        if not conn.needs_rollback and not _aborted(conn):
            with conn.cursor() as cursor:
                _set_role(cursor, current, local=True)


def each_transaction_acting_as(context: str | None):
    """Through a pooler, `acting_as(context)`: each transaction the block begins, and each statement outside one (an
    on_commit callback's), runs as `context`, as on a direct connection, where `enter` set the session's role.
    On a direct connection nothing: its session keeps the role for the thread's next message."""
    if settings.OUTBOX_TRANSACTION_POOLER and enabled(connections["default"]):
        return acting_as(context)
    return nullcontext()


def _per_transaction(execute, sql, params, many, context):
    """An execute_wrapper, through a pooler: a transaction this thread begins is first given the role it wants (`SET
    LOCAL ROLE`), and a statement outside any transaction becomes one, to run under the role too (BEGIN, SET LOCAL,
    it, COMMIT). A transaction begun before the block (a test's) is left as it is: its role is its own business."""
    conn = context["connection"]
    if _wanted.get() is OPERATOR:
        return execute(sql, params, many, context)
    if not conn.in_atomic_block:
        with transaction.atomic(using=conn.alias):
            return _per_transaction(execute, sql, params, many, context)
    give_transaction_its_role(conn)
    return execute(sql, params, many, context)


def give_transaction_its_role(conn) -> None:
    """Through a pooler, inside `acting_as`: a transaction nothing has run in yet is given the role
    its thread wants, first (`SET LOCAL ROLE`). For a statement run below Django's cursors
    (publish()'s insert), which no execute_wrapper sees."""
    role = _wanted.get()
    if (
        _scoped.get()
        and role is not OPERATOR
        and settings.OUTBOX_TRANSACTION_POOLER
        and enabled(conn)
        and conn.in_atomic_block
        and conn.connection.info.transaction_status == _IDLE
    ):
        conn.connection.execute(f"SET LOCAL ROLE {conn.ops.quote_name(role)}")


def _aborted(conn) -> bool:
    return conn.connection is not None and conn.connection.info.transaction_status == TransactionStatus.INERROR


def set_search_path_and_role(sender, connection, **kwargs) -> None:
    """On connection_created (a new connection, or a checkout from a pool): every schema on the search path, so that
    the models' unqualified tables are found wherever their context's schema is; then the role this thread wants."""
    # Not through a pooler: its server sessions have the database's search path, and a SET would follow one to
    # another client.
    if not _per_session(connection) or connection.alias not in kernel_databases():
        return  # another alias (a replica, a report's database): none of the contexts' tables
    # The database's own setting (own_schemas) gives new sessions the path; this covers one opened before, or a role
    # that may not ALTER DATABASE, once for each psycopg connection.
    if not getattr(connection.connection, "_outbox_search_path", False):
        with connection.cursor() as cursor:
            cursor.execute(f"SET search_path TO {search_path()}")
        connection.connection._outbox_search_path = True
    if connection.alias == "default":  # a context on a database of its own is alone there: no role needed
        _apply(connection)


connection_created.connect(set_search_path_and_role, dispatch_uid="outbox.placement.roles.search_path")


def context_roles(get_response):
    """Middleware: a request runs under the role of the context `OUTBOX_CONTEXT_URLS` names for the longest prefix of
    its path, anything else under the operator's (the admin, health, metrics). Nothing is asked of the database
    here: one that went away fails the view's first query, where the API answers 503."""
    prefixes = sorted(settings.OUTBOX_CONTEXT_URLS.items(), key=lambda item: -len(item[0]))

    def middleware(request):
        context = next((ctx for prefix, ctx in prefixes if request.path_info.startswith(prefix)), None)
        if context is None or not enabled():
            return get_response(request)
        if settings.OUTBOX_TRANSACTION_POOLER:
            with acting_as(context):
                return get_response(request)
        before = enter(context)
        try:
            return get_response(request)
        finally:
            leave(before, at_checkout=True)  # Django returns a pooled connection when the request ends

    return middleware


@checks.register()
def contexts_are_apps_and_own_their_handlers(app_configs=None, **kwargs):
    """Each listed context must be an installed app (its tables are found through it); and a
    subscriber whose handlers live outside every listed context runs as the project's own role,
    which owns every table: said, so that it is a choice."""
    if not settings.OUTBOX_CONTEXTS:
        return []
    found = [
        checks.Error(
            f"OUTBOX_CONTEXTS lists {label!r}, which is not an installed app's label",
            hint="list the app labels of the contexts (INSTALLED_APPS), or take it out",
            id="outbox.E003",
        )
        for label in settings.OUTBOX_CONTEXTS
        if label not in {config.label for config in apps.get_app_configs()}
    ]
    for subscriber in subscribers():
        context = context_of(subscriber)
        if context not in settings.OUTBOX_CONTEXTS:
            found.append(
                checks.Warning(
                    f"subscriber {subscriber!r} has its handlers in {context!r}, not in OUTBOX_CONTEXTS: "
                    "they run as the project's own role, which may use every context's tables",
                    hint=f"add {context!r} to OUTBOX_CONTEXTS, or move the handlers into a context's app",
                    id="outbox.W003",
                )
            )
    return found
