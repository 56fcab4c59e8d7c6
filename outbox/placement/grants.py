"""What `migrate` makes of `OUTBOX_CONTEXTS` on PostgreSQL: each context's schema and role, the
grants of both (a role's own schema whole; of the kernel's tables, what the kernel does there for
it), the kernel's schema, and the database's search_path, which a pooler's old server sessions do
not have. Which role runs what, at run time, is outbox.placement.roles'.

Why after `migrate` rather than in migrations: `db_table` stays unqualified, so the models, their
migrations and SQLite are the same everywhere; a table Django creates lands in `public`, first in
every search_path, and `post_migrate` moves each context's tables into its schema (with their
indexes, constraints and sequences; the rows do not move, so nothing in flight is touched).
"""

import time

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction

from outbox.core.working_database import kernel_databases
from outbox.models import DeadLetter, InboxMessage, OutboxMessage, Stream, StreamCursor
from outbox.placement.databases import database_of
from outbox.placement.roles import context_role, enabled, search_path
from outbox.placement.rows import out_of_date, own_rows


def own_schemas(*, using: str = "default") -> list[str]:
    """Give each context on this database its schema, every context its role, and the kernel its schema: create what
    is missing, move each app's tables into its schema, and grant each role here its own schema and the kernel's
    tables. Run after every `migrate`
    (post_migrate), so that a table a later migration adds joins its schema; what it did, one line each."""
    conn = connections[using]
    if not enabled(conn):
        return []
    existed = _tables_before_migrate.pop(using, None)
    quote = conn.ops.quote_name
    # Only the contexts whose tables are on this database get a schema and grants here; every
    # context's role is made (roles belong to the cluster, and the row policies name them all).
    here = [label for label in settings.OUTBOX_CONTEXTS if database_of(label) == using]
    home = _homes(using)
    roles = [context_role(label) for label in settings.OUTBOX_CONTEXTS]
    kernel = settings.OUTBOX_SCHEMA
    with transaction.atomic(using=using), conn.cursor() as cursor:
        misplaced = [(table, schema) for table, schema in _schemas_of(cursor, home) if home[table] != schema]
        cursor.execute("SELECT count(*) FROM pg_roles WHERE rolname = ANY(%s)", [roles])
        if (
            not misplaced
            and cursor.fetchone()[0] == len(roles)
            and _kernel_grants_in_place(cursor, [context_role(label) for label in here])
        ):
            return []  # all in place already: one catalog query
        done = []
        for schema in [*here, kernel]:
            cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {quote(schema)}")
            cursor.execute(f"REVOKE ALL ON SCHEMA {quote(schema)} FROM PUBLIC")
        # First in every search_path: a role that could create a table there could shadow another
        # context's (PostgreSQL 15 revokes it by default; 14 grants it to everyone).
        cursor.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        placed: dict[str, int] = {}
        for table, schema in misplaced:  # the rows stay where they are: SET SCHEMA changes the catalog only
            cursor.execute(f"ALTER TABLE {quote(schema)}.{quote(table)} SET SCHEMA {quote(home[table])}")
            if existed is not None and table not in existed:  # made by this migrate, in public first
                placed[home[table]] = placed.get(home[table], 0) + 1
            else:
                done.append(f"moved {schema}.{table} into {home[table]}")
        if placed:
            each = ", ".join(f"{schema} {count}" for schema, count in sorted(placed.items()))
            done.insert(0, f"put the {sum(placed.values())} new tables into their schemas: {each}")
        superuser, _ = _set_search_path(cursor, conn)
        for label, role in zip(settings.OUTBOX_CONTEXTS, roles, strict=True):
            _create_role(cursor, role, superuser=superuser)
            if label not in here:
                continue
            own, to = quote(label), quote(role)
            for schema in (own, quote(kernel)):
                cursor.execute(f"GRANT USAGE ON SCHEMA {schema} TO {to}")
            cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {own} TO {to}")
            cursor.execute(f"GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {own} TO {to}")
            cursor.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA {quote(kernel)} FROM {to}")
            cursor.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA {quote(kernel)} FROM {to}")
            for model, privileges in KERNEL_PRIVILEGES.items():
                table = f"{quote(kernel)}.{quote(model._meta.db_table)}"
                cursor.execute(f"GRANT {', '.join(privileges)} ON {table} TO {to}")
            cursor.execute(f"GRANT USAGE ON ALL SEQUENCES IN SCHEMA {quote(kernel)} TO {to}")
            done.append(f"granted {role} its schema {label} and its part of the kernel's {kernel}")
    return done


# Per database alias, the tables of the contexts and the kernel that existed when its `migrate` began
# (pre_migrate): the rest are new, and own_schemas says so rather than that it moved them.
_tables_before_migrate: dict[str, set[str]] = {}


def _homes(using: str) -> dict[str, str]:
    """Each table of the contexts on this database and of the kernel -> the schema it belongs in."""
    here = [label for label in settings.OUTBOX_CONTEXTS if database_of(label) == using]
    owners = {label: label for label in here} | {"outbox": settings.OUTBOX_SCHEMA}
    return {table: schema for label, schema in owners.items() for table in tables_of(apps.get_app_config(label))}


def _schemas_of(cursor, home: dict[str, str]) -> list[tuple[str, str]]:
    """(table, schema) of each table of `home` in public or in one of its schemas."""
    cursor.execute(
        "SELECT c.relname, n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE c.relname = ANY(%s) AND c.relkind IN ('r', 'p') AND n.nspname = ANY(%s)",
        [list(home), ["public", *set(home.values())]],
    )
    return cursor.fetchall()


# What a context's role may do with each of the kernel's tables: what the kernel does there for its
# code, on its own rows (outbox.placement.rows). Heartbeats and the kernel's locks are the
# operator's alone, and of the kernel's sequences a role may only take the next number (USAGE:
# nextval, never setval).
KERNEL_PRIVILEGES = {
    OutboxMessage: ("SELECT", "INSERT", "DELETE"),  # publish(), withdraw_scheduled(): never a relayed row's state
    Stream: ("SELECT", "INSERT", "UPDATE"),  # numbering its events: a trigger refuses a number going back
    InboxMessage: ("SELECT", "INSERT", "UPDATE", "DELETE"),
    StreamCursor: ("SELECT", "INSERT", "UPDATE", "DELETE"),
    DeadLetter: ("SELECT", "INSERT", "UPDATE", "DELETE"),
}


def _kernel_grants_in_place(cursor, roles: list[str]) -> bool:
    """Whether the context roles hold on the kernel's tables and sequences what KERNEL_PRIVILEGES
    says, and nothing more: one catalog query."""
    cursor.execute(
        "SELECT c.relname, c.relkind, r.rolname, a.privilege_type FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "LEFT JOIN LATERAL aclexplode(c.relacl) a ON true LEFT JOIN pg_roles r ON r.oid = a.grantee "
        "WHERE n.nspname = %s AND c.relkind IN ('r', 'p', 'S')",
        [settings.OUTBOX_SCHEMA],
    )
    found = cursor.fetchall()
    granted = {(table, role, privilege) for table, _, role, privilege in found if role in roles}
    sequences = {table for table, kind, _, _ in found if kind == "S"}
    wanted = {
        (model._meta.db_table, role, privilege)
        for model, privileges in KERNEL_PRIVILEGES.items()
        for privilege in privileges
        for role in roles
    } | {(sequence, role, "USAGE") for sequence in sequences for role in roles}
    return granted == wanted


def _set_search_path(cursor, conn) -> tuple[bool, bool]:
    """Set the database's search_path, for every later session (psql, a raw psycopg connection, a pooler's server
    sessions), if this role may, and this session's at once. Returns whether this role is a superuser, and whether
    the database's search_path changed."""
    cursor.execute(
        "SELECT rolsuper, pg_get_userbyid(datdba) = current_user, "
        "(SELECT setconfig FROM pg_db_role_setting WHERE setdatabase = d.oid AND setrole = 0) "
        "FROM pg_roles, pg_database d WHERE rolname = current_user AND datname = current_database()"
    )
    superuser, owns_database, before = cursor.fetchone()
    changed = False
    if superuser or owns_database:
        cursor.execute(
            f"ALTER DATABASE {conn.ops.quote_name(conn.settings_dict['NAME'])} SET search_path TO {search_path()}"
        )
        cursor.execute(
            "SELECT setconfig FROM pg_db_role_setting WHERE setrole = 0 "
            "AND setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        changed = cursor.fetchone()[0] != before
    # Through a pooler this server session keeps it for whichever client is next: the path every client has, or will.
    cursor.execute(f"SET search_path TO {search_path()}")
    return superuser, changed


def before_migrate(sender, using="default", verbosity=1, stdout=None, **kwargs) -> None:
    """pre_migrate: the database's search_path set before any table is made, so that every session
    opened from here on finds the tables wherever migrate and own_schemas put them; through a
    pooler, its server sessions opened before are ended, so that none hands a client the old one."""
    conn = connections[using]
    if not enabled(conn):
        return
    with transaction.atomic(using=using), conn.cursor() as cursor:
        _tables_before_migrate[using] = {table for table, _ in _schemas_of(cursor, _homes(using))}
        _, changed = _set_search_path(cursor, conn)
    if changed and settings.OUTBOX_TRANSACTION_POOLER:
        said = end_sessions_begun_before_the_path(using=using)
        if verbosity and stdout is not None and said:
            stdout.write(f"  {said}\n")


def end_sessions_begun_before_the_path(*, using: str = "default", wait_seconds: float = 10.0) -> str:
    """End this database's sessions of this role that began before its search_path was set: a session keeps the path
    it began with, and a pooler in transaction mode hands one to any client, which would not find the contexts'
    tables. Each is ended when idle, waiting up to `wait_seconds` for those in use; what it did, in a line."""
    conn = connections[using]
    with conn.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        [set_at] = cursor.fetchone()
        ended, deadline = 0, time.monotonic() + wait_seconds
        while True:
            with transaction.atomic(using=using):
                cursor.execute(_END_IDLE_SESSIONS_BEGUN_BEFORE, [set_at])
                done, busy = cursor.fetchone()
            ended += done
            if not busy or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    if busy:
        return (
            f"ended {ended} sessions that began before the search_path was set; {busy} still in use: "
            "have the pooler reconnect (PgBouncer: RECONNECT on its console)"
        )
    return f"ended {ended} sessions that began before the search_path was set" if ended else ""


# Sessions of this role (the one logged in as) on this database, begun before the path was set, other
# than this one: the idle ones ended, the others counted (a client's transaction in progress). An idle one is
# between two transactions of its client, and the pooler opens a new one in its place.
_END_IDLE_SESSIONS_BEGUN_BEFORE = (
    "SELECT count(*) FILTER (WHERE CASE WHEN state = 'idle' THEN pg_terminate_backend(pid) ELSE false END), "
    "count(*) FILTER (WHERE state IS DISTINCT FROM 'idle') "
    "FROM pg_stat_activity WHERE datname = current_database() AND usename = session_user "
    "AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND backend_start < %s"
)


def after_migrate(sender, using="default", verbosity=1, stdout=None, **kwargs) -> None:
    """post_migrate, once per `migrate` (sent for the kernel's app, after every app's migrations)."""
    done = own_schemas(using=using)
    if enabled(connections[using]):  # and each context's rows of the kernel's tables its own
        done += own_rows(using=using)
    if verbosity and stdout is not None:
        for line in done:
            stdout.write(f"  {line}\n")


def tables_of(app_config) -> list[str]:
    """The tables an app's migrations made (no proxy's or unmanaged model's: one table, listed once)."""
    tables = []
    for model in app_config.get_models(include_auto_created=True):
        if model._meta.managed and not model._meta.proxy:
            tables.append(model._meta.db_table)
    return tables


def _create_role(cursor, role: str, *, superuser: bool) -> None:
    """NOLOGIN: nobody connects as it; the project's role sets it (SET ROLE), so must be a member.
    Roles belong to the cluster, not the database: another database (a test run's) may be making
    the same one at this moment."""
    literal = role.replace("'", "''")
    cursor.execute(
        "DO $$ BEGIN "
        f"IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{literal}') "
        f'THEN CREATE ROLE "{role}" NOLOGIN; END IF; '
        "EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$"
    )
    if not superuser:  # the same race for the membership: whoever lost it checks it is there
        member = f"pg_has_role(current_user, '{literal}', 'MEMBER')"
        cursor.execute(
            f'DO $$ BEGIN IF NOT {member} THEN GRANT "{role}" TO CURRENT_USER; END IF; '
            f"EXCEPTION WHEN OTHERS THEN IF NOT {member} THEN RAISE; END IF; END $$"
        )


@checks.register(checks.Tags.database)
def rows_are_as_the_code_declares(app_configs=None, databases=None, **kwargs):
    """`manage.py check --database ALIAS` (and every `migrate`): a subscriber added or taken off since
    the last `migrate` changes which rows its context's role may use, and until `migrate` writes the
    policies again its handlers' inbox rows are refused. A warning, so that `migrate` itself still runs."""
    found = []
    for alias in databases or ():
        if alias not in kernel_databases() or not enabled(connections[alias]):
            continue
        try:
            roles_behind = out_of_date(using=alias)
        except DatabaseError:  # not migrated yet: migrate is what it needs anyway
            continue
        if roles_behind:
            found.append(
                checks.Warning(
                    f"database {alias!r}: the rows {', '.join(roles_behind)} may use of the kernel's tables are not "
                    "what the code declares (a subscriber or an event added or taken off since the last migrate): "
                    "their handlers' inbox rows and events would be refused by row-level security",
                    hint=f"run `manage.py migrate{'' if alias == DEFAULT_DB_ALIAS else f' --database {alias}'}`",
                    id="outbox.W014",
                )
            )
    return found
