"""The kernel's test fixtures and run rules, a pytest plugin its tests and this project's load.

Fixtures: a broker whose queues are this run's own (emptied around each test, deleted at the end),
a real Dramatiq worker in the test's process, relays in threads, an envelope put straight on a
queue, an outage of the dead-letter table. Rules: a test marked for a server this run was not given
skips, naming the variable; under CI=true any other skip fails the run; slow tests start first.
"""

import os
import threading
import time

import dramatiq
import pika
import psycopg
import pytest
from django.conf import settings
from django.db import connection
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from outbox.core.brokers import describe, reconnected_if_lost
from outbox.core.subscriptions import message_to, queue_name, routing_table
from outbox.relaying.relay import Relay
from outbox_tests.servers import NOT_GIVEN, SERVERS, skip_unless_given

RUNNING_IN_CI = os.environ.get("CI") == "true"


def pytest_report_header(config):
    db = settings.DATABASES["default"]
    return [
        f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db.get('HOST') or ''} {db['NAME']} (tests use a throwaway copy)",
        f"broker: {describe(settings.BROKER_URL)} (queue prefix {settings.OUTBOX_QUEUE_PREFIX!r}, deleted at the end)",
    ]


def pytest_runtest_setup(item):
    for marker in SERVERS:
        if item.get_closest_marker(marker):
            skip_unless_given(marker)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own reads the groups, and pytest-django's sort
def pytest_collection_modifyitems(items):
    # The slow ones first: pytest-django's sort by kind of database use is stable, so they stay first
    # of their kind, and the processes of a parallel run start on them rather than end on them.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


def pytest_collection_finish(session):
    """Under --dist loadgroup pytest-xdist marks each grouped test's node id with its group; when it
    does not (pytest-dev/pytest-xdist#1386), every rig would be started once per process."""
    if getattr(session.config.option, "loadgroup", False):
        lost = [
            item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
        ]
        if lost:
            raise pytest.UsageError(f"pytest-xdist lost the groups of {len(lost)} test(s), {lost[0]} first")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Under CI=true a skipped test fails the run, but for a test that needs a server a run without
    servers (no DATABASE_URL, no BROKER_URL: the embedded default) was not given, which says so."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    embedded = not (os.environ.get("DATABASE_URL") or os.environ.get("BROKER_URL"))
    unexpected = [report for report in skipped if not (embedded and NOT_GIVEN in str(report.longrepr))]
    if RUNNING_IN_CI and unexpected:
        reporter.ensure_newline()
        reporter.write_line(f"CI=true: {len(unexpected)} skipped test(s) fail the run", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):
    """pytest-django's throwaway database, dropped at the end: on PostgreSQL once every other session
    on it has ended (a daemon thread's connection outlives its test now and then, and DROP DATABASE
    refuses while one is open), and through a PgBouncer (PGBOUNCER_ADMIN_PORT: its port) once its idle
    server connections to it are closed."""
    yield
    if connection.vendor == "postgresql" and not os.environ.get("PGBOUNCER_ADMIN_PORT"):
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
    if port := os.environ.get("PGBOUNCER_ADMIN_PORT"):
        with django_db_blocker.unblock():
            connection.close()
            if getattr(connection, "pool", None):
                connection.close_pool()
        close_pgbouncer_server_connections(int(port), connection.settings_dict["NAME"])


def close_pgbouncer_server_connections(port: int, dbname: str, timeout: float = 30.0) -> None:
    """RECONNECT `dbname` on PgBouncer's admin console (simple queries only) and wait until SHOW
    SERVERS lists none of its connections: it keeps idle ones for reuse, and DROP DATABASE waits on none."""
    with psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="pgbouncer", autocommit=True) as admin:
        admin.pgconn.exec_(f"RECONNECT {dbname}".encode())
        deadline = time.monotonic() + timeout
        while True:
            servers = admin.pgconn.exec_(b"SHOW SERVERS")
            column = next(c for c in range(servers.nfields) if servers.fname(c) == b"database")
            if dbname.encode() not in {servers.get_value(r, column) for r in range(servers.ntuples)}:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"PgBouncer kept server connections to {dbname} for {timeout} s")
            time.sleep(0.1)


@pytest.fixture(scope="session")
def _broker_queues_deleted_at_end(django_db_setup):
    broker = dramatiq.get_broker()
    yield broker
    if not isinstance(broker, RabbitmqBroker):
        delete_run_queues(broker)


@pytest.fixture(scope="session", autouse=True)
def _rabbitmq_queues_deleted_at_end():
    """On RabbitMQ this run's queues are deleted at its end, whichever fixture or code declared them
    (the kernel's own pytest plugin's relay, say, which empties them and leaves them to their owner)."""
    yield
    broker = dramatiq.get_broker()
    if isinstance(broker, RabbitmqBroker):
        delete_run_queues(broker)


def delete_run_queues(broker: dramatiq.Broker) -> None:
    """Every queue of this run's subscribers deleted (RabbitMQ), or every key of its namespace (Redis)."""
    reconnected_if_lost(broker)
    subscribers = {sub.subscriber for subs in routing_table().values() for sub in subs}
    names = [queue_name(s) for s in subscribers]
    if hasattr(broker, "channel"):  # RabbitMQ
        from dramatiq.common import dq_name, xq_name

        for name in names:
            for queue in (name, dq_name(name), xq_name(name)):
                broker.channel.queue_delete(queue)
    elif hasattr(broker, "client"):  # Redis
        for key in broker.client.scan_iter(f"{broker.namespace}*"):
            broker.client.delete(key)
    broker.close()


@pytest.fixture
def broker(_broker_queues_deleted_at_end):
    broker = _flushed(_broker_queues_deleted_at_end)
    yield broker
    _flushed(broker)


def _flushed(broker: dramatiq.Broker) -> dramatiq.Broker:
    """Every queue of this run emptied, on a connection opened again if it was lost. A fault test
    may have closed every broker connection of this run; RabbitMQ closes them asynchronously, so
    the close can land just after reconnected_if_lost looked."""
    try:
        reconnected_if_lost(broker).flush_all()
    except pika.exceptions.AMQPConnectionError:
        del broker.connection
        broker.flush_all()
    return broker


@pytest.fixture
def worker(broker, transactional_db):
    """A real Dramatiq worker consuming every subscriber queue, in this process."""
    worker = dramatiq.Worker(broker, worker_threads=8, worker_timeout=100)
    worker.start()
    yield worker
    worker.stop(timeout=10_000)


@pytest.fixture
def start_relay(worker, broker):
    """Start a relay beside the running worker, as in production; stopped after the test."""
    stop, threads = threading.Event(), []

    def relay():
        try:
            Relay(broker=broker).run(stop=stop)
        finally:
            connection.close()

    def start():
        threads.append(threading.Thread(target=relay, daemon=True))
        threads[-1].start()

    yield start
    stop.set()
    for thread in threads:
        thread.join(10)


@pytest.fixture
def system(start_relay):
    """A relay and a worker running, as in production."""
    start_relay()


@pytest.fixture
def deliver(broker):
    """Put an envelope straight on one subscriber's queue, bypassing the relay."""

    def deliver(subscriber: str, body: dict) -> None:
        broker.enqueue(message_to(subscriber, body))

    return deliver


@pytest.fixture
def dead_letter_store_down(transactional_db):
    """A real failure of the dead-letter table (a trigger refuses writes while a flag row exists)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE TABLE probe_dead_letter_outage (down boolean);
            INSERT INTO probe_dead_letter_outage VALUES (true);
            CREATE FUNCTION probe_refuse_dead_letters() RETURNS trigger AS $$
            BEGIN
              IF EXISTS (SELECT 1 FROM probe_dead_letter_outage) THEN
                RAISE EXCEPTION 'dead-letter store unavailable';
              END IF;
              RETURN NEW;
            END $$ LANGUAGE plpgsql;
            CREATE TRIGGER probe_refuse_dead_letters BEFORE INSERT OR UPDATE ON outbox_deadletter
              FOR EACH ROW EXECUTE FUNCTION probe_refuse_dead_letters();
            """
        )

    def restore():
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM probe_dead_letter_outage")

    yield restore
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER probe_refuse_dead_letters ON outbox_deadletter; "
            "DROP FUNCTION probe_refuse_dead_letters(); DROP TABLE probe_dead_letter_outage;"
        )
