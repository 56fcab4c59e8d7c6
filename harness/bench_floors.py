"""References of `manage.py bench` that measure the database alone, in the same run as the
figures judged by them: what publish() would cost if it were only its statement, and how many
one-row transactions PostgreSQL commits a second (the ceiling of handler executions)."""

import time
import uuid

import psycopg
from django.db import connection
from django.utils import timezone

from harness.bench import a_delivery_requested
from outbox.core.publishing import numbered_insert, outbox_row


def bare_psycopg_publish(count: int, *, per_transaction: int = 500) -> float:
    """Seconds to send publish()'s own statement for `count` delivery.requested events from bare
    psycopg on a connection of its own, prepared, `per_transaction` a commit: the rows and their
    parameters are built beforehand, so what is timed is the database's part alone."""
    now = timezone.now()
    statements = []
    for _ in range(count):
        event = a_delivery_requested()
        row = outbox_row(event, stream=f"delivery:{event.delivery_id}", correlation_id=event.delivery_id, now=now)
        statements.append(numbered_insert([row], connection=connection, due_now=[True]))
    with psycopg.connect(**_own_connection_params()) as bare:
        began = time.perf_counter()
        for start in range(0, count, per_transaction):
            with bare.transaction(), bare.cursor() as cursor:
                for sql, params in statements[start : start + per_transaction]:
                    cursor.execute(sql, params, prepare=True)
                    cursor.fetchone()
        return time.perf_counter() - began


def one_row_commits(*, seconds: float = 3.0) -> float:
    """One-row INSERT transactions a second on one connection, as a handler commits them (the
    outbox's own table is not touched: a table of its own, dropped at the end)."""
    table = f"bench_commits_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**_own_connection_params(), autocommit=True) as bare:
        bare.execute(f"CREATE TABLE {table} (id bigserial PRIMARY KEY, payload text)")
        try:
            commits, deadline = 0, time.perf_counter() + seconds
            began = time.perf_counter()
            while time.perf_counter() < deadline:
                bare.execute(f"INSERT INTO {table} (payload) VALUES (%s)", ["x" * 200], prepare=True)
                commits += 1
            return commits / (time.perf_counter() - began)
        finally:
            bare.execute(f"DROP TABLE {table}")


def _own_connection_params() -> dict:
    """The scratch database's parameters, without what Django adds for its own connections."""
    params = connection.get_connection_params()
    return {k: v for k, v in params.items() if k not in ("cursor_factory", "context", "server_side_binding")}
