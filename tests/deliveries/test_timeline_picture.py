"""A delivery's sequence diagram: on its admin page, and from the customer API for support staff."""

import re

from django.test import Client
from outbox_tests.pictures import assert_every_text_fits_and_clears_the_loops

from deliveries.models import Delivery
from deliveries.timeline_picture import timeline_svg
from outbox.handling.dispatch import dispatch
from outbox.models import OutboxMessage
from outbox.testing import run_choreography
from tests.factories import dead_letter_then_replay, notification_dead_letters_then_replays, requested


def test_the_timeline_is_also_a_sequence_diagram_for_whoever_asks_for_one(customer, other_customer, fleet, db):
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)
    path = f"/api/deliveries/{delivery_id}/timeline"

    by_format = customer.client.get(f"{path}?format=svg")
    by_accept = customer.client.get(path, headers={"Accept": "image/svg+xml"})
    either = customer.client.get(path, headers={"Accept": "*/*"})

    for answer in (by_format, by_accept):
        assert answer.status_code == 200 and answer["Content-Type"] == "image/svg+xml"
        drawn = answer.content.decode()
        assert drawn.startswith("<svg") and 'data-lane="customer (API)"' in drawn and ">request<" in drawn
        for event in either.json():  # every event the JSON lists is a row of the picture
            assert f'data-type="{event["type"]}"' in drawn
    assert either["Content-Type"].startswith("application/json") and either.json()[0]["type"] == "delivery.requested"
    refused = customer.client.get(f"{path}?format=png")
    assert refused.status_code == 422 and "format" in refused.content.decode()
    assert other_customer.client.get(f"{path}?format=svg").status_code == 404
    timeline = Client().get("/api/openapi.json").json()["paths"]["/api/deliveries/{delivery_id}/timeline"]["get"]
    assert set(timeline["responses"]["200"]["content"]) == {"application/json", "image/svg+xml"}


def test_the_delivery_page_draws_letters_replays_duplicates_and_live_timers(admin_client, customer, fleet, db):
    delivery_id = requested(customer)
    letter = dead_letter_then_replay(delivery_id)
    first = OutboxMessage.objects.get(correlation_id=delivery_id, type="delivery.requested", target_subscriber="")
    dispatch(subscriber="packages", body=first.envelope())  # a copy the broker delivered twice

    html = admin_client.get(f"/admin/deliveries/delivery/{delivery_id}/change/").content.decode()

    assert 'class="outbox-picture sequence"' in html
    assert html.index('class="outbox-picture sequence"') < html.index(
        "<th>published by</th>"
    )  # above the timeline table
    assert f'href="/admin/outbox/deadletter/{letter.pk}/change/"' in html
    assert f"delivery.dispatched: dead letter, handler_error (x{letter.attempts})" in html
    assert "delivery.dispatched replayed to notifications" in html
    assert "1 duplicate copy of delivery.requested skipped" in html
    assert 'class="edge timer pending"' not in html  # ended: its timers were withdrawn
    waiting = requested(customer)
    page = admin_client.get(f"/admin/deliveries/delivery/{waiting}/change/").content.decode()
    assert 'class="edge timer pending"' in page  # its timers, still to fire


def test_the_notifications_lane_letters_and_replays_are_drawn_whole_and_clear_of_its_loops(customer, fleet, db):
    delivery_id = notification_dead_letters_then_replays(customer)

    drawn = timeline_svg(Delivery.objects.get(pk=delivery_id))

    assert re.search(r">notification.due: dead letter, handler_error \(x\d+\)<", drawn)
    assert "notification.due replayed to notifications" in drawn
    assert_every_text_fits_and_clears_the_loops(drawn)
