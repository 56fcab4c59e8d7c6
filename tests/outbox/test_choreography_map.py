"""The choreography map: drawn from the registry, checked in, and exported by show_routes."""

import io
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from outbox.console import choreography_map
from outbox.console.choreography_map import MARKERS, graph, replace_block, to_dot, to_mermaid, to_svg
from outbox.core.subscriptions import Subscription

DOCS = Path(settings.BASE_DIR) / "docs"
REDRAW = (
    "run `manage.py show_routes --format svg --output docs/figures/choreography.svg` and "
    "`manage.py show_routes --format mermaid --output docs/architecture.md`"
)


def shipped() -> choreography_map.Graph:
    """The graph of what ships: the test suite's probe context left out."""
    return graph(leave_out=frozenset({"probe"}))


def test_the_checked_in_pictures_match_the_code():
    architecture = (DOCS / "architecture.md").read_text()
    assert (DOCS / "figures" / "choreography.svg").read_text() == to_svg(shipped()), REDRAW
    assert replace_block(architecture, to_mermaid(shipped())) == architecture, REDRAW


def _handler(context: str):
    def handle(message):
        pass

    handle.__module__ = f"{context}.handlers"
    return handle


def _sub(subscriber: str, event_type: str, context: str | None = None) -> Subscription:
    return Subscription(subscriber, event_type, _handler(context or subscriber), None, frozenset({1}))


class _Contract:
    def __init__(self, publisher: str):
        self.publisher = publisher

    def source(self) -> str:
        return self.publisher


REGISTRY = {
    "order.placed": [_sub("billing", "order.placed"), _sub("shipping", "order.placed")],
    "order.timed_out": [_sub("orders", "order.timed_out")],
    'bill.<paid> & "done"': [_sub("orders", 'bill.<paid> & "done"')],
    "probe.pinged": [_sub("probe_a", "probe.pinged", "probe")],
    "orphan.subscribed": [_sub("shipping", "orphan.subscribed")],
}
DECLARED = {
    ("order.placed", 1): _Contract("orders"),
    ("order.placed", 2): _Contract("orders"),
    ("order.timed_out", 1): _Contract("orders"),
    ("order.archived", 1): _Contract("orders"),
    ('bill.<paid> & "done"', 1): _Contract("billing"),
    ("probe.pinged", 1): _Contract("probe"),
}


def test_routes_name_the_publisher_the_subscribers_timers_and_contracts_no_one_subscribes_to():
    routes = {r.event_type: r for r in graph(REGISTRY, DECLARED, leave_out=frozenset({"probe"})).routes}

    assert "probe.pinged" not in routes
    assert routes["order.placed"].label == "order.placed v1,2"
    assert routes["order.placed"].subscribers == ("billing", "shipping")
    assert routes["order.timed_out"].timer and not routes["order.placed"].timer
    assert routes["order.archived"].subscribers == ()  # declared, routed to no one
    assert routes["orphan.subscribed"].publisher == "?"  # subscribed, declared by no contract


def test_every_format_draws_every_route_and_escapes_what_it_is_given():
    g = graph(REGISTRY, DECLARED, leave_out=frozenset({"probe"}))
    drawn = to_svg(g, counts={("orders", 'bill.<paid> & "done"'): (3, 1)})

    assert drawn == to_svg(g, counts={("orders", 'bill.<paid> & "done"'): (3, 1)})  # the same bytes
    assert 'bill.&lt;paid&gt; &amp; "done"' in drawn and "<paid>" not in drawn
    assert re.search(r'class="dead"[^>]*data-subscriber="orders"', drawn) and "x1 dead" in drawn and "3/h" in drawn
    assert drawn.count('class="edge timer"') == 1 and drawn.count('class="edge nobody"') == 1
    mermaid, dot = to_mermaid(g), to_dot(g)
    assert 'orders -. "order.timed_out v1" .-> orders' in mermaid and "nobody((no subscriber))" in mermaid
    assert "#quot;done#quot;" in mermaid and '\\"done\\"' in dot
    assert '"orders" -> "billing" [label="order.placed v1,2"];' in dot


def test_open_dead_letters_no_arrow_carries_are_counted_on_the_map_too():
    """A letter with no event type, or of a type nobody handles now, was in the overview's
    table but on no arrow of its map."""
    g = graph(REGISTRY, DECLARED, leave_out=frozenset({"probe"}))
    on_an_arrow = {("orders", 'bill.<paid> & "done"'): (3, 1)}
    assert "on no arrow" not in to_svg(g, counts=on_an_arrow)

    drawn = to_svg(g, counts={**on_an_arrow, ("billing", ""): (0, 2), ("shipping", "gone.type"): (0, 1)})
    assert "+ 3 open dead letter(s) on no arrow" in drawn and 'class="dead elsewhere"' in drawn
    assert "x1 dead" in drawn  # the one on its arrow still there


def test_replacing_the_block_needs_its_markers():
    assert replace_block(f"a\n{MARKERS[0]}\nold\n{MARKERS[1]}\nb", "new\n") == (
        f"a\n{MARKERS[0]}\n```mermaid\nnew\n```\n{MARKERS[1]}\nb"
    )
    with pytest.raises(ValueError, match="no <!-- show_routes"):
        replace_block("no block here", "new\n")


@pytest.mark.parametrize(("format", "expected"), [("mermaid", "flowchart LR"), ("dot", "digraph"), ("svg", "<svg")])
def test_show_routes_prints_each_format(format, expected):
    out = io.StringIO()
    call_command("show_routes", format=format, stdout=out)
    assert out.getvalue().startswith(expected)
    assert "delivery.requested" in out.getvalue()


def test_show_routes_writes_a_file_or_a_markdown_block_and_refuses_what_it_cannot(tmp_path):
    picture, notes = tmp_path / "map.svg", tmp_path / "notes.md"
    notes.write_text(f"# Notes\n{MARKERS[0]}\n{MARKERS[1]}\nkept\n")

    call_command("show_routes", format="svg", output=str(picture), stdout=io.StringIO())
    call_command("show_routes", format="mermaid", output=str(notes), stdout=io.StringIO())

    assert picture.read_text().startswith("<svg") and "delivery.requested" in picture.read_text()
    assert "```mermaid\nflowchart LR" in notes.read_text() and notes.read_text().endswith("kept\n")
    with pytest.raises(CommandError, match="takes --format mermaid"):
        call_command("show_routes", format="svg", output=str(notes))
    bare = tmp_path / "bare.md"
    bare.write_text("no block here\n")
    with pytest.raises(CommandError, match="no <!-- show_routes"):
        call_command("show_routes", format="mermaid", output=str(bare))
