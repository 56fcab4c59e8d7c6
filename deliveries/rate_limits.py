"""Per-customer rate limits on the API, through django-ninja's throttling hook.

Requests are counted in fixed windows (`API_RATE_LIMIT`, e.g. 6000/min) by an atomic increment
in a store every web process shares: Redis `INCR` when DJANGO_CACHE_URL names a Redis, else one
`INSERT … ON CONFLICT DO UPDATE … RETURNING` per customer and window. ninja's AuthRateThrottle
rewrites a list of timestamps whole on each call, losing counts between processes.

A store that cannot be reached (a lost connection) lets the request through uncounted and counts
it in `api_rate_limit_store_failures_total{outcome="let_through"}`: the request's own queries
then answer the API's JSON 503, where an error raised here would be Django's HTML 500. Contention
(a lock or statement timeout, a deadlock, SQLite's "database is locked") refuses with 429.
"""

import logging
import threading
import time

import psycopg
from django.conf import settings
from django.core.cache import cache
from django.db import DatabaseError, InterfaceError, OperationalError
from ninja.throttling import BaseThrottle, SimpleRateThrottle
from prometheus_client import Counter
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from deliveries.models import ApiRequestCount
from outbox.api import connection_of

connection = connection_of("deliveries")  # its database, wherever the settings put it

logger = logging.getLogger(__name__)

STORE_FAILURES = Counter(
    "api_rate_limit_store_failures",
    "Requests whose rate limit could not be counted: let_through (the store unreachable: uncounted) "
    "or refused (the store busy: contention, as a flood makes on its own counter)",
    ["store", "outcome"],
)
# A request refused under contention is told to come back after this long.
RETRY_AFTER_CONTENTION_SECONDS = 1.0
# PostgreSQL's error classes of a connection that is gone or going: 08 (connection exception) and
# the server shutting down or starting (57P01-57P03). Everything else (55P03 lock not available,
# 57014 statement timeout, 40P01 deadlock) answered: the store is there, only busy.
_CONNECTION_GONE = ("08", "57P01", "57P02", "57P03")


def store_unreachable(error: BaseException) -> bool:
    """Whether `error` says the counters' store cannot be reached, as opposed to busy."""
    if isinstance(error, RedisConnectionError | RedisTimeoutError | InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    cause = error.__cause__
    if isinstance(cause, psycopg.OperationalError):  # sqlstate None: lost on the client's side
        return cause.sqlstate is None or cause.sqlstate.startswith(_CONNECTION_GONE)
    return False  # SQLite's: a file on this host, never unreachable; "database is locked" is contention


def parse_rate(rate: str) -> tuple[int, int]:
    """`100/min` → (100, 60); the forms ninja and DRF accept: s, sec, m, min, h, hour, d, day."""
    return SimpleRateThrottle.parse_rate(SimpleRateThrottle, rate)


def _count_in_cache(customer_id, seconds: int, window: int) -> int:
    key = f"api-rate:{customer_id}:{seconds}:{window}"
    cache.add(key, 0, timeout=seconds + 1)
    try:
        return cache.incr(key)
    except ValueError:  # expired or evicted between add and incr
        cache.set(key, 1, timeout=seconds + 1)
        return 1


_table = ApiRequestCount._meta.db_table
_UPSERT = (
    f"INSERT INTO {_table} (customer_id, seconds, window_index, requests) VALUES (%s, %s, %s, 1) "
    "ON CONFLICT (customer_id, seconds, window_index) DO UPDATE SET requests = "
    f"{_table}.requests + 1 RETURNING requests"
)

_FORGET_OLD_WINDOWS = f"DELETE FROM {_table} WHERE customer_id = %s AND window_index < %s"


def _count_in_database(customer_id, seconds: int, window: int) -> int:
    customer = ApiRequestCount._meta.get_field("customer").target_field.get_db_prep_value(customer_id, connection)
    # One statement in autocommit, atomic by itself: a transaction around it cost a BEGIN and a
    # COMMIT on every request (tests/test_statement_counts.py).
    with connection.cursor() as cursor:
        cursor.execute(_UPSERT, [customer, seconds, window])
        count = cursor.fetchone()[0]
        if count == 1:  # a new window: the customer's older ones are done with
            cursor.execute(_FORGET_OLD_WINDOWS, [customer, window - 1])
    return count


class CustomerRateThrottle(BaseThrottle):
    """At most API_RATE_LIMIT requests per customer a window; Retry-After until the window ends."""

    def __init__(self):
        self._last = threading.local()  # ninja shares one throttle between the threads of a process

    def allow_request(self, request) -> bool:
        customer = getattr(request, "auth", None)
        if not settings.API_RATE_LIMIT or customer is None:
            return True
        limit, seconds = parse_rate(settings.API_RATE_LIMIT)
        now = time.time()
        window = int(now // seconds)
        count_in = _count_in_cache if settings.CACHE_URL else _count_in_database
        store = "redis" if settings.CACHE_URL else "database"
        try:
            count = count_in(customer.pk, seconds, window)
        except (DatabaseError, RedisError) as error:
            if not store_unreachable(error):
                STORE_FAILURES.labels(store, "refused").inc()
                logger.info("rate limit refused a request, its store is busy: %s", _first_line(error))
                self._last.wait = RETRY_AFTER_CONTENTION_SECONDS
                return False
            STORE_FAILURES.labels(store, "let_through").inc()
            logger.warning("rate limit not counted, its store is unreachable: %s", _first_line(error))
            return True
        self._last.wait = (window + 1) * seconds - now
        return count <= limit

    def wait(self) -> float:
        return self._last.wait


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]
