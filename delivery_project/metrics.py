"""`/metrics` for Prometheus: the kernel's counters (outbox/observability/metrics.py) and the system's state,
read from the database at most once every METRICS_STATE_CACHE_SECONDS per process: the gauges
are aggregates over whole tables, and a scrape (or a flood of them) must not cost more than one.

In multiprocess mode (PROMETHEUS_MULTIPROC_DIR) the counters are those of every process of the
host that shares the directory (web, relays, workers); otherwise this process's own.
"""

import contextlib
import threading
import time
from collections import Counter

from django.conf import settings
from django.db import DatabaseError, router
from django.db.models import Count, Min, Q
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from deliveries.models import Delivery
from delivery_project.monitoring import monitoring_only
from outbox.ops import (
    DeadLetter,
    OutboxMessage,
    counters,
    kernel_databases,
    open_groups_everywhere,
    sweep_lag_seconds,
    working_in,
)


def _age(since) -> float:
    return max(0.0, (timezone.now() - since).total_seconds()) if since else 0.0


class SystemState:
    """Gauges that are facts in the database, not events in a process. A database that does not
    answer leaves the others' figures in the scrape: `outbox_database_up` says which one is missing
    from the totals (0), rather than a failed scrape hiding them all."""

    def collect(self):
        now = timezone.now()
        up = GaugeMetricFamily(
            "outbox_database_up", "1 if the database answered this read, 0 if not", labels=["database"]
        )
        read = {}
        for database in kernel_databases():
            try:
                read[database] = _outbox_state(database, now=now)
            except DatabaseError:
                up.add_metric([database], 0)
            else:
                up.add_metric([database], 1)
        yield up
        if not read:  # no figure at all rather than zeros that look like an idle system
            return
        # With a context on a database of its own, every outbox counts: totals, and the worst age.
        states = read.values()
        yield GaugeMetricFamily(
            "outbox_backlog_rows", "Outbox rows not yet relayed (due or later)", sum(s["backlog"] for s in states)
        )
        yield GaugeMetricFamily("outbox_due_rows", "Outbox rows due and not yet relayed", sum(s["due"] for s in states))
        yield GaugeMetricFamily(
            "outbox_oldest_due_age_seconds",
            "How long the oldest due row has waited for the relay",
            max((_age(s["oldest"]) for s in states), default=0.0),
        )
        yield GaugeMetricFamily(
            "outbox_sweep_lag_seconds",
            "How far the redelivery sweep is behind: the age of the oldest unsettled relayed row beyond its grace",
            max((s["sweep_lag"] for s in states), default=0.0),
        )
        letters = GaugeMetricFamily("outbox_dead_letters_open", "Open dead letters, by reason", labels=["reason"])
        for reason, count in sum((s["letters"] for s in states), Counter()).items():
            letters.add_metric([reason], count)
        yield letters
        if router.db_for_read(Delivery) in read:  # else away, as its outbox_database_up says: not asked twice
            with contextlib.suppress(DatabaseError):
                yield from _delivery_gauges()


def _outbox_state(database: str, *, now) -> dict:
    """One database's outbox backlog, sweep lag and open dead letters."""
    # One query, so the backlog and the due rows are counted at one moment: counted apart, a row
    # relayed in between made the backlog smaller than what was due in it.
    is_due = Q(available_at__lte=now)
    state = (
        OutboxMessage.objects.using(database)
        .filter(published_at__isnull=True)
        .aggregate(backlog=Count("id"), due=Count("id", filter=is_due), oldest=Min("available_at", filter=is_due))
    )
    with working_in(database):
        state["sweep_lag"] = sweep_lag_seconds()
    open_letters = DeadLetter.objects.using(database).filter(status=DeadLetter.Status.OPEN)
    state["letters"] = Counter(dict(open_letters.values_list("reason").annotate(n=Count("id"))))
    return state


def _delivery_gauges():
    by_status = GaugeMetricFamily("deliveries", "Deliveries, by status", labels=["status"])
    counts = dict(Delivery.objects.values_list("status").annotate(n=Count("id")))
    for status in Delivery.Status.values:
        by_status.add_metric([status], counts.get(status, 0))
    waiting = Delivery.objects.filter(status=Delivery.Status.WAITING_FOR_DRONE).aggregate(
        count=Count("id"), oldest=Min("waiting_since")
    )
    return [
        by_status,
        GaugeMetricFamily("deliveries_waiting_for_drone", "Deliveries in the drones' waiting line", waiting["count"]),
        GaugeMetricFamily(
            "deliveries_oldest_waiting_age_seconds",
            "How long the delivery first in the waiting line has waited",
            _age(waiting["oldest"]),
        ),
    ]


_state_lock = threading.Lock()
_state: tuple[float, bytes] = (float("-inf"), b"")


def _system_state() -> bytes:
    """The gauges as last read, read again when older than the cache; one reader at a time, so
    concurrent scrapes wait for one set of queries instead of each running its own."""
    global _state
    with _state_lock:
        read_at, exposition = _state
        if time.monotonic() - read_at >= settings.METRICS_STATE_CACHE_SECONDS:
            state = CollectorRegistry()
            state.register(SystemState())
            _state = (time.monotonic(), generate_latest(state))
        return _state[1]


@monitoring_only
def metrics(request) -> HttpResponse:
    return HttpResponse(generate_latest(counters()) + _system_state(), content_type=CONTENT_TYPE_LATEST)


@monitoring_only
def dead_letter_groups(request) -> JsonResponse:
    """The open dead letters in groups of one cause, read-only, for monitoring scripts: behind the
    access `/metrics` has. What the console's "Dead letters in groups" page shows, as JSON, of every
    database with the kernel's tables, and the databases that did not answer."""
    groups, unanswered = open_groups_everywhere()
    return JsonResponse({"groups": [group.as_json() for group in groups], "unanswered": unanswered})
