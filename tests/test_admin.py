"""The operators' console: staff only, read-only state, actions that call services."""

import re
from datetime import timedelta
from types import SimpleNamespace
from uuid import UUID

import pytest
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.test import Client
from django.utils import timezone
from outbox_tests.letters import a_dead_letter

from deliveries.models import Delivery
from drones.models import Drone
from outbox.console.dead_letter_actions import discard_dead_letter
from outbox.core.dead_letters import record_dead_letter
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, OutboxMessage
from tests.console import act
from tests.factories import Customer

pytestmark = pytest.mark.django_db


def test_a_customer_token_grants_nothing_in_the_admin(db):
    customer = Customer("alice")
    response = Client(headers={"Authorization": f"Bearer {customer.token}"}).get("/admin/outbox/deadletter/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_a_logged_in_non_staff_user_is_sent_to_login(client):
    client.force_login(User.objects.create_user("bob", password="pw"))
    assert client.get("/admin/outbox/deadletter/").status_code == 302


def test_the_dead_letter_list_filters_by_subscriber_reason_type_and_date(admin_client):
    a_dead_letter()
    a_dead_letter(subscriber="probe_a", reason="invalid_payload")

    page = admin_client.get("/admin/outbox/deadletter/?reason=invalid_payload")

    assert page.status_code == 200
    assert page.context["cl"].result_count == 1
    html = page.content.decode()
    for name in ("By subscriber", "By reason", "By type", "By last failed at"):
        assert name.lower() in html.lower()


def test_the_dead_letter_list_opens_on_the_open_letters_and_names_a_missing_event_type(admin_client):
    a_dead_letter()
    record_dead_letter(subscriber="probe_a", body="not an envelope", reason="invalid_envelope", error=ValueError("x"))
    closed = a_dead_letter()
    discard_dead_letter(letter_id=closed.pk, by="ops", note="a test")

    page = admin_client.get("/admin/outbox/deadletter/")
    assert page.context["cl"].result_count == 2  # the discarded one is under "All", a click away
    html = page.content.decode()
    assert "(no event type)<br><small>to probe_a" in html
    [status] = [spec for spec in page.context["cl"].filter_specs if getattr(spec, "parameter_name", "") == "status"]
    choices = list(status.choices(page.context["cl"]))
    assert [c["display"] for c in choices if c["selected"]] == ["Open"] and choices[-1]["display"] == "All"
    assert admin_client.get("/admin/outbox/deadletter/?status=all").context["cl"].result_count == 3
    assert admin_client.get("/admin/outbox/deadletter/?status=discarded").context["cl"].result_count == 1


@pytest.mark.parametrize("page", ["outboxmessage/", "inboxmessage/", "deadletter/", "outboxmessage/overview/"])
def test_with_one_database_the_kernels_pages_offer_no_choice_of_database(admin_client, page):
    """The choice of database (outbox.console.database_choice) is for a context on a database of
    its own (tests/e2e/test_context_database.py): with one, a link naming a database another
    deployment has still opens the page, on `default`, rather than Django's "?e=1" of a lookup it
    does not know."""
    a_dead_letter()
    answer = admin_client.get(f"/admin/outbox/{page}?database=drones")
    assert answer.status_code == 200, answer
    assert 'id="database-choice"' not in answer.content.decode()
    if "cl" in answer.context:  # a filter with nothing to offer is left out
        assert not any(getattr(spec, "parameter_name", "") == "database" for spec in answer.context["cl"].filter_specs)
    if page == "deadletter/":
        assert answer.context["cl"].result_count == 1


def test_a_deliverys_timeline_table_gives_each_time_with_its_zone_and_keeps_event_names_whole(admin_client):
    html = render_to_string(
        "admin/outbox/timeline_table.html",
        {
            "events": [
                SimpleNamespace(
                    type="delivery.confirmation_requested",
                    version=1,
                    message_id="m",
                    occurred_at=timezone.now(),
                    published_by="deliveries",
                    stream="s",
                    sequence=1,
                    causation_id=None,
                    subscribers=[],
                )
            ]
        },
    )
    text = re.sub(r"<[^>]+>", "", html)  # the date and the time are each kept on one line
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC", text)
    assert '<strong style="white-space: nowrap">delivery.confirmation_requested</strong>' in html


def test_a_dead_letter_page_shows_envelope_traceback_and_timeline_link(admin_client):
    letter = a_dead_letter()

    html = admin_client.get(f"/admin/outbox/deadletter/{letter.pk}/change/").content.decode()

    assert letter.envelope["message_id"] in html and "Traceback (most recent call last)" in html
    assert f"/admin/outbox/outboxmessage/timeline/{letter.correlation_id}/" in html


def test_replay_from_the_admin_goes_through_the_outbox_to_that_subscriber(admin_client):
    letter = a_dead_letter()

    response = act(admin_client, "outbox/deadletter", "replay", [letter.pk])

    assert response.status_code == 302
    letter.refresh_from_db()
    assert (letter.status, letter.replays, letter.resolved_by) == ("replayed", 1, "admin")
    row = OutboxMessage.objects.get(message_id=letter.message_id)
    assert (row.target_subscriber, row.published_at) == ("probe_b", None)


def test_replay_group_replays_every_open_letter_with_the_same_subscriber_reason_and_type(admin_client):
    chosen, same_group = a_dead_letter(), a_dead_letter()
    other = a_dead_letter(reason="invalid_payload")

    act(admin_client, "outbox/deadletter", "replay_group", [chosen.pk])

    assert DeadLetter.objects.get(pk=same_group.pk).status == "replayed"
    assert DeadLetter.objects.get(pk=other.pk).status == "open"


def test_discard_asks_for_a_note_and_keeps_it(admin_client):
    letter = a_dead_letter()

    form = act(admin_client, "outbox/deadletter", "discard", [letter.pk])
    assert form.status_code == 200 and b"Why:" in form.content
    act(admin_client, "outbox/deadletter", "discard", [letter.pk], apply="Discard", note="")
    assert DeadLetter.objects.get(pk=letter.pk).status == "open"
    act(admin_client, "outbox/deadletter", "discard", [letter.pk], apply="Discard", note="duplicate order")

    letter.refresh_from_db()
    assert letter.status == "discarded" and "duplicate order" in letter.note and letter.resolved_by == "admin"


def test_the_overview_shows_pending_rows_their_age_and_the_routing_table(admin_client):
    Customer("alice").request()

    html = admin_client.get("/admin/outbox/outboxmessage/overview/").content.decode()

    assert "delivery.requested" in html and "delivery.join_timed_out" in html
    assert "drones.handlers.on_delivery_requested" in html and "(scheduled)" in html


def test_a_delivery_page_shows_its_timeline_and_can_be_cancelled_by_an_operator(admin_client):
    delivery_id = UUID(Customer("alice").request().json()["deliveryId"])

    html = admin_client.get(f"/admin/deliveries/delivery/{delivery_id}/change/").content.decode()
    assert "delivery.requested" in html and "drones pending" in html

    act(admin_client, "deliveries/delivery", "cancel", [delivery_id])
    delivery = Delivery.objects.get(pk=delivery_id)
    assert (delivery.status, delivery.status_reason) == ("cancelled", "cancelled_by_operator")
    assert OutboxMessage.objects.filter(type="delivery.cancelled", correlation_id=delivery_id).exists()


def test_domain_state_is_read_only_in_the_admin(admin_client):
    from drones.services import seed_fleet

    seed_fleet(count=1, latitude=47.6, longitude=-122.3)
    drone = Drone.objects.get()
    page = admin_client.get(f"/admin/drones/drone/{drone.pk}/change/")
    assert page.status_code == 200 and b'name="status"' not in page.content
    admin_client.post(f"/admin/drones/drone/{drone.pk}/change/", {"status": "in_flight"})
    assert Drone.objects.get().status == "available"


def test_grounding_and_returning_a_drone_publish_events(admin_client):
    from drones.services import seed_fleet

    seed_fleet(count=1, latitude=47.6, longitude=-122.3)
    drone = Drone.objects.get()

    act(admin_client, "drones/drone", "ground", [drone.pk])
    assert Drone.objects.get().status == "maintenance"
    act(admin_client, "drones/drone", "return_to_service", [drone.pk])
    assert Drone.objects.get().status == "available"
    assert list(
        OutboxMessage.objects.filter(stream=f"drone:{drone.pk}").order_by("sequence").values_list("type", flat=True)
    ) == [
        "drone.grounded",
        "drone.returned_to_service",
    ]


def test_the_waiting_list_shows_who_waits_in_line_order_and_the_fleet_page_sums_the_fleet(admin_client):
    from drones.services import seed_fleet

    seed_fleet(count=1, latitude=47.6205, longitude=-122.3493)
    alice = Customer("alice")
    ids = [alice.request().json()["deliveryId"] for _ in range(3)]
    for delivery in ids:
        dispatch(
            subscriber="drones",
            body=OutboxMessage.objects.get(type="delivery.requested", correlation_id=delivery).envelope(),
        )

    page = admin_client.get("/admin/drones/waitingdelivery/")
    assert page.status_code == 200
    assert [str(a.delivery_id) for a in page.context["cl"].result_list] == ids[1:]  # the first has the drone
    assert "waiting for a drone" in page.content.decode()
    fleet = admin_client.get("/admin/drones/drone/").content.decode()
    assert "Fleet: 0 available, 1 reserved, 0 in flight, 0 maintenance." in fleet
    assert "Waiting list: 2 waiting for a drone, 0 planned for later." in fleet


def test_a_delivery_in_transit_long_past_its_eta_is_listed_as_overdue(admin_client, settings):
    settings.DELIVERY_OVERDUE_AFTER_SECONDS = 600
    alice, now = Customer("alice"), timezone.now()
    lost, late_but_not_yet, arrived = (UUID(alice.request().json()["deliveryId"]) for _ in range(3))
    Delivery.objects.filter(pk=lost).update(status="in_transit", eta=now - timedelta(minutes=11))
    Delivery.objects.filter(pk=late_but_not_yet).update(status="in_transit", eta=now - timedelta(minutes=9))
    Delivery.objects.filter(pk=arrived).update(status="delivered", eta=now - timedelta(hours=1))

    page = admin_client.get("/admin/deliveries/overduedelivery/")

    assert page.status_code == 200
    assert [d.pk for d in page.context["cl"].result_list] == [lost]
    assert "11\xa0minutes" in page.content.decode()  # how long past its ETA
    assert "Overdue deliveries" in admin_client.get("/admin/").content.decode()


def test_a_delivery_awaiting_a_confirmation_long_past_its_timeout_is_listed_as_overdue(admin_client, settings):
    settings.DELIVERY_OVERDUE_AFTER_SECONDS, settings.DELIVERY_CONFIRMATION_TIMEOUT_SECONDS = 600, 300
    alice, now = Customer("alice"), timezone.now()
    forgotten, still_waiting = (UUID(alice.request().json()["deliveryId"]) for _ in range(2))
    awaiting = Delivery.objects.filter(status="requested")
    awaiting.filter(pk=forgotten).update(status="awaiting_confirmation", eta=now - timedelta(minutes=30))
    awaiting.filter(pk=still_waiting).update(status="awaiting_confirmation", eta=now - timedelta(minutes=30))
    Delivery.objects.filter(pk=forgotten).update(updated_at=now - timedelta(minutes=16))  # timeout + margin: 15
    Delivery.objects.filter(pk=still_waiting).update(updated_at=now - timedelta(minutes=14))

    page = admin_client.get("/admin/deliveries/overduedelivery/")

    assert [d.pk for d in page.context["cl"].result_list] == [forgotten]


def test_the_fleet_map_asks_no_tile_server_unless_one_is_configured(admin_client, settings):
    """Offline, the default tile server failed in the browser's console only; now none is the default."""
    assert 'data-tiles=""' in admin_client.get("/admin/drones/drone/map/").content.decode()
    settings.FLEET_MAP_TILE_URL = "https://tiles.example.org/{z}/{x}/{y}.png"
    assert (
        'data-tiles="https://tiles.example.org/{z}/{x}/{y}.png"'
        in admin_client.get("/admin/drones/drone/map/").content.decode()
    )
