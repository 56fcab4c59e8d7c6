"""Prometheus metrics, scraped from /metrics after a real delivery through the API,
the relay, RabbitMQ (or the embedded Redis) and a worker."""

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from outbox_tests.letters import a_dead_letter
from prometheus_client.parser import text_string_to_metric_families

from drones.services import seed_fleet
from outbox.core.publishing import publish
from outbox.handling.dispatch import dispatch
from outbox.models import OutboxMessage
from outbox.testing import wait_until_processed
from tests.factories import BASE, Customer
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def scrape() -> dict[tuple, float]:
    response = Client().get("/metrics")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def value(scraped: dict, name: str, **labels) -> float:
    return scraped.get((name, tuple(sorted(labels.items()))), 0.0)


def test_one_delivery_shows_in_the_counters_and_the_state_gauges(system):
    seed_fleet(count=2, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")
    before = scrape()

    delivery_id = alice.request().json()["deliveryId"]
    wait_until(lambda: alice.get(f"/deliveries/{delivery_id}").json()["status"] == "delivered", what="delivered")

    wait_until_processed(timeout=30)  # every due row relayed, and handled by each of its subscribers
    requested = OutboxMessage.objects.get(type="delivery.requested")
    dispatch(subscriber="drones", body=requested.envelope())  # a second copy, skipped by the inbox
    processed = dict(subscriber="deliveries", event_type="drone.arrived", outcome="processed")
    duplicate = dict(subscriber="drones", event_type="delivery.requested", outcome="duplicate")

    def grew(scraped: dict, name: str, **labels) -> float:
        return value(scraped, name, **labels) - value(before, name, **labels)

    # A worker counts a message just after its transaction commits: wait for the counts, not only the state.
    def counted() -> dict | None:
        scraped = scrape()
        handled = grew(scraped, "outbox_handled_messages_total", **processed)
        return scraped if handled and grew(scraped, "outbox_relayed_events_total", event_type="drone.arrived") else None

    after = wait_until(counted, what="the relay and the worker to count drone.arrived")

    assert grew(after, "outbox_relayed_events_total", event_type="delivery.requested") == 1
    assert grew(after, "outbox_relayed_events_total", event_type="drone.arrived") == 1
    assert grew(after, "outbox_handled_messages_total", **processed) == 1
    assert grew(after, "outbox_handled_messages_total", **duplicate) == 1
    assert grew(after, "outbox_handler_seconds_count", subscriber="drones", event_type="delivery.requested") == 2
    inf = dict(subscriber="drones", event_type="delivery.requested", le="+Inf")
    assert grew(after, "outbox_handler_seconds_bucket", **inf) == 2
    assert value(after, "deliveries", status="delivered") == 1
    assert value(after, "deliveries", status="waiting_for_drone") == 0
    assert value(after, "deliveries_waiting_for_drone") == 0
    # The backlog gauges' exact counts are checked below, at rest (timers keep coming due while the
    # system runs); here, the delivery's own timers (its deadline two hours ahead) were withdrawn
    # with its end, so none of its rows waits in the outbox.
    pending = OutboxMessage.objects.filter(published_at__isnull=True, correlation_id=delivery_id)
    assert not pending.filter(type__startswith="delivery.").exists()
    assert not [key for key in after if key[0] == "outbox_dead_letters_open"]


@pytest.mark.django_db
def test_the_backlog_gauges_count_due_rows_their_age_and_open_letters_by_reason():
    """No relay runs here: rows due a minute ago wait, and the gauges say so."""
    from django.db import transaction
    from outbox_tests.probe.events import ProbePinged

    from outbox.models import DeadLetter

    a_minute_ago = timezone.now() - timedelta(minutes=1)
    with transaction.atomic():
        for _ in range(2):
            publish(ProbePinged(n=1), stream="probe:1", available_at=a_minute_ago)
        publish(ProbePinged(n=2), stream="probe:1", available_at=timezone.now() + timedelta(hours=1))
    DeadLetter.objects.create(
        subscriber="probe_a",
        reason="handler_error",
        attempts=1,
        first_failed_at=a_minute_ago,
        last_failed_at=a_minute_ago,
        envelope={},
    )

    scraped = scrape()

    assert value(scraped, "outbox_backlog_rows") == 3 and value(scraped, "outbox_due_rows") == 2
    assert 60 <= value(scraped, "outbox_oldest_due_age_seconds") < 3600
    assert value(scraped, "outbox_dead_letters_open", reason="handler_error") == 1
    assert value(scraped, "outbox_database_up", database="default") == 1


@pytest.mark.django_db
def test_the_sweep_lag_is_the_age_of_the_oldest_unsettled_row_beyond_its_grace(settings):
    from django.db import transaction
    from outbox_tests.probe.events import ProbePinged

    settings.OUTBOX_SWEEP_GRACE_SECONDS = 30
    assert value(scrape(), "outbox_sweep_lag_seconds") == 0
    with transaction.atomic():
        row = publish(ProbePinged(n=1), stream="probe:1")
    OutboxMessage.objects.filter(pk=row.pk).update(published_at=timezone.now() - timedelta(minutes=2))

    assert 89 <= value(scrape(), "outbox_sweep_lag_seconds") < 100  # relayed 120 s ago, 30 s of grace


def test_a_relay_serves_its_counters_on_a_port_of_its_own():
    import socket
    import urllib.request

    from outbox.observability.metrics import RELAYED, serve_metrics

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    RELAYED.labels("probe.pinged").inc(0)  # the series exists, as in a relay that has started
    serve_metrics(port)

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()

    assert 'outbox_relayed_events_total{event_type="probe.pinged"}' in text


@pytest.mark.django_db
def test_the_state_gauges_are_read_once_per_cache_period_however_often_prometheus_scrapes(settings, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from delivery_project import metrics

    settings.METRICS_STATE_CACHE_SECONDS = 60
    monkeypatch.setattr(metrics, "_state", (float("-inf"), b""))
    assert value(scrape(), "outbox_dead_letters_open", reason="handler_error") == 0

    a_dead_letter(reason="handler_error")
    with CaptureQueriesContext(connection) as queries:
        cached = scrape()

    assert len(queries) == 0 and value(cached, "outbox_dead_letters_open", reason="handler_error") == 0
    settings.METRICS_STATE_CACHE_SECONDS = 0
    assert value(scrape(), "outbox_dead_letters_open", reason="handler_error") == 1


@pytest.mark.django_db
def test_with_a_monitoring_token_metrics_and_readiness_answer_only_its_holder(settings):
    settings.MONITORING_TOKEN = "a-long-random-monitoring-token"

    for path in ("/metrics", "/readyz"):
        refused = Client().get(path)
        assert refused.status_code == 401 and refused.json()["errors"][0]["field"] == "Authorization"
        assert Client().get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        holder = Client(headers={"Authorization": "Bearer a-long-random-monitoring-token"})
        assert holder.get(path).status_code == 200
    assert Client().get("/healthz").status_code == 200  # liveness stays open


@pytest.mark.django_db
def test_the_monitoring_token_is_read_whatever_its_schemes_case_and_whitespace(settings):
    settings.MONITORING_TOKEN = "a-long-random-monitoring-token\n"  # as a secret file leaves it

    for authorization in (
        "Bearer a-long-random-monitoring-token",
        "bearer a-long-random-monitoring-token",
        "BEARER  a-long-random-monitoring-token ",
    ):
        assert Client(headers={"Authorization": authorization}).get("/metrics").status_code == 200, authorization
    for authorization in ("Basic a-long-random-monitoring-token", "a-long-random-monitoring-token", "Bearer"):
        assert Client(headers={"Authorization": authorization}).get("/metrics").status_code == 401, authorization


def test_the_dead_letter_groups_are_json_for_monitoring_scripts_behind_the_token(db, settings):
    for n in range(2):
        a_dead_letter(exception_type="GatewayDown", error=f"gateway down #{n}")
    settings.MONITORING_TOKEN = "a-long-random-monitoring-token"
    token = {"Authorization": "Bearer a-long-random-monitoring-token"}

    assert Client().get("/dead-letter-groups").status_code == 401
    answer = Client().get("/dead-letter-groups", headers=token)
    assert answer.status_code == 200
    [group] = answer.json()["groups"]
    assert (group["letters"], group["subscriber"], group["event_type"]) == (2, "probe_b", "probe.pinged")
    assert (group["database"], answer.json()["unanswered"]) == ("default", [])  # every database is answered for
    assert group["last_failed_at"].startswith("20") and group["last_replayed_at"] is None

    call_command("dead_letters", "replay", "--group", group["key"])
    for n in range(2):  # the cause is not fixed: new failures, never replayed
        a_dead_letter(exception_type="GatewayDown", error=f"gateway down #{n + 2}")
    [back] = Client().get("/dead-letter-groups", headers=token).json()["groups"]
    assert (back["key"], back["new_since_replay"]) == (group["key"], 2) and back["last_replayed_at"].startswith("20")
