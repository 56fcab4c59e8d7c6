"""A correlation's timeline drawn as a sequence diagram (pure: hand-built timelines)."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from xml.etree import ElementTree

from outbox_tests.pictures import assert_every_text_fits_and_clears_the_loops, extents

from outbox.console.sequence_diagram import causal_order, offset, render

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SVG = "{http://www.w3.org/2000/svg}"
LANES = ("customer (API)", "deliveries", "packages", "drones", "notifications")


def event(type, publisher, subscribers, *, at=0.0, cause=None, scheduled=False, **copies):
    """A timeline entry as outbox.console.timeline writes it; `copies` overrides a subscriber's handling."""
    return {
        "type": type,
        "message_id": uuid.uuid4(),
        "causation_id": cause["message_id"] if cause else None,
        "occurred_at": T0 + timedelta(seconds=at),
        "published_by": publisher,
        "scheduled": scheduled,
        "subscribers": [
            {
                "subscriber": s,
                "outcome": "processed",
                "duplicates": 0,
                "dead_letter": None,
                "replayed_at": None,
                **copies.get(s, {}),
            }
            for s in subscribers
        ],
    }


def test_events_are_drawn_in_the_order_they_happened_and_never_before_their_cause():
    requested = event("delivery.requested", "deliveries", ["drones"], at=0)
    timer = event("delivery.deadline_passed", "deliveries", ["deliveries"], at=30)
    scheduled = event("drone.scheduled", "drones", ["deliveries"], at=-0.5, cause=requested)  # a host's clock behind
    ready = event("package.ready", "packages", ["deliveries"], at=1, cause=requested)

    assert causal_order([requested, timer, scheduled, ready]) == [requested, scheduled, ready, timer]


def test_an_earlier_event_is_not_drawn_after_a_later_siblings_effects():
    requested = event("delivery.requested", "deliveries", ["drones", "packages"], at=0)
    scheduled = event("drone.scheduled", "drones", ["deliveries"], at=2, cause=requested)
    ready = event("package.ready", "packages", ["deliveries"], at=1, cause=requested)
    assigned = event("drone.assigned", "drones", ["deliveries"], at=0.5, cause=scheduled)  # a clock behind

    assert causal_order([requested, assigned, ready, scheduled]) == [requested, ready, scheduled, assigned]


def test_offsets_read_as_people_say_them():
    assert [offset(timedelta(seconds=s)) for s in (0, 0.85, 4.21, 185, 7800)] == [
        "+0 ms",
        "+850 ms",
        "+4.2 s",
        "+3 min 05 s",
        "+2 h 10 min",
    ]


def test_dead_letters_replays_duplicates_and_pending_timers_are_each_drawn_their_own_way():
    requested = event("delivery.requested", "deliveries", ["drones", "packages"])
    dispatched = event(
        "delivery.dispatched",
        "deliveries",
        ["notifications", "packages"],
        at=2,
        cause=requested,
        notifications={
            "dead_letter": {
                "id": 7,
                "reason": "handler_error",
                "attempts": 4,
                "first_failed_at": T0 + timedelta(seconds=3),
            },
            "replayed_at": T0 + timedelta(seconds=40),
        },
        packages={"duplicates": 2},
    )
    deadline = event("delivery.deadline_passed", "deliveries", ["deliveries"], at=7200, scheduled=True)
    drawn = render(
        [requested, dispatched, deadline],
        lanes=LANES,
        now=T0 + timedelta(seconds=60),
        origin=("customer (API)", "deliveries"),
        link=lambda pk: f"/admin/outbox/deadletter/{pk}/change/",
    )

    assert [lane for lane in re.findall(r'data-lane="([^"]+)"', drawn)] == list(LANES)
    assert drawn.count(">request<") == 1  # the uncaused request, from the customer's lane
    assert re.search(r'<g class="edge dead"[^>]*><a href="/admin/outbox/deadletter/7/change/">', drawn)
    assert "delivery.dispatched: dead letter, handler_error (x4)" in drawn
    assert "delivery.dispatched replayed to notifications" in drawn and 'class="edge replay"' in drawn
    assert "2 duplicate copies of delivery.dispatched skipped" in drawn and 'class="edge faint"' in drawn
    assert 'class="edge timer pending"' in drawn and "fires in 1 h 59 min" in drawn
    assert drawn == render(
        [requested, dispatched, deadline],
        lanes=LANES,
        now=T0 + timedelta(seconds=60),
        origin=("customer (API)", "deliveries"),
        link=lambda pk: f"/admin/outbox/deadletter/{pk}/change/",
    )


def test_a_party_outside_the_lanes_gets_a_lane_and_hostile_text_is_escaped():
    strange = event("<script>alert(1)</script>", "elsewhere", ["drones"])
    drawn = render([strange], lanes=LANES, now=T0)

    assert 'data-lane="elsewhere"' in drawn
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn
    assert "No events yet." in render([], lanes=LANES, now=T0)


def test_hostile_lane_names_are_escaped_in_their_heads_rows_and_attributes():
    context, subscriber = "R&D <script>alert(1)</script>", '<script>alert("2")</script> & co'
    strange = event(
        "delivery.requested",
        context,
        [subscriber],
        **{
            subscriber: {
                "dead_letter": {"id": 7, "reason": "handler_error", "attempts": 4, "first_failed_at": T0},
                "replayed_at": T0 + timedelta(seconds=40),
                "duplicates": 1,
            }
        },
    )
    drawn = render([strange], lanes=(*LANES, context), now=T0)

    assert "<script>" not in drawn and "</script>" not in drawn
    assert re.findall(r"&(?!amp;|lt;|gt;|quot;)", drawn) == []  # every ampersand is an entity's
    root = ElementTree.fromstring(drawn)  # well-formed: each name is text, not markup
    heads = [g for g in root.iter(f"{SVG}g") if g.get("class") == "lane-head"]
    assert [(g.get("data-lane"), g.find(f"{SVG}text").text) for g in heads][-2:] == [
        (context, context),
        (subscriber, subscriber),
    ]
    assert f"delivery.requested replayed to {subscriber}" in "".join(root.itertext())


def test_every_label_fits_the_picture_and_clears_the_loops_even_on_the_last_lane():
    dispatched = event("delivery.dispatched", "deliveries", ["notifications"], at=1)
    letter = {"id": 9, "reason": "handler_error", "attempts": 6, "first_failed_at": T0 + timedelta(seconds=3)}
    due = event(
        "notification.due",
        "notifications",
        ["notifications"],
        at=2,
        cause=dispatched,
        notifications={"dead_letter": letter, "replayed_at": T0 + timedelta(seconds=50), "duplicates": 3},
    )
    deadline = event("delivery.deadline_passed", "deliveries", ["deliveries"], at=60, scheduled=True)
    later = event("notification.reminder_due_for_a_very_long_while", "notifications", ["notifications"], at=90)
    drawn = render([dispatched, due, deadline, later], lanes=LANES, now=T0 + timedelta(seconds=55))

    _, texts, loops = extents(drawn)
    assert "notification.due: dead letter, handler_error (x6)" in [content for content, _ in texts]
    assert len(loops) == 6  # the timers and the copies of notification.due, each a loop of its own lane
    assert_every_text_fits_and_clears_the_loops(drawn)


def test_the_events_one_request_published_together_follow_one_request_arrow():
    """A request that publishes two events in its transaction (they share its moment) is one request;
    a second request later is another."""
    first = event("delivery.requested", "deliveries", ["drones"], at=0)
    its_status = event("delivery.status_changed", "deliveries", ["notifications"], at=0)
    later = event("delivery.cancelled", "deliveries", ["drones"], at=5)

    drawn = render([first, its_status, later], lanes=LANES, now=T0 + timedelta(seconds=60), origin=LANES[:2])

    assert drawn.count(">request<") == 2
