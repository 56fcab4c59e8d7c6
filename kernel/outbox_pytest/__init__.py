"""`outbox.testing` as pytest fixtures, registered by the distribution (the `pytest11` entry point).

A project that installs the kernel and pytest-django gets `outbox_deliver`, `outbox_published`,
`outbox_run_choreography`, `outbox_failing`, `outbox_relay_and_workers` (a relay per database and
a Dramatiq worker in the test's process) and `outbox_wait_until_processed`, each with the database
access it needs (`transactional_db` where other threads must see what the test commits).

Two defaults, for every topology: a run's queues are its own (`OUTBOX_QUEUE_PREFIX=test-<random>-`,
and each pytest-xdist worker's beside it, unless the environment names a prefix), and a test that
uses the database may use every database a context lives on. pytest loads this module before Django
is configured, so each fixture imports what it gives when it runs. It ships beside `outbox`, not in
it: pytest's adapter uses the kernel from outside, as a project's wiring does.
"""

import os
import threading
import uuid

import pytest


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Before pytest-django imports the settings: this run's queue prefix, in the environment where
    settings that read `OUTBOX_QUEUE_PREFIX` from it (as the guide's do) and processes a test starts find it."""
    os.environ.setdefault("OUTBOX_QUEUE_PREFIX", f"test-{uuid.uuid4().hex[:8]}-")
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and os.environ.get("OUTBOX_QUEUE_PREFIX_OF") != worker:  # each worker's own, once
        os.environ["OUTBOX_QUEUE_PREFIX"] += f"{worker}-"
        os.environ["OUTBOX_QUEUE_PREFIX_OF"] = worker
    return (yield)


DATABASE_FIXTURES = {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """With a context on a database of its own (`OUTBOX_CONTEXT_DATABASES`), a test that uses the
    database may use all of them, unless its `django_db` mark names which: a handler, a relay or the
    test itself writes where the context lives."""
    from django.conf import settings

    if not (settings.configured and getattr(settings, "OUTBOX_CONTEXT_DATABASES", None)):
        return
    for item in items:
        marked = item.get_closest_marker("django_db")
        if marked is None and not DATABASE_FIXTURES & set(getattr(item, "fixturenames", ())):
            continue  # no database at all
        if marked is not None and ("databases" in marked.kwargs or len(marked.args) >= 3):
            continue  # it names its databases
        args, options = (marked.args, marked.kwargs) if marked else ((), {})
        item.add_marker(pytest.mark.django_db(*args, **options, databases="__all__"), append=False)


@pytest.fixture
def outbox_deliver(db):
    """`outbox.testing.deliver`: hand one message to one subscriber, and see what came of it."""
    from outbox.testing import deliver

    return deliver


@pytest.fixture
def outbox_published(db):
    """`outbox.testing.published`: the envelopes published so far, by type or by story."""
    from outbox.testing import published

    return published


@pytest.fixture
def outbox_run_choreography(db):
    """`outbox.testing.run_choreography`: hand every event to its subscribers until none is left."""
    from outbox.testing import run_choreography

    return run_choreography


@pytest.fixture
def outbox_failing():
    """`outbox.testing.failing`: within its block, one subscriber's handler of one type raises."""
    from outbox.testing import failing

    return failing


@pytest.fixture
def outbox_relay_and_workers(transactional_db):
    """A relay for each database with an outbox (`default`, and each `OUTBOX_CONTEXT_DATABASES`
    puts a context on) and a Dramatiq worker, as threads of the test's process, on the broker the
    project's settings configure, as its own processes run in production; all stop when the test
    ends. The tests' broker must be theirs alone: its subscribers' queues are emptied before and
    after, so that no message of one test is handled in the next."""
    import dramatiq
    from django.db import connections

    from outbox.core.working_database import kernel_databases, working_in
    from outbox.relaying.relay import Relay

    broker = dramatiq.get_broker()
    broker.flush_all()
    worker = dramatiq.Worker(broker, worker_threads=2, worker_timeout=100)
    worker.start()
    stop = threading.Event()

    def relay(database: str) -> None:
        try:
            with working_in(database):  # its claims, wake-ups, leases and sweep: that database's
                Relay(broker=broker).run(stop=stop)
        finally:
            connections.close_all()  # this thread's

    relays = [
        threading.Thread(target=relay, args=(database,), name=f"outbox-relay-{database}", daemon=True)
        for database in kernel_databases()
    ]
    for relaying in relays:
        relaying.start()
    try:
        yield
    finally:
        stop.set()
        for relaying in relays:
            relaying.join(10)
        worker.stop(timeout=10_000)
        broker.flush_all()


@pytest.fixture
def outbox_wait_until_processed(transactional_db):
    """`outbox.testing.wait_until_processed`: return once what is due has been relayed and handled
    (by a relay and workers that see what the test commits: hence `transactional_db`)."""
    from outbox.testing import wait_until_processed

    return wait_until_processed
