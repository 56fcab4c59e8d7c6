"""Each context's own outbox, inbox, cursors and letters on a database it shares: PostgreSQL's
row-level security on the kernel's tables, one policy for each context role and table.

To its role the outbox holds the events it published (`source`) and takes only events of the
types it declares, to the subscribers of that type; the inbox, the letters and the cursors hold its
subscribers' rows. The project's role owns the tables and reads every context's rows (the relay,
the sweep, the console). Each policy keeps its conditions as its comment: `migrate` compares them
with what the contracts and subscriptions now say, in one catalog query, and writes them again
only when they differ. A release that takes a subscriber off an event refuses that event from the
release before it once its `migrate` has run: the guide's upgrades say when to run it.
"""

import json

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import connections, transaction

from outbox.core.contracts import contracts
from outbox.core.subscriptions import context_of, subscribers, subscribers_of
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, StreamCursor
from outbox.placement.roles import context_role


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def published_as(label: str) -> str:
    """The `source` of the events a context publishes: the app's module, as Event.source() names it."""
    return apps.get_app_config(label).name.rsplit(".", 1)[-1]


def policies() -> dict[tuple[str, str], str]:
    """(kernel table, context role) -> the policy's conditions: the rows the role may see (USING),
    and on the outbox the rows it may write (WITH CHECK)."""
    wanted = {}
    for label in settings.OUTBOX_CONTEXTS:
        role = context_role(label)
        source = published_as(label)
        theirs = sorted(s for s in subscribers() if context_of(s) == label)
        names = f"ARRAY[{', '.join(_literal(s) for s in theirs)}]::text[]" if theirs else "'{}'::text[]"
        types = sorted({event.type for event in contracts().values() if event.source() == source})
        # Each of its types to that type's subscribers, in one CASE: another type is NULL, refused.
        to_whom = " ".join(f"WHEN {_literal(t)} THEN {_literal(json.dumps(subscribers_of(t)))}::jsonb" for t in types)
        writes = (
            f"source = {_literal(source)} AND target_subscriber = '' AND jsonb_typeof(recipients) = 'array' "
            f"AND recipients <@ CASE type {to_whom} END"
            if types
            else "false"
        )
        wanted[(OutboxMessage._meta.db_table, role)] = f"USING (source = {_literal(source)}) WITH CHECK ({writes})"
        for model in (InboxMessage, DeadLetter, StreamCursor):
            wanted[(model._meta.db_table, role)] = f"USING (subscriber = ANY ({names}))"
    return wanted


def own_rows(*, using: str = "default") -> list[str]:
    """Turn row-level security on for the kernel's tables with an owner, and give each context role
    its policy on each; what it did, a line per role (nothing when all is in place)."""
    conn = connections[using]
    quote = conn.ops.quote_name
    wanted = policies()
    tables = sorted({table for table, _ in wanted})
    with transaction.atomic(using=using), conn.cursor() as cursor:
        secured, have = _in_place(cursor, tables)
        if secured == set(tables) and all(have.get(key) == condition for key, condition in wanted.items()):
            return []
        written: dict[str, list[str]] = {}
        for table in tables:
            on = f"{quote(settings.OUTBOX_SCHEMA)}.{quote(table)}"
            if table not in secured:
                cursor.execute(f"ALTER TABLE {on} ENABLE ROW LEVEL SECURITY")
            for (of_table, role), condition in wanted.items():
                if of_table != table or have.get((table, role)) == condition:
                    continue
                cursor.execute(f"DROP POLICY IF EXISTS {quote(role)} ON {on}")
                cursor.execute(f"CREATE POLICY {quote(role)} ON {on} TO {quote(role)} {condition}")
                cursor.execute(f"COMMENT ON POLICY {quote(role)} ON {on} IS {_literal(condition)}")
                written.setdefault(role, []).append(table)
    # One line a role (each policy's condition is its comment: psql's `\dp` shows it).
    return [f"{role} may use only its own rows of {', '.join(of)}" for role, of in written.items()]


def out_of_date(*, using: str = "default") -> list[str]:
    """The context roles whose rows of the kernel's tables are not those the code declares: a
    subscriber added or taken off, or an event type, since the last `migrate` wrote them (none
    before the first)."""
    wanted = policies()
    tables = sorted({table for table, _ in wanted})
    with connections[using].cursor() as cursor:
        secured, have = _in_place(cursor, tables)
    if not secured:  # never written (a database before its first migrate): nothing has drifted
        return []
    return sorted(
        {
            role
            for (table, role), condition in wanted.items()
            if table not in secured or have.get((table, role)) != condition
        }
    )


def _in_place(cursor, tables: list[str]) -> tuple[set[str], dict[tuple[str, str], str]]:
    """Which of `tables` have row-level security on, and each policy's condition as its comment says."""
    cursor.execute(
        "SELECT c.relname, p.polname, obj_description(p.oid, 'pg_policy') FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace LEFT JOIN pg_policy p ON p.polrelid = c.oid "
        "WHERE n.nspname = %s AND c.relname = ANY(%s) AND c.relrowsecurity",
        [settings.OUTBOX_SCHEMA, tables],
    )
    found = cursor.fetchall()
    return {table for table, _, _ in found}, {(table, role): condition for table, role, condition in found if role}


@checks.register()
def each_context_publishes_under_its_own_name(app_configs=None, **kwargs):
    """The policy lets a context's role write the events whose `source` is its app's name, as
    `Event.source()` reads it from the module that declares them: an event declared elsewhere
    (`orders/events/v2.py` says "events") would be refused at its first publish()."""
    found = []
    for event in contracts().values():
        app = apps.get_containing_app_config(event.__module__)
        if app is None or app.label not in settings.OUTBOX_CONTEXTS or event.source() == published_as(app.label):
            continue
        found.append(
            checks.Error(
                f"{event.__module__}.{event.__qualname__} is published as {event.source()!r}, but its context "
                f"{app.label!r} may write only events of {published_as(app.label)!r} (row-level security)",
                hint=f"declare {app.label}'s events in {app.name}.events",
                id="outbox.E013",
            )
        )
    return found
