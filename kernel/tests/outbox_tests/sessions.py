"""PostgreSQL sessions as a test sees them: whose pid is whose, who waits on whom, a connection of its own."""

from django.db import connection, connections


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def blocked_by(waiter: int, holder: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [holder, waiter])
        return cursor.fetchone()[0]


def connection_params(alias: str = "default") -> dict:
    """This process's connection parameters, for a psycopg connection of its own."""
    params = connections[alias].get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    return params
