"""The PostgreSQL rigs (harness/postgres_servers.py) do what tests of production's topology rely on.

A primary with a streaming replica: rows reach the replica, a crashed primary's replica is
promoted and the multi-host URL (target_session_attrs=read-write) finds it. PgBouncer in
transaction mode: a client's transactions go to whichever backend is free, so session state (SET,
`options` in the URL) does not follow the client, while transaction-scoped state (advisory xact
locks) does. And nothing either rig starts outlives it. A pair starts in ~1 s on this machine;
the session fixtures (`postgres_pair`, `pgbouncer` in tests/conftest.py) are shared, and the
tests that stop a server start a pair of their own. No test here uses Django's database.
"""

import contextlib
import random
import socket
import uuid
from pathlib import Path

import psycopg
import pytest

from harness.pgbouncer import PGBOUNCER, PgBouncer
from harness.postgres_servers import PostgresPrimaryWithReplica
from harness.rig_processes import HOST, port_open, processes_in_group
from tests.servers import POSTGRES_RIG
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    *POSTGRES_RIG,
    pytest.mark.skipif(not PGBOUNCER.exists(), reason=f"no PgBouncer at {PGBOUNCER}"),
]


def scalar(conn: psycopg.Connection, query: str, params=None):
    return conn.execute(query, params).fetchone()[0]


def processes_mentioning(path: Path) -> list[int]:
    """Live processes whose command line names `path` (a postmaster's -D, pgbouncer's ini)."""
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and str(path).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
    return found


def test_a_row_written_on_the_primary_reaches_the_read_only_replica(postgres_pair):
    pair = postgres_pair
    database = f"rig_{uuid.uuid4().hex[:12]}"
    pair.create_database(database)
    with pair.connect("primary", database) as primary:
        primary.execute("CREATE TABLE notes (note text)")
        primary.execute("INSERT INTO notes VALUES ('from the primary')")
        standby = primary.execute("SELECT application_name, state FROM pg_stat_replication").fetchall()
    assert standby == [(pair.application_name, "streaming")]

    def replicated():
        not_yet = contextlib.suppress(psycopg.OperationalError, psycopg.errors.UndefinedTable)  # not replayed yet
        with not_yet, pair.connect("replica", database) as replica:
            return replica.execute("SELECT note FROM notes").fetchall()

    assert wait_until(replicated, timeout=10, what="the row on the replica") == [("from the primary",)]
    with pair.connect("replica", database) as replica:
        assert scalar(replica, "SELECT pg_is_in_recovery()") is True
        with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            replica.execute("INSERT INTO notes VALUES ('from the replica')")

    # target_session_attrs=read-write passes over a standby listed first.
    replica_first = pair.url().replace(
        f"{HOST}:{pair.primary_port},{HOST}:{pair.replica_port}",
        f"{HOST}:{pair.replica_port},{HOST}:{pair.primary_port}",
    )
    for url in (pair.url(database), replica_first.replace("/postgres?", f"/{database}?")):
        with psycopg.connect(url, connect_timeout=3) as conn:
            assert conn.info.port == pair.primary_port and scalar(conn, "SELECT count(*) FROM notes") == 1, url
    assert pair.which_is_primary() == "primary" and pair.primary_answers()


def test_after_a_primary_crash_the_promoted_replica_takes_writes():
    with PostgresPrimaryWithReplica(synchronous=True) as pair:
        with pair.connect("primary") as primary:
            assert primary.execute("SELECT sync_state FROM pg_stat_replication").fetchall() == [("sync",)]
            primary.execute("CREATE TABLE acknowledged (note text)")
            primary.execute("INSERT INTO acknowledged VALUES ('committed before the crash')")

        stopped = pair.stop_primary()  # immediate: no shutdown checkpoint, clients cut off
        assert not pair.primary_answers() and pair.which_is_primary() is None
        with pytest.raises(psycopg.OperationalError):  # the standby alone is not read-write
            psycopg.connect(pair.url(), connect_timeout=3).close()

        promoted = pair.promote()
        assert pair.which_is_primary() == "replica"
        with psycopg.connect(pair.url(), connect_timeout=3, autocommit=True) as conn:
            assert conn.info.port == pair.replica_port
            assert scalar(conn, "SELECT pg_is_in_recovery()") is False
            conn.execute("INSERT INTO acknowledged VALUES ('written after the promotion')")  # no wait for a standby
            notes = [note for (note,) in conn.execute("SELECT note FROM acknowledged ORDER BY note")]
        assert notes == ["committed before the crash", "written after the promotion"]
        print(
            f"\npair started in {pair.timings['start']:.2f} s (primary {pair.timings['primary']:.2f} s), "
            f"stop_primary {stopped:.3f} s, promote {promoted:.3f} s"
        )


def connect_through(bouncer: PgBouncer, query: str = "", dbname: str = "postgres") -> psycopg.Connection:
    # No server-side prepared statements: PgBouncer 1.18 cannot keep them across transactions.
    return psycopg.connect(bouncer.url(dbname) + query, autocommit=True, prepare_threshold=None, connect_timeout=3)


@contextlib.contextmanager
def a_client_holding(bouncer: PgBouncer, backend: int, tries: int = 4):
    """A client of `bouncer` in an open transaction on server backend `backend`: clients open
    transactions (holding them) until one is given that backend, since a free server goes to
    whichever client asks next; the connection of the one that got it."""
    with contextlib.ExitStack() as stack:
        for _ in range(tries):
            conn = stack.enter_context(connect_through(bouncer))
            stack.enter_context(conn.transaction())
            if scalar(conn, "SELECT pg_backend_pid()") == backend:
                yield conn
                return
        pytest.fail(f"none of {tries} other clients was given backend {backend}: it stayed with its client")


def test_transaction_mode_serves_one_clients_transactions_on_different_backends(pgbouncer):
    assert pgbouncer.admin("SHOW CONFIG") and pgbouncer.pool_mode == "transaction"
    with connect_through(pgbouncer) as client:
        first = scalar(client, "SELECT pg_backend_pid()")
        with a_client_holding(pgbouncer, first):  # its transaction is on `first`, still open
            second = scalar(client, "SELECT pg_backend_pid()")
        assert second != first
    pools = [row for row in pgbouncer.admin("SHOW POOLS") if row["database"] == "postgres"]
    assert pools and pools[0]["pool_mode"] == "transaction" and int(pools[0]["sv_idle"]) + int(pools[0]["sv_used"]) >= 2


def test_a_session_set_stays_with_the_backend_not_the_client(pgbouncer):
    try:
        with connect_through(pgbouncer) as client:
            backend, _ = client.execute(
                "SELECT pg_backend_pid(), set_config('statement_timeout', '4321ms', false)"  # as SET does
            ).fetchone()
            with a_client_holding(pgbouncer, backend) as other:
                assert scalar(other, "SHOW statement_timeout") == "4321ms"  # another client inherits it
                assert scalar(client, "SHOW statement_timeout") != "4321ms"  # its own client lost it
    finally:
        pgbouncer.close_server_connections("postgres")  # no backend keeps the setting for the next test
    assert not pgbouncer.server_connections("postgres")


def test_options_in_the_url_are_dropped_not_applied(pgbouncer):
    # ignore_startup_parameters=options: accepted (without it: "unsupported startup parameter"), not sent.
    with connect_through(pgbouncer, "?options=-c%20statement_timeout%3D4321") as client:
        assert scalar(client, "SHOW statement_timeout") != "4321ms"


def test_an_advisory_xact_lock_holds_for_the_clients_whole_transaction(pgbouncer):
    key = random.randrange(1, 2**31)
    with connect_through(pgbouncer) as holder, connect_through(pgbouncer) as rival:
        with holder.transaction():
            scalar(holder, "SELECT pg_advisory_xact_lock(%s)", (key,))
            for _ in range(3):  # statements later, the lock is still on the holder's backend
                with rival.transaction():
                    assert scalar(rival, "SELECT pg_try_advisory_xact_lock(%s)", (key,)) is False
                locks = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s AND pid = %s"
                assert scalar(holder, locks, (key, scalar(holder, "SELECT pg_backend_pid()"))) == 1
        with rival.transaction():  # released at the holder's commit
            assert scalar(rival, "SELECT pg_try_advisory_xact_lock(%s)", (key,)) is True


def test_nothing_outlives_the_rigs():
    with (
        PostgresPrimaryWithReplica() as pair,
        PgBouncer(upstream_port=pair.primary_port, pool_mode="session") as bouncer,
    ):
        pair.create_database("dropped")
        with connect_through(bouncer, dbname="dropped") as conn:
            assert conn.info.port == bouncer.port and scalar(conn, "SELECT inet_server_port()") == pair.primary_port
        assert bouncer.server_connections("dropped")  # idle, kept for the next client: DROP DATABASE would fail
        bouncer.close_server_connections("dropped")
        with pair.connect() as conn:
            conn.execute("DROP DATABASE dropped")
        groups = [pair.pid("primary"), pair.pid("replica"), bouncer.pid()]
        servers = {role: pair.group_pids(role) for role in pair.ROLES}
        commands = {command_of(pid) for pids in servers.values() for pid in pids} - {None}  # a backend may end
        assert commands == {"postgres"} and len(servers["primary"]) >= 4, servers  # postmaster and its children
        assert bouncer.group_pids() == [bouncer.pid()]
        ports, dirs = [pair.primary_port, pair.replica_port, bouncer.port], [pair.base_dir, bouncer.base_dir]
        assert all(map(port_open, ports)) and all(path.is_dir() for path in dirs)
        assert {5432, 5672, 6432}.isdisjoint(ports)
    assert [group for group in groups if processes_in_group(group)] == []
    assert pair.group_pids("primary") == pair.group_pids("replica") == bouncer.group_pids() == []
    assert not any(map(port_open, ports))
    assert not any(path.exists() or processes_mentioning(path) for path in dirs)


def command_of(pid: int) -> str | None:
    """The process's command name, or None once it has ended (a short-lived backend)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except FileNotFoundError:
        return None


def test_a_failed_start_raises_with_the_log_and_leaves_nothing_behind():
    pair = PostgresPrimaryWithReplica()
    with socket.socket() as blocker:  # bound, not listening: the replica's bind fails, not the rig's check
        blocker.bind((HOST, pair.replica_port))
        with pytest.raises(RuntimeError, match="could not bind") as failure:
            pair.start()
    assert "replica.log" in str(failure.value)
    assert pair.group_pids("primary") == [] and not port_open(pair.primary_port)
    assert not pair.base_dir.exists() and not processes_mentioning(pair.base_dir)
