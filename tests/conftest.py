"""This project's fixtures: customers, a fleet, the processes' environment and the rigs of its own
servers; the kernel's (a broker of this run's own, a worker, relays, the run rules) are outbox_tests.plugin's."""

import os

import pytest
from django.db import connection

from drones.services import seed_fleet
from tests.factories import BASE, Customer
from tests.processes import listen_url_env, test_database_url

pytest_plugins = ["outbox_tests.plugin"]

# The guide's app (docs/adding-a-context.md) is installed only by its own settings, in a run of its
# own (tests/test_adding_a_context.py starts it); every other run leaves its tests out.
collect_ignore = [] if os.environ.get("DJANGO_SETTINGS_MODULE") == "tests.guide.settings" else ["guide"]

# Tests on one session-wide rig run in one pytest-xdist process (--dist loadgroup), which starts
# the rig once: a cluster of three RabbitMQ nodes each, or a PostgreSQL pair, is no small thing.
RIG_GROUPS = {"rabbitmq_cluster": "rabbitmq-cluster", "postgres_pair": "postgres-rigs", "pgbouncer": "postgres-rigs"}


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own reads the groups
def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, group in RIG_GROUPS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
                break


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
