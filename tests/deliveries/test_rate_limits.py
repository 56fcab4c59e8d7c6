"""Per-customer rate limits: 429 with Retry-After in the documented JSON shape,
counted in a store every web process shares (the database's cache table, or Redis)."""

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from deliveries.models import ApiRequestCount, Delivery
from outbox.testing import published
from tests.factories import Customer
from tests.processes import a_free_port

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

REDIS_URL = os.environ.get("OUTBOX_LIMITS_REDIS_URL", "")  # the Redis this run was given, if any
STORES = {"database": "", "redis": REDIS_URL}  # DJANGO_CACHE_URL


@pytest.fixture(params=["database", pytest.param("redis", marks=pytest.mark.redis)])
def store(request, settings):
    settings.CACHE_URL = STORES[request.param]
    if settings.CACHE_URL:
        settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
    settings.API_RATE_LIMIT = "3/day"  # windows are aligned to the clock: a day's edge is never crossed mid-test
    return request.param


def test_a_customer_over_the_limit_gets_429_with_retry_after_and_others_do_not(store):
    alice, bob = Customer("alice"), Customer("bob")

    answers = [alice.get("/deliveries").status_code for _ in range(3)]
    refused = alice.get("/deliveries")

    assert answers == [200, 200, 200]
    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 24 * 3600
    assert refused.json()["errors"] == [{"field": "Authorization", "message": "rate limit per customer exceeded"}]
    assert bob.get("/deliveries").status_code == 200


def test_a_refused_request_stores_nothing(store):
    alice = Customer("alice")
    for _ in range(3):
        alice.get("/deliveries")

    refused = alice.request()

    assert refused.status_code == 429 and "3/day" in refused.json()["detail"]
    assert not Delivery.objects.exists() and published() == []


def _database_url() -> str:
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def test_two_processes_share_one_count(store):
    """Another web process (a subprocess on the same database and cache) spends two of the three."""
    alice = Customer("alice")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "delivery_project.settings",
        "DATABASE_URL": _database_url(),
        "DJANGO_CACHE_URL": REDIS_URL if store == "redis" else "",
        "API_RATE_LIMIT": "3/day",
        "DJANGO_DB_POOL_MAX_SIZE": "0",
    }
    script = (
        "import django; django.setup()\n"
        "from django.test import Client\n"
        f"client = Client(headers={{'Authorization': 'Bearer {alice.token}'}})\n"
        "print([client.get('/api/deliveries').status_code for _ in range(2)])\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", script], env=env, cwd=Path(settings.BASE_DIR), capture_output=True, text=True, timeout=60
    )

    assert other.returncode == 0, other.stderr
    assert other.stdout.strip().splitlines()[-1] == "[200, 200]"
    assert alice.get("/deliveries").status_code == 200
    assert alice.get("/deliveries").status_code == 429


def test_concurrent_requests_cannot_slip_past_the_limit(store, settings):
    """16 threads at once, 10 requests each, against a limit of 20: exactly 20 pass, in either store
    (a read-then-write count let 138 of 160 through on PostgreSQL)."""
    settings.API_RATE_LIMIT = "20/day"
    alice = Customer("alice")
    start, answers = threading.Barrier(16), []

    def client():
        start.wait()
        try:
            answers.extend(alice.get("/deliveries").status_code for _ in range(10))
        finally:
            connection.close()

    threads = [threading.Thread(target=client) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)

    assert len(answers) == 160
    assert (answers.count(200), answers.count(429)) == (20, 140)


def test_an_empty_limit_turns_the_limit_off(settings):
    settings.API_RATE_LIMIT = ""
    alice = Customer("alice")

    assert {alice.get("/deliveries").status_code for _ in range(20)} == {200}


def test_simulate_waits_out_a_429_for_its_retry_after_and_goes_on(settings):
    from harness.simulation import Api

    settings.API_RATE_LIMIT = "1/s"
    api = Api(token=Customer("alice").token, url=None)

    assert [api.call("GET", "/deliveries")[0] for _ in range(3)] == [200, 200, 200]


@pytest.mark.postgres
def test_a_connection_lost_while_counting_answers_the_json_503_not_a_500(settings):
    """django-ninja runs throttles outside its exception handlers: a failover that closed the
    connection between the token's query and the count made Django's HTML 500 (CI, test_failover).
    Here the connection is closed just as the count runs: the request goes on uncounted, its own
    query meets the closed connection, and the answer is the API's JSON 503."""
    settings.CACHE_URL, settings.API_RATE_LIMIT = "", "3/day"
    alice = Customer("alice")

    def close_before_counting(execute, sql, params, many, context):
        if sql.startswith("INSERT INTO deliveries_apirequestcount"):
            connection.connection.close()  # the server went away: psycopg's own closed connection
        return execute(sql, params, many, context)

    try:
        with connection.execute_wrapper(close_before_counting):
            answer = alice.request()
    finally:
        connection.close()  # the next use opens a new one

    assert answer.status_code == 503, answer.content[:200]
    assert answer.json()["errors"] == [{"field": "database", "message": "unreachable or busy"}]
    assert answer["Retry-After"]


def test_a_redis_store_that_is_down_lets_requests_through_uncounted(settings):
    settings.API_RATE_LIMIT = "1/day"
    settings.CACHE_URL = f"redis://127.0.0.1:{a_free_port()}/0"  # nothing listens there
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": settings.CACHE_URL}
    }
    alice = Customer("alice")

    assert [alice.get("/deliveries").status_code for _ in range(3)] == [200, 200, 200]


def _store_failures(store: str, outcome: str) -> float:
    from deliveries.rate_limits import STORE_FAILURES

    return STORE_FAILURES.labels(store, outcome)._value.get()


@contextmanager
def the_counter_row_held_by_another_transaction(customer):
    """Contention, made as a flood makes it: another request's transaction holds the customer's
    counter (PostgreSQL: the row; SQLite: the database's write lock), and this request's store gives
    up waiting for it early (a lock timeout, SQLite's busy timeout), as a DATABASE_URL may say."""
    held, release = threading.Event(), threading.Event()

    def hold():
        try:
            with transaction.atomic():
                ApiRequestCount.objects.filter(customer=customer.customer).update(requests=F("requests"))
                held.set()
                release.wait(30)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(30), "the other transaction never took its lock"
        with connection.cursor() as cursor:  # this connection's; closed below, so no later test inherits it
            cursor.execute(
                "SET lock_timeout = '50ms'" if connection.vendor == "postgresql" else "PRAGMA busy_timeout = 50"
            )
        yield
    finally:
        release.set()
        holder.join(30)
        connection.close()


def test_the_limit_refuses_under_contention_rather_than_let_requests_through_uncounted(settings):
    """A lock timeout, a deadlock or SQLite's "database is locked" were read as the store
    being unreachable, so a customer flooding the API made the contention that let it through."""
    settings.CACHE_URL, settings.API_RATE_LIMIT = "", "3/day"
    alice = Customer("alice")
    assert alice.get("/deliveries").status_code == 200  # the counter row is there
    refused_before = _store_failures("database", "refused")

    with the_counter_row_held_by_another_transaction(alice):
        answer = alice.get("/deliveries")

    assert answer.status_code == 429, answer.content[:200]
    assert answer["Retry-After"] == "1"
    assert _store_failures("database", "refused") == refused_before + 1
    assert [alice.get("/deliveries").status_code for _ in range(3)] == [200, 200, 429]  # counted as before


@pytest.mark.parametrize(
    ("error", "unreachable"),
    [
        (OperationalError("the connection is closed"), "psycopg.OperationalError"),
        (OperationalError("terminating connection due to administrator command"), "57P01"),
        (OperationalError("canceling statement due to lock timeout"), "55P03"),
        (OperationalError("canceling statement due to statement timeout"), "57014"),
        (OperationalError("deadlock detected"), "40P01"),
        (OperationalError("database is locked"), "sqlite3"),
        (InterfaceError("connection already closed"), None),
        (RedisConnectionError("Connection refused"), None),
        (RedisTimeoutError("Timeout reading from socket"), None),
    ],
)
def test_only_a_lost_connection_counts_as_the_store_unreachable(error, unreachable):
    """Pure logic: which errors let a request through uncounted (a lost connection) and which are
    contention, refused. The cause is what Django's wrapper keeps of the driver's error."""
    import sqlite3

    import psycopg
    from psycopg import errors

    from deliveries.rate_limits import store_unreachable

    causes = {
        "psycopg.OperationalError": psycopg.OperationalError("the connection is closed"),
        "57P01": errors.AdminShutdown(),
        "55P03": errors.LockNotAvailable(),
        "57014": errors.QueryCanceled(),
        "40P01": errors.DeadlockDetected(),
        "sqlite3": sqlite3.OperationalError("database is locked"),
    }
    error.__cause__ = causes.get(unreachable)
    expected = unreachable in (None, "psycopg.OperationalError", "57P01")

    assert store_unreachable(error) is expected


def test_a_redis_that_never_answers_lets_requests_through_uncounted(settings):
    """A wedged Redis (or a half-open proxy in front of one) answers nothing: redis-py's time-out
    (REDIS_CACHE_OPTIONS) is the store being unreachable, as a refused connection is."""
    settings.API_RATE_LIMIT = "1/day"
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes each handshake; nothing ever accepts or answers
        settings.CACHE_URL = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        settings.CACHES = {
            "default": {
                "BACKEND": "django.core.cache.backends.redis.RedisCache",
                "LOCATION": settings.CACHE_URL,
                "OPTIONS": settings.REDIS_CACHE_OPTIONS,  # what the settings give a DJANGO_CACHE_URL
            }
        }
        alice = Customer("alice")
        let_through_before = _store_failures("redis", "let_through")
        answers = []

        def ask():
            try:
                answers.extend(alice.get("/deliveries").status_code for _ in range(2))
            finally:
                connection.close()

        asking = threading.Thread(target=ask, daemon=True)
        asking.start()
        asking.join(30)

    assert not asking.is_alive(), "the request waited on the silent Redis for good"
    assert answers == [200, 200]
    assert _store_failures("redis", "let_through") == let_through_before + 2


def test_a_customers_first_request_of_a_window_forgets_its_older_windows_and_no_one_elses(settings):
    """The counter table keeps what a count still needs: the current window and the one before
    (a request at a window's edge); a customer's older ones go with their first request of a new
    window, and another customer's stay until theirs."""
    settings.CACHE_URL, settings.API_RATE_LIMIT = "", "3/day"
    alice, bob = Customer("alice"), Customer("bob")
    day = int(time.time() // 86400)
    for customer, ago in [(alice, 5), (alice, 2), (alice, 1), (bob, 5)]:
        ApiRequestCount.objects.create(customer=customer.customer, seconds=86400, window_index=day - ago, requests=3)

    assert alice.get("/deliveries").status_code == 200

    kept = ApiRequestCount.objects.order_by("customer__name", "window_index")
    assert [(row.customer_id == alice.customer.pk, day - row.window_index, row.requests) for row in kept] == [
        (True, 1, 3),
        (True, 0, 1),
        (False, 5, 3),
    ]
