import os
import threading

import dramatiq
import pika
import pytest
from django.conf import settings
from django.db import connection

from drones.services import seed_fleet
from outbox.core.brokers import describe, reconnected_if_lost
from outbox.core.subscriptions import queue_name, routing_table
from outbox.relaying.relay import Relay
from tests.factories import BASE, Customer
from tests.processes import listen_url_env, test_database_url
from tests.servers import NOT_GIVEN, SERVERS, skip_unless_given

# The guide's app (docs/adding-a-context.md) is installed only by its own settings, in a run of its
# own (tests/test_adding_a_context.py starts it); every other run leaves its tests out.
collect_ignore = [] if os.environ.get("DJANGO_SETTINGS_MODULE") == "tests.guide.settings" else ["guide"]

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


# Tests on one session-wide rig run in one pytest-xdist process (--dist loadgroup), which starts
# the rig once: a cluster of three RabbitMQ nodes each, or a PostgreSQL pair, is no small thing.
RIG_GROUPS = {"rabbitmq_cluster": "rabbitmq-cluster", "postgres_pair": "postgres-rigs", "pgbouncer": "postgres-rigs"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own reads the groups, and pytest-django's sort
def pytest_collection_modifyitems(items):
    # The slow ones first: pytest-django's sort by kind of database use (which keeps a test that
    # empties the tables after those that rely on migrated rows) is stable, so they stay first of
    # their kind, and the processes of a parallel run start on them rather than end on them.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
    for item in items:
        for fixture, group in RIG_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
                break


def pytest_collection_finish(session):
    """Under --dist loadgroup pytest-xdist marks each grouped test's node id with its group; when it
    does not (pytest-dev/pytest-xdist#1386), every rig would be started once per process."""
    if session.config.getvalue("loadgroup") if hasattr(session.config.option, "loadgroup") else False:
        lost = [
            item.nodeid for item in session.items if item.get_closest_marker("xdist_group") and "@" not in item.nodeid
        ]
        if lost:
            raise pytest.UsageError(
                f"pytest-xdist lost the groups of {len(lost)} test(s), {lost[0]} first: see pyproject.toml"
            )


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """Under CI=true a skipped test fails the run. The one exception is the embedded step (the
    README's `./dev test` as a newcomer runs it: no DATABASE_URL, no BROKER_URL), where a test that
    needs a server the run was not given skips, saying so; the server steps, given the servers,
    run each of those and allow no skip at all."""
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
    """pytest-django's throwaway database; behind `./dev test-pgbouncer`, PgBouncer's idle server
    connections to it are closed at the end, or Django could not drop it (harness/through_pgbouncer.py).
    Those PgBouncer opened while `migrate` ran, before the contexts' schemas, are migrate's own to end."""
    yield
    if port := os.environ.get("PGBOUNCER_ADMIN_PORT"):
        from harness.pgbouncer import PgBouncer

        with django_db_blocker.unblock():
            connection.close()
            if getattr(connection, "pool", None):
                connection.close_pool()
        PgBouncer(port=int(port)).close_server_connections(connection.settings_dict["NAME"])


@pytest.fixture(scope="session")
def _broker_queues_deleted_at_end(django_db_setup):
    broker = dramatiq.get_broker()
    yield broker
    delete_run_queues(broker)


def delete_run_queues(broker: dramatiq.Broker) -> None:
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
    the close can land just after reconnected_if_lost looked (seen in CI: StreamLostError in the
    next test's set-up)."""
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
    start_relay()


@pytest.fixture
def env(transactional_db, broker):
    """The environment of a process the test starts: this run's database, queues and settings."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "DATABASE_URL": test_database_url(),
        **listen_url_env(connection.settings_dict["NAME"]),
        "STARTED_BY_TESTS": "1",
    }


@pytest.fixture
def customer(db):
    return Customer("alice")


@pytest.fixture
def other_customer(db):
    return Customer("mallory")


@pytest.fixture
def fleet(db):
    seed_fleet(count=3, latitude=BASE[0], longitude=BASE[1])


@pytest.fixture(scope="session")
def rabbitmq_cluster(tmp_path_factory):
    """A 3-node RabbitMQ cluster of the tests' own (harness/rabbitmq_cluster.py), beside the system
    node, for the whole session; every node and its epmd are gone at the end."""
    from harness.rabbitmq_cluster import RABBITMQ_BIN, RabbitmqCluster
    from harness.rig_processes import epmd_names, processes_in_group

    if not (RABBITMQ_BIN / "rabbitmq-server").exists():
        pytest.skip(f"needs RabbitMQ's binaries in {RABBITMQ_BIN}")
    with RabbitmqCluster(tmp_path_factory.mktemp("rabbitmq-cluster")) as cluster:
        yield cluster
        groups = [cluster.pid(i) for i in range(cluster.size)]
    assert not any(processes_in_group(group) for group in groups if group), "a node outlived the rig"
    assert epmd_names(cluster.epmd_port) is None, "the rig's epmd outlived the rig"


@pytest.fixture(scope="session")
def postgres_pair():
    """A PostgreSQL primary with a streaming replica of the tests' own (harness/postgres_servers.py),
    beside the system server, for the whole session; both servers and their directory are gone at
    the end. Tests that stop or promote a server start a pair of their own instead."""
    from harness.postgres_servers import PG_BIN, PostgresPrimaryWithReplica
    from harness.rig_processes import port_open

    if not (PG_BIN / "postgres").exists():
        pytest.skip(f"needs PostgreSQL's binaries in {PG_BIN}")
    with PostgresPrimaryWithReplica() as pair:
        yield pair
        assert all(pair.group_pids(role) for role in pair.ROLES), "a server stopped during the session"
    # group_pids: the postmaster's group and its children (each leads a group of its own).
    assert not any(pair.group_pids(role) for role in pair.ROLES), "a server outlived the rig"
    assert not port_open(pair.primary_port) and not port_open(pair.replica_port), "a port outlived the rig"
    assert not pair.base_dir.exists(), "the rig's directory outlived it"


@pytest.fixture(scope="session")
def pgbouncer(django_db_setup):
    """A PgBouncer of the tests' own in transaction mode in front of the system server (5432), for
    the whole session; its process and directory are gone at the end, before the throwaway
    database is dropped (its server connections would keep it)."""
    from harness.pgbouncer import PGBOUNCER, PgBouncer
    from harness.rig_processes import port_open

    if not PGBOUNCER.exists():
        pytest.skip(f"needs PgBouncer at {PGBOUNCER}")
    with PgBouncer(upstream_port=5432, pool_mode="transaction") as bouncer:
        yield bouncer
        assert bouncer.group_pids(), "PgBouncer stopped during the session"
    assert not bouncer.group_pids(), "PgBouncer outlived the rig"
    assert not port_open(bouncer.port), "PgBouncer's port outlived the rig"
    assert not bouncer.base_dir.exists(), "the rig's directory outlived it"
