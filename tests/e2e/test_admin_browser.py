"""An operator in a real browser (headless Debian Chromium): find a dead letter, replay it, see it processed;
go from the index to the messaging overview, and from a delivery to its drone and back.

With UPDATE_SCREENSHOTS=1 the pages are saved to docs/screenshots/ for docs/operations.md.
"""

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone
from outbox_tests.letters import a_dead_letter
from outbox_tests.probe.models import Effect, Outage
from outbox_tests.probe.services import ping

from deliveries.models import Delivery
from drones.models import Drone
from drones.services import seed_fleet
from outbox.models import DeadLetter, Heartbeat
from outbox.testing import hand_over, run_choreography
from tests.factories import BASE, dead_letter_then_replay, notification_dead_letters_then_replays, requested
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Flags for a closed network: without them Chromium keeps trying to reach Google's hosts.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
]


@pytest.fixture
def browser(monkeypatch):
    if not os.path.exists(CHROMIUM):
        pytest.skip("needs Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are
    # still plain synchronous code, which Django allows with this documented switch.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()
        # The test's queries ran in Playwright's context, and Django keeps a connection per context:
        # closed here, or it outlives the test and the test database cannot be dropped at the end.
        connections.close_all()


@pytest.fixture
def screenshots(tmp_path) -> Path:
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        target = Path(settings.BASE_DIR) / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        return target
    return tmp_path


def log_in(page, live_server, next: str) -> None:
    page.goto(f"{live_server.url}/admin/login/?next={next}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "correct horse")
    page.click("input[type=submit]")


def test_an_operator_replays_a_dead_letter_from_the_admin_and_sees_it_processed(
    live_server, browser, system, screenshots
):
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    Outage.objects.create(subscriber="probe_b")
    ping(n=7, fail={"probe_b": "outage"})
    letter = wait_until(lambda: DeadLetter.objects.filter(subscriber="probe_b").first(), what="a dead letter")
    Outage.objects.all().delete()  # the fault is fixed; now the operator acts

    page = browser.new_page(viewport={"width": 1280, "height": 900})  # the screenshots' width
    log_in(page, live_server, "/admin/outbox/deadletter/")
    page.wait_for_selector("#result_list")
    assert "handler_error" in page.inner_text("#result_list")
    page.screenshot(path=str(screenshots / "dead-letters.png"), full_page=True)

    page.click(f"#result_list a[href$='/deadletter/{letter.pk}/change/']")
    page.wait_for_selector("text=Traceback")
    page.screenshot(path=str(screenshots / "dead-letter.png"), full_page=True)

    page.go_back()
    page.check(f"input[name=_selected_action][value='{letter.pk}']")
    page.select_option("select[name=action]", "replay")
    page.click("button[name=index]")
    page.wait_for_selector("text=Replayed 1 dead letter(s) through the outbox.")

    wait_until(lambda: Effect.objects.filter(subscriber="probe_b").exists(), what="the replay to be processed")
    page.goto(f"{live_server.url}/admin/outbox/outboxmessage/timeline/{letter.correlation_id}/")
    assert "✓ probe_b" in page.inner_text("#content")
    page.goto(f"{live_server.url}/admin/outbox/outboxmessage/overview/")
    page.screenshot(path=str(screenshots / "overview.png"), full_page=True)
    page.goto(f"{live_server.url}/admin/outbox/deadletter/{letter.pk}/change/")
    assert "replayed" in page.inner_text("#content")


@pytest.fixture
def delivered(customer, fleet, db) -> Delivery:
    """A delivery flown to the end: its drone back home, its assignment released; and an operator."""
    delivery_id = requested(customer)
    run_choreography(correlation_id=delivery_id)
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    return Delivery.objects.get(pk=delivery_id)


def test_an_operator_follows_a_delivery_from_the_overview_to_its_drone(live_server, delivered, browser):
    delivery_id, drone = delivered.pk, Drone.objects.get(pk=delivered.drone_id)

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, live_server, "/admin/")
    page.click("#messaging-overview th a")
    page.wait_for_url("**/admin/outbox/outboxmessage/overview/")
    assert "delivery.requested" in page.inner_text("#content")

    page.go_back()
    page.click("#content-main th a[href$='/admin/deliveries/delivery/']")
    page.click(f"#result_list a[href$='/delivery/{delivery_id}/change/']")
    page.wait_for_url(f"**/delivery/{delivery_id}/change/")
    page.click(f".field-drone a:text-is('{drone.name}')")

    page.wait_for_url(f"**/drones/drone/{drone.pk}/change/")
    assignment = page.locator(".field-assignments tr.assignment", has_text=str(delivery_id))
    assert "Released" in assignment.inner_text()
    assignment.locator(f"a[href$='/delivery/{delivery_id}/change/']").click()

    page.wait_for_url(f"**/delivery/{delivery_id}/change/")
    assert "Delivered" in page.inner_text(".field-status")


def test_the_console_draws_a_delivery_as_a_sequence_diagram_and_the_choreography_as_a_map(
    live_server, customer, fleet, db, browser, screenshots
):
    """One delivery dead-lettered on its way and replayed, one delivered plainly: the pictures
    an operator reads instead of tables."""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    plain = requested(customer)
    run_choreography(correlation_id=plain)
    troubled = requested(customer)
    letter = dead_letter_then_replay(troubled)

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, live_server, f"/admin/deliveries/delivery/{troubled}/change/")
    diagram = page.locator("svg.sequence")
    diagram.wait_for()
    lanes = diagram.locator(".lane-head").all_text_contents()
    assert lanes == ["customer (API)", "deliveries", "packages", "drones", "notifications", "webhooks"]
    drawn = diagram.text_content()
    assert "delivery.requested" in drawn and "drone.arrived" in drawn and "delivery.completed" in drawn
    red = diagram.locator("g.edge.dead")
    assert red.count() == 1 and "handler_error" in red.text_content()
    assert red.locator("a").get_attribute("href").endswith(f"/deadletter/{letter.pk}/change/")
    assert diagram.locator("g.edge.replay").count() == 1
    diagram.screenshot(path=str(screenshots / "sequence.png"))

    page.goto(f"{live_server.url}/admin/outbox/outboxmessage/overview/")
    choreography_map = page.locator("svg.choreography")
    choreography_map.wait_for()
    requested_row = choreography_map.locator("g.edge[data-type='delivery.requested']")
    assert requested_row.locator("g[data-subscriber='drones']").text_content() == "2/h"
    assert choreography_map.locator("g.edge.timer").count() >= 4
    choreography_map.screenshot(path=str(screenshots / "choreography.png"))


def test_the_fleet_map_draws_every_drone_in_its_state_with_no_network(
    live_server, customer, fleet, db, browser, screenshots, settings
):
    """No tile server (a closed network, as in CI): the drones on a plain grid, coloured by state;
    one delivered (its drone home again), one reserved, one waiting for a drone."""
    settings.FLEET_MAP_TILE_URL = ""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    run_choreography(correlation_id=requested(customer))
    reserved = requested(customer)
    hand_over("delivery.requested", correlation_id=reserved, to="drones")
    Drone.objects.exclude(status=Drone.Status.RESERVED).update(status=Drone.Status.MAINTENANCE)
    waiting = requested(customer)
    hand_over("delivery.requested", correlation_id=waiting, to="drones")  # no free drone: it waits

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, live_server, "/admin/")
    page.click("#fleet-map-link a")
    page.wait_for_selector("#fleet-map[data-drawn='3']")
    assert page.locator("path.drone-reserved").count() == 1
    assert page.locator("path.drone-maintenance").count() == 2
    assert page.locator("path.waiting").count() == 1
    assert page.locator("img.leaflet-tile").count() == 0  # nothing asked of a tile server
    assert page.locator(".leaflet-control-scale-line").inner_text().strip()  # distances, with no tiles
    assert "1 delivery waiting for a drone" in page.inner_text("#fleet-counts")
    shown = page.locator("#fleet-map").bounding_box()
    for mark in page.locator("path.drone, path.waiting, path.route").all():  # fitted: nothing off the edges
        box = mark.bounding_box()
        assert (
            within(box, shown) and shown["y"] <= box["y"] and box["y"] + box["height"] <= shown["y"] + shown["height"]
        )
    page.locator("path.drone-reserved").click(force=True)
    drone = Drone.objects.get(status=Drone.Status.RESERVED)
    assert page.locator(".leaflet-popup-content a").get_attribute("href").endswith(f"/drones/drone/{drone.pk}/change/")
    page.screenshot(path=str(screenshots / "fleet-map.png"))

    page.goto(f"{live_server.url}/admin/deliveries/delivery/{waiting}/change/")
    page.click(".field-on_the_map a")
    page.wait_for_selector(f"#fleet-map[data-delivery='{waiting}'][data-drawn='3']")


def test_the_fleet_map_falls_back_to_its_grid_when_the_tile_server_is_out_of_reach(
    live_server, fleet, browser, settings
):
    """With OpenStreetMap's tiles (then the default) out of reach, the map was an empty grey box."""
    settings.FLEET_MAP_TILE_URL = "http://127.0.0.1:9/{z}/{x}/{y}.png"  # nothing answers there: as offline
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    log_in(page, live_server, "/admin/")
    page.click("#fleet-map-link a")
    page.wait_for_selector("#fleet-map[data-fallback='grid'][data-drawn='3']")
    assert page.locator("path.grid-line").count() > 0 and page.locator("path.drone-available").count() == 3


@pytest.mark.parametrize("width", [1280, 1400, 1920])
def test_the_console_links_on_the_index_keep_their_line_and_no_two_sections_look_alike(live_server, db, browser, width):
    """Django's dashboard squeezed "Messaging overview" and "Fleet map" to a letter a line,
    and a "Messaging" section stood above the outbox app's own."""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    page = browser.new_page(viewport={"width": width, "height": 900})
    log_in(page, live_server, "/admin/")
    page.wait_for_selector("#messaging-overview")

    for link in page.locator("#messaging-overview th a").all():
        box, line = link.bounding_box(), float(link.evaluate("a => parseFloat(getComputedStyle(a).lineHeight) || 16"))
        assert box["height"] < 1.6 * line, f"{link.inner_text()!r} wraps at {width} px: {box}"
    captions = [c.strip() for c in page.locator("#content-main caption").all_inner_texts()]
    assert len(captions) == len(set(captions)) and not [c for c in captions if c == "Messaging"], captions


def test_at_1280_px_what_needs_attention_is_the_first_thing_on_the_index(
    live_server, db, browser, settings, screenshots
):
    """With 15 open dead letters the index looked as it did with none."""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    for _ in range(15):
        a_dead_letter()
    now = timezone.now()
    silent_since = now - timedelta(seconds=4 * settings.OUTBOX_HEARTBEAT_SECONDS)
    Heartbeat.objects.create(process="relay@gone:1", kind="relay", started_at=silent_since, last_seen=silent_since)

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, "/admin/")
    block = page.locator("#needs-attention")
    block.wait_for()

    assert block.bounding_box()["y"] < 900  # above the fold
    assert block.bounding_box()["y"] < page.locator("#messaging-overview").bounding_box()["y"]
    assert "15 open dead letters" in page.inner_text("#attention-dead-letters")
    assert "1 silent relay or worker" in page.inner_text("#attention-silent-processes")
    page.screenshot(path=str(screenshots / "index.png"), full_page=True)
    page.click("#attention-dead-letters a >> nth=0")
    page.wait_for_url("**/admin/outbox/deadletter/?status=open")
    assert page.locator("#result_list tbody tr").count() == 15


def within(inner: dict, outer: dict) -> bool:
    return inner["x"] >= outer["x"] - 0.5 and inner["x"] + inner["width"] <= outer["x"] + outer["width"] + 0.5


def test_at_1280_px_every_page_an_operator_reads_fits_and_leads_with_what_matters(
    live_server, customer, fleet, db, browser, screenshots
):
    """A delivery's diagram sat below twenty fields with its notifications lane cut off,
    the dead-letter list ran past the page, its page led with a whole traceback, and the overview's
    gaps and stale counts gave no hint what they mean."""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    troubled = requested(customer)
    letter = dead_letter_then_replay(troubled)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, "/admin/")
    page.wait_for_selector("#messaging-overview")

    page.goto(f"{live_server.url}/admin/deliveries/delivery/{troubled}/change/")
    diagram, content = page.locator("svg.sequence"), page.locator("#content-main").bounding_box()
    assert diagram.bounding_box()["y"] < page.locator(".field-status").bounding_box()["y"]  # first, not below
    lanes = diagram.locator(".lane-head")
    assert lanes.count() == 6
    for lane in lanes.all():
        assert within(lane.bounding_box(), content), lane.text_content()
    assert within(page.locator("#timeline table").bounding_box(), page.locator("#timeline").bounding_box())
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.screenshot(path=str(screenshots / "delivery.png"), full_page=True)

    page.goto(f"{live_server.url}/admin/outbox/deadletter/?status=all")  # replayed: under "All", not "Open"
    results = page.locator("#changelist .results")
    assert page.locator("#result_list thead th").last.text_content().strip() == "Timeline"
    assert within(page.locator("#result_list").bounding_box(), results.bounding_box())
    assert page.evaluate("(e) => e.scrollWidth <= e.clientWidth", results.element_handle())

    page.click(f"#result_list a[href*='/deadletter/{letter.pk}/change/']")  # with ?_changelist_filters=
    # Read the letter's page once loaded (wait_for_url waits for its load event): CI5 here, under
    # load, read its .field-error while the page was still arriving, and found it empty.
    page.wait_for_url(f"**/deadletter/{letter.pk}/change/**")
    assert page.locator(".field-error").inner_text().endswith("the SMS gateway is down")
    assert not page.locator("text=Traceback (most recent call last)").is_visible()  # one click away
    page.click(".field-pretty_traceback summary")
    assert page.locator("text=Traceback (most recent call last)").is_visible()

    page.goto(f"{live_server.url}/admin/outbox/outboxmessage/overview/")
    assert "not to alarm" in page.inner_text("#ordering-hint")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    # The map fits its box whole: no right-hand label cut ("no subscri…").
    picture = page.locator("#choreography-map svg")
    assert within(picture.bounding_box(), page.locator("#choreography-map").bounding_box())
    assert page.evaluate("(e) => e.scrollWidth <= e.clientWidth", page.locator("#choreography-map").element_handle())
    for label in page.locator("#choreography-map svg text").all():
        assert within(label.bounding_box(), picture.bounding_box()), label.text_content()


def test_the_api_docs_show_every_operation_with_nothing_from_the_internet(live_server, db, browser):
    """Swagger UI came from a CDN (a blank page on a closed network); then, served from
    here, it refused the schema for a 202 named twice and showed a parser error, no operation."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    outside = []
    page.route(
        lambda url: not url.startswith(live_server.url),
        lambda route: (outside.append(route.request.url), route.abort()),
    )
    page.goto(f"{live_server.url}/api/docs")

    page.wait_for_selector(".swagger-ui .opblock")
    assert page.locator(".swagger-ui .opblock").count() >= 7
    assert "Parser error" not in page.inner_text("body") and outside == []


def test_an_operator_replays_a_group_of_one_cause_at_1280_px(live_server, db, browser, screenshots):
    """Two hundred letters of one outage were two hundred rows; now one group, one click."""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    outage = [a_dead_letter(error=f"SMS gateway 10.0.0.{n} refused: 503 at 2026-12-06T06:{n:02}:00Z") for n in range(4)]
    a_dead_letter(subscriber="probe_a", reason="invalid_payload", error="1 validation error for Pinged")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, "/admin/outbox/deadletter/")

    page.click("text=In groups of one cause")
    page.wait_for_selector("#dead-letter-groups")
    rows = page.locator("#dead-letter-groups tr.group")
    assert rows.count() == 2 and rows.first.locator("td").first.inner_text().startswith("4")
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    page.screenshot(path=str(screenshots / "dead-letter-groups.png"), full_page=True)

    rows.first.locator("button[value=replay]").click()
    page.wait_for_selector("text=Replayed 4 dead letter(s) of group")
    assert page.locator("#dead-letter-groups tr.group").count() == 1
    replayed = DeadLetter.objects.filter(pk__in=[letter.pk for letter in outage])
    assert set(replayed.values_list("status", flat=True)) == {"replayed"}


def test_the_fleet_map_under_load_fits_every_drone_and_waiting_delivery_at_1280_px(
    live_server, customer, db, browser, screenshots, settings
):
    """Under load the view was not fitted, and waiting rings ran off its edges."""
    settings.FLEET_MAP_TILE_URL = ""
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")
    seed_fleet(count=12, latitude=BASE[0], longitude=BASE[1], spread_km=8)
    for _ in range(20):  # twelve get a drone, eight wait for one
        hand_over("delivery.requested", correlation_id=requested(customer), to="drones")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, "/admin/drones/drone/map/")
    page.wait_for_selector("#fleet-map[data-drawn='12']")
    assert "12 reserved, 8 deliveries waiting for a drone" in page.inner_text("#fleet-counts")
    shown = page.locator("#fleet-map").bounding_box()
    for mark in page.locator("path.drone, path.waiting").all():
        box = mark.bounding_box()
        assert within(box, shown) and shown["y"] <= box["y"] <= shown["y"] + shown["height"] - box["height"]
    page.screenshot(path=str(screenshots / "fleet-map-under-load.png"))


# Each text of the sequence diagram, and each loop, as Chromium lays them out (user units of the viewBox).
DIAGRAM_LAYOUT = """svg => {
  const box = e => { const b = e.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
  const loops = [...svg.querySelectorAll('path')].filter(p => !p.closest('defs')).map(box);
  return {
    width: svg.viewBox.baseVal.width,
    texts: [...svg.querySelectorAll('text')].map(t => [t.textContent, box(t)]),
    loops,
  };
}"""
# How many lines an element's text takes: the distinct tops of its line boxes.
LINES = """e => {
  const range = document.createRange(); range.selectNodeContents(e);
  return new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top))).size;
}"""


def test_the_diagram_on_a_deliverys_page_shows_every_label_whole_at_1280_px(live_server, browser, customer, fleet):
    delivery_id = notification_dead_letters_then_replays(customer)
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, f"/admin/deliveries/delivery/{delivery_id}/change/")
    layout = page.locator("#sequence-diagram svg").evaluate(DIAGRAM_LAYOUT)

    texts = dict(layout["texts"])
    assert any(t.startswith("notification.due: dead letter, handler_error") for t in texts)
    assert "notification.due replayed to notifications" in texts
    for text, (left, top, right, bottom) in layout["texts"]:
        assert left >= 0 and right <= layout["width"], f"{text!r} spans {left}..{right} of {layout['width']}"
        for x1, y1, x2, y2 in layout["loops"]:
            assert right <= x1 or x2 <= left or bottom <= y1 or y2 <= top, f"{text!r} is drawn over a loop"


def test_the_timeline_table_keeps_numbers_and_names_on_one_line_at_1280_px(
    live_server, browser, customer, fleet, screenshots
):
    delivery_id = notification_dead_letters_then_replays(customer)
    User.objects.create_superuser("ops", "ops@example.com", "correct horse")

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    log_in(page, live_server, f"/admin/deliveries/delivery/{delivery_id}/change/")
    rows = page.locator("#timeline tbody tr")
    rows.first.wait_for()

    assert rows.count() >= 14
    numbers = rows.locator("td:nth-child(1)")
    publishers = rows.locator("td:nth-child(4)")
    subscribers = rows.locator("td:nth-child(7) > :not(br)")
    assert numbers.all_inner_texts()[9:] == [str(n) for n in range(10, rows.count() + 1)]
    for cells in (numbers, publishers, subscribers):
        for cell in cells.all():
            assert cell.evaluate(LINES) == 1, f"{cell.inner_text()!r} takes more than one line"
    caused_by = rows.locator("td:nth-child(6)").all_inner_texts()
    # The request's two events (delivery.requested, its status change) begin the story; each other names its row.
    assert caused_by[:2] == ["(origin)", "(origin)"] and all(cause.startswith("#") for cause in caused_by[2:])
    page.locator("#timeline").screenshot(path=str(screenshots / "timeline.png"))
