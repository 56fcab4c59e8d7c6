"""A fresh deployment behind PgBouncer in transaction mode, as docs/deployment.md tells it and with
nothing more: an empty database, `migrate`, `seed_fleet`, `create_customer`, then web, relay and
workers, and a delivery delivered. PgBouncer already holds server sessions to the database when
`migrate` runs (processes started before it, a readiness probe): sessions that began before the
database's search_path named the contexts' schemas, and that any client may be handed next."""

import threading
import uuid

import psycopg
import pytest
from django.conf import settings

from delivery_project import database_url
from tests.e2e.test_context_database import System
from tests.factories import BASE
from tests.processes import manage
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.rabbitmq, pytest.mark.slow]
SERVER_SESSIONS = 4


def _at_once(url: str, clients: int, sql: str) -> list:
    """`sql` from `clients` connections, each in a transaction held open until all have run it: so
    PgBouncer gives each a server session of its own, every idle one it holds among them."""
    answers, ran = [None] * clients, threading.Barrier(clients, timeout=30)

    def client(number: int) -> None:
        with psycopg.connect(url, connect_timeout=10) as conn:
            answers[number] = conn.execute(sql).fetchone()[0]
            ran.wait()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return answers


@pytest.fixture
def empty_database(pgbouncer):
    """An empty database of the test's own on the run's server; dropped at the end, PgBouncer's
    server sessions to it closed first."""
    name = f"fresh_{uuid.uuid4().hex[:10]}"
    server = database_url.parse(settings.DATABASE_URL)
    admin = database_url.url_of(server, NAME="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        pgbouncer.close_server_connections(name)
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_fresh_deployment_behind_pgbouncer_delivers(pgbouncer, empty_database, env, tmp_path):
    server = database_url.parse(settings.DATABASE_URL)
    through = database_url.url_of(server, HOST="127.0.0.1", PORT=str(pgbouncer.port), NAME=empty_database)
    direct = database_url.url_of(server, NAME=empty_database)
    deployed = {
        **env,
        "DATABASE_URL": through,
        "DATABASE_TRANSACTION_POOLER": "1",
        "OUTBOX_LISTEN_DATABASE_URL": direct,
    }
    # Server sessions PgBouncer opened before migrate: idle in its pool, with the database's old search_path.
    assert _at_once(through, SERVER_SESSIONS, "SELECT 1") == [1] * SERVER_SESSIONS
    assert len(pgbouncer.server_connections(empty_database)) >= SERVER_SESSIONS

    said = manage(deployed, "migrate", "--noinput")
    assert "ended" in said and "sessions that began before the search_path was set" in said, said
    # Tables this migrate made are said to be new, in one line, not "moved" out of public one by one.
    assert "moved public." not in said, said
    assert "put the " in said and " new tables into their schemas: deliveries " in said, said

    # Every server session PgBouncer now holds finds the contexts' tables, whichever client it is given to.
    found = _at_once(through, SERVER_SESSIONS + 2, "SELECT to_regclass('drones_drone') IS NOT NULL")
    assert found == [True] * (SERVER_SESSIONS + 2)
    manage(deployed, "seed_fleet", "2", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
    token = manage(deployed, "create_customer", "alice").splitlines()[-1]
    with System(deployed, tmp_path) as system:
        system.start()
        [delivery_id] = system.request(token, 1)

        def status() -> str:
            with psycopg.connect(direct) as conn:
                sql = "SELECT status FROM deliveries_delivery WHERE id = %s"
                return conn.execute(sql, [uuid.UUID(delivery_id)]).fetchone()[0]

        wait_until(lambda: status() == "delivered", timeout=90, what="the delivery to be delivered")
        system.stop()
    with psycopg.connect(direct) as conn:
        assert conn.execute("SELECT count(*) FROM outbox_deadletter").fetchone()[0] == 0
