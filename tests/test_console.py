"""The console as an operator reads it: names and links across contexts, places in
degrees, how long each delivery has waited, an assignment's own state, compensations in words, the
ground action's count, the messaging overview from the index, and "View site" that leads somewhere."""

import json
import re
from datetime import timedelta
from html import unescape

import pytest
from django.utils import timezone

import deliveries.admin
import drones.admin
from common.display import coordinates
from deliveries.models import Delivery
from drones.admin import WaitingListAdmin, waited_for
from drones.models import Assignment, Drone
from drones.services import seed_fleet
from outbox.handling.dispatch import dispatch
from outbox.models import OutboxMessage
from outbox.testing import hand_over, run_choreography
from tests.console import act
from tests.factories import BASE, requested

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return unescape(response.content.decode())


@pytest.fixture
def delivered(customer, fleet, db):
    """A delivery flown to the end: its drone back home, its assignment released."""
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)
    delivery = Delivery.objects.get(pk=delivery_id)
    assert delivery.status == "delivered"
    return delivery


def test_the_index_links_the_messaging_overview(admin_client):
    index = text(admin_client.get("/admin/"))

    assert 'href="/admin/outbox/outboxmessage/overview/"' in index and "Messaging overview" in index


def test_view_site_leads_to_the_api_docs_and_the_root_is_no_404(admin_client, client):
    index = text(admin_client.get("/admin/"))
    assert re.search(r'<a href="/api/docs">\s*View site\s*</a>', index)

    root = client.get("/")
    assert root.status_code == 302 and root["Location"] == "/api/docs"
    assert client.get(root["Location"]).status_code == 200


def test_the_api_docs_load_swagger_ui_from_this_server_not_a_cdn(client):
    """Swagger UI came from a CDN, and a locked-down network (or this machine) saw a blank page."""
    from django.contrib.staticfiles import finders

    docs = text(client.get("/api/docs"))
    scripts = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', docs)
    assert scripts and all(url.startswith("/static/") for url in scripts), scripts
    assert all(finders.find(url.removeprefix("/static/")) for url in scripts), scripts  # each one is shipped


def test_the_openapi_schema_names_each_key_once(client):
    """The 202 of POST /api/deliveryrequests was there twice ("202" from the links beside ninja's
    202): Swagger UI refused the whole schema ('duplicated mapping key') and showed no operation."""

    def refusing_duplicates(pairs):
        keys = [key for key, _ in pairs]
        assert len(keys) == len(set(keys)), f"duplicated keys: {sorted(k for k in keys if keys.count(k) > 1)}"
        return dict(pairs)

    schema = json.loads(client.get("/api/openapi.json").content, object_pairs_hook=refusing_duplicates)
    accepted = schema["paths"]["/api/deliveryrequests"]["post"]["responses"]["202"]
    assert "links" in accepted and "content" in accepted  # ninja's answer and the links, merged into one


def test_a_delivery_names_its_drone_and_links_to_the_drone_page(admin_client, delivered):
    drone = Drone.objects.get(pk=delivered.drone_id)
    link = f'<a href="/admin/drones/drone/{drone.pk}/change/" title="{drone.pk}">{drone.name}</a>'

    assert link in text(admin_client.get(f"/admin/deliveries/delivery/{delivered.pk}/change/"))
    assert link in text(admin_client.get("/admin/deliveries/delivery/"))


def test_without_the_wiring_a_delivery_links_its_drone_by_a_short_id(admin_client, delivered, monkeypatch):
    monkeypatch.setattr(deliveries.admin, "_drone_names", lambda ids: {})

    page = text(admin_client.get(f"/admin/deliveries/delivery/{delivered.pk}/change/"))

    assert f'href="/admin/drones/drone/{delivered.drone_id}/change/" title="{delivered.drone_id}">' in page
    assert f">{str(delivered.drone_id)[:8]}…</a>" in page


def test_the_delivery_list_looks_its_drones_names_up_once_a_page(admin_client, customer, fleet, db, monkeypatch):
    for _ in range(3):
        hand_over("delivery.requested", correlation_id=requested(customer))
    for delivery_id in Delivery.objects.values_list("pk", flat=True):
        hand_over("drone.scheduled", correlation_id=delivery_id)
    lookups, lookup = [], deliveries.admin._drone_names

    def counted(ids):
        lookups.append(set(ids))
        return lookup(ids)

    monkeypatch.setattr(deliveries.admin, "_drone_names", counted)
    listing = text(admin_client.get("/admin/deliveries/delivery/"))

    assert lookups == [set(Delivery.objects.values_list("drone_id", flat=True))] and len(lookups[0]) == 3
    assert all(drone.name in listing for drone in Drone.objects.all())


def test_a_drone_page_lists_its_assignments_with_links_to_the_deliveries(admin_client, delivered):
    page = text(admin_client.get(f"/admin/drones/drone/{delivered.drone_id}/change/"))

    assignments = page[page.index("assignments") :]
    assert f'<a href="/admin/deliveries/delivery/{delivered.pk}/change/"' in assignments
    assert "<td>Released</td>" in assignments


def test_a_drone_page_shows_its_latest_assignments_and_links_to_all(admin_client, customer, db, monkeypatch):
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    for _ in range(2):
        run_choreography(correlation_id=requested(customer))
    drone = Drone.objects.get()
    monkeypatch.setattr(drones.admin, "RECENT_ASSIGNMENTS", 1)

    page = text(admin_client.get(f"/admin/drones/drone/{drone.pk}/change/"))

    assert page.count('<tr class="assignment">') == 1
    every = re.search(r'<a href="([^"]+)">All 2 assignments of this drone</a>', page)
    listing = admin_client.get(every.group(1))
    assert listing.status_code == 200 and listing.context["cl"].result_count == 2


def test_the_drone_list_links_the_delivery_a_drone_is_reserved_for(admin_client, customer, fleet, db):
    delivery_id = requested(customer)
    hand_over("delivery.requested", correlation_id=delivery_id, to="drones")

    fleet_page = text(admin_client.get("/admin/drones/drone/"))

    assert f'<a href="/admin/deliveries/delivery/{delivery_id}/change/" title="{delivery_id}">' in fleet_page


def test_places_read_in_degrees_not_json(admin_client, delivered):
    Delivery.objects.filter(pk=delivered.pk).update(
        last_known_location={"latitude": 47.63, "longitude": -122.35, "altitude": None}
    )

    page = text(admin_client.get(f"/admin/deliveries/delivery/{delivered.pk}/change/"))

    assert '"latitude"' not in page
    assert "47.6300° N, 122.3500° W" in page  # no altitude: none shown
    assert f"{BASE[0] + 0.01:.4f}° N, {-BASE[1]:.4f}° W, 0 m" in page  # the pickup, given at altitude 0
    assert coordinates(-33.86, 151.21, 12.4) == "33.8600° S, 151.2100° E, 12 m"


def test_an_overdue_delivery_shows_where_it_was_last_seen_in_degrees(admin_client, delivered):
    Delivery.objects.filter(pk=delivered.pk).update(
        status="in_transit",
        eta=timezone.now() - timedelta(hours=1),
        last_known_location={"latitude": 47.63, "longitude": -122.35, "altitude": 80},
    )

    overdue = text(admin_client.get("/admin/deliveries/overduedelivery/"))

    assert "47.6300° N, 122.3500° W, 80 m" in overdue and '"latitude"' not in overdue


def test_the_drone_list_and_page_show_places_in_degrees(admin_client, fleet):
    drone = Drone.objects.order_by("name").first()
    Drone.objects.filter(pk=drone.pk).update(latitude=47.63, longitude=-122.35)

    assert "47.6300° N, 122.3500° W" in text(admin_client.get("/admin/drones/drone/"))
    page = text(admin_client.get(f"/admin/drones/drone/{drone.pk}/change/"))
    assert f"{drone.home_latitude:.4f}° N, {-drone.home_longitude:.4f}° W" in page  # home


def test_the_waiting_list_shows_how_long_each_waited_and_sorts_by_it(admin_client, customer):
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    ids = [requested(customer) for _ in range(3)]
    for delivery_id in ids:
        dispatch(
            subscriber="drones",
            body=OutboxMessage.objects.get(type="delivery.requested", correlation_id=delivery_id).envelope(),
        )
    now, short, long = timezone.now(), ids[1], ids[2]  # the first has the drone
    # In line the short wait comes first (an earlier rank), so only the "waited" sort puts the long one on top.
    Assignment.objects.filter(pk=short).update(waiting_since=now - timedelta(seconds=30), rank_at=now)
    Assignment.objects.filter(pk=long).update(waiting_since=now - timedelta(minutes=4, seconds=12), rank_at=now)
    Assignment.objects.filter(pk=short).update(rank_at=now - timedelta(hours=1))

    page = admin_client.get("/admin/drones/waitingdelivery/")
    html = text(page)
    assert [a.delivery_id for a in page.context["cl"].result_list] == [short, long]
    assert re.search(r"4 min 1[23] s", html) and re.search(r">3[0-2] s<", html)

    assert 'class="sortable column-waited' in html
    by_wait = admin_client.get(f"/admin/drones/waitingdelivery/?o={WaitingListAdmin.list_display.index('waited')}")
    assert [a.delivery_id for a in by_wait.context["cl"].result_list] == [long, short]


def test_waited_reads_in_the_two_units_that_matter():
    assert waited_for(timedelta(seconds=7)) == "7 s"
    assert waited_for(timedelta(minutes=4, seconds=12)) == "4 min 12 s"
    assert waited_for(timedelta(hours=2, minutes=5, seconds=9)) == "2 h 05 min"
    assert waited_for(timedelta(days=1, hours=3)) == "1 d 3 h"


def test_a_released_assignment_shows_its_own_state_not_its_drones(admin_client, delivered):
    drone = Drone.objects.get(pk=delivered.drone_id)
    Drone.objects.filter(pk=drone.pk).update(status="in_flight")  # flying someone else's delivery by now

    listing = text(admin_client.get("/admin/drones/assignment/"))
    page = text(admin_client.get(f"/admin/drones/assignment/{delivered.pk}/change/"))

    for html in (listing, page):
        assert f"{drone.name} (in_flight)" not in html and "in_flight" not in html
        assert f'<a href="/admin/drones/drone/{drone.pk}/change/" title="{drone.pk}">{drone.name}</a>' in html
    assert '<td class="field-status">Released</td>' in listing
    assert re.search(r'Status:</label>\s*<div class="readonly">Released</div>', page)
    assert f'<a href="/admin/deliveries/delivery/{delivered.pk}/change/"' in page


def test_compensations_read_as_words_or_a_dash(admin_client, customer, delivered):
    Delivery.objects.filter(pk=delivered.pk).update(compensations=["drone_released", "package_cancelled"])
    none_yet = requested(customer)

    page = text(admin_client.get(f"/admin/deliveries/delivery/{delivered.pk}/change/"))
    assert "drone released, package cancelled" in page and '["drone_released"' not in page
    fresh = text(admin_client.get(f"/admin/deliveries/delivery/{none_yet}/change/"))
    assert re.search(r'Compensations:</label>\s*<div class="readonly">-</div>', fresh)  # the admin's "empty"


def test_the_ground_action_says_how_many_it_grounded_and_how_many_it_left_flying(admin_client, fleet):
    drones = list(Drone.objects.order_by("name"))
    Drone.objects.filter(pk=drones[0].pk).update(status="in_flight")

    act(admin_client, "drones/drone", "ground", [d.pk for d in drones])

    assert Drone.objects.filter(status="maintenance").count() == 2
    page = text(admin_client.get("/admin/drones/drone/"))
    assert "Grounded 2 drone(s); 1 in flight left alone to finish." in page
    assert f"{drones[0].name.capitalize()} is in_flight" in page  # which one, as before


def test_the_favicon_browsers_ask_for_on_every_page_is_the_consoles_not_a_404(client):
    from django.contrib.staticfiles import finders

    answer = client.get("/favicon.ico")

    assert answer.status_code == 302 and answer["Location"].endswith(".svg")
    assert finders.find(answer["Location"].removeprefix("/static/"))
