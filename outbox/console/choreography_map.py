"""The whole choreography as one picture: who publishes what to whom, drawn from the registry.

The same registry `show_routes` prints (the subscriptions, and the contracts that say which
context publishes each event type) becomes a graph: contexts are lanes, each event type a row
with an arrow from its publisher (the dot) to each of its subscribers, an event a context sends
itself (a timer) a loop, a contract nobody subscribes to a dotted arrow to no one. The messaging
overview draws it with live counts per arrow; `show_routes --format svg|dot|mermaid` exports it.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from django.db import DatabaseError
from django.db.models import Count

from outbox.console import svg
from outbox.core.contracts import Event, contracts
from outbox.core.subscriptions import Subscription, routing_table
from outbox.models import DeadLetter, InboxMessage

LANE, ROW, TOP, LEFT = 200.0, 30.0, 64.0, 24.0
MARKERS = ("<!-- show_routes --format mermaid -->", "<!-- /show_routes -->")


@dataclass(frozen=True)
class Route:
    """One event type: the context that publishes it, and the subscribers it is routed to."""

    event_type: str
    versions: tuple[int, ...]
    publisher: str  # "?" for a subscribed type no contract declares
    subscribers: tuple[str, ...]

    @property
    def label(self) -> str:
        return f"{self.event_type} v{','.join(map(str, self.versions))}" if self.versions else self.event_type

    @property
    def timer(self) -> bool:
        """Sent by a context to itself: a timer (or a step it takes later, on its own queue)."""
        return self.subscribers == (self.publisher,)


@dataclass(frozen=True)
class Graph:
    contexts: tuple[str, ...]  # lanes, the most connected first
    routes: tuple[Route, ...]  # by publisher, then type


def graph(
    routes: Mapping[str, list[Subscription]] | None = None,
    declared: Mapping[tuple[str, int], type[Event]] | None = None,
    *,
    leave_out: frozenset[str] = frozenset(),
) -> Graph:
    """The graph of `routes` (the routing table) and `declared` (the contracts), without the
    contexts in `leave_out` (the test suite's probe)."""
    routes = routing_table() if routes is None else routes
    declared = contracts() if declared is None else declared
    publishers: dict[str, set[str]] = {}
    versions: dict[str, set[int]] = {}
    for (event_type, version), contract in declared.items():
        publishers.setdefault(event_type, set()).add(contract.source())
        versions.setdefault(event_type, set()).add(version)
    found = []
    for event_type in sorted(set(routes) | set(publishers)):
        publisher = "/".join(sorted(publishers.get(event_type, {"?"})))
        subs = [s for s in routes.get(event_type, []) if s.context not in leave_out]
        if publisher in leave_out or (not subs and event_type in routes):
            continue
        found.append(
            Route(event_type, tuple(sorted(versions.get(event_type, ()))), publisher, tuple(s.subscriber for s in subs))
        )
    arrows: dict[str, int] = {}
    for route in found:
        for context in (route.publisher, *route.subscribers):
            arrows[context] = arrows.get(context, 0) + 1
    contexts = tuple(sorted(arrows, key=lambda c: (-arrows[c], c)))
    found.sort(key=lambda r: (contexts.index(r.publisher), r.timer, r.event_type))
    return Graph(contexts=contexts, routes=tuple(found))


def to_mermaid(g: Graph) -> str:
    """A Mermaid flowchart (GitHub draws it in Markdown): one labelled arrow per context pair."""
    lines = ["flowchart LR"] + [f"  {_id(c)}([{c}])" for c in g.contexts]
    for (source, target), labels in _pairs(g).items():
        text = "<br/>".join(labels).replace('"', "#quot;")
        if target is None:
            lines.append(f'  {_id(source)} -. "{text}" .-> nobody((no subscriber))')
        elif source == target:
            lines.append(f'  {_id(source)} -. "{text}" .-> {_id(target)}')
        else:
            lines.append(f'  {_id(source)} -- "{text}" --> {_id(target)}')
    return "\n".join(lines) + "\n"


def to_dot(g: Graph) -> str:
    """Graphviz: `dot -Tsvg` draws it."""
    lines = ["digraph choreography {", "  rankdir=LR;", '  node [shape=box, style=rounded, fontname="monospace"];']
    lines += [f"  {_quoted(c)};" for c in g.contexts]
    for (source, target), labels in _pairs(g).items():
        label = _quoted("\n".join(labels))
        if target is None:
            lines.append(f'  {_quoted(source)} -> "no subscriber" [label={label}, style=dotted];')
        else:
            style = ", style=dashed, color=purple" if source == target else ""
            lines.append(f"  {_quoted(source)} -> {_quoted(target)} [label={label}{style}];")
    return "\n".join(lines) + "\n}\n"


# (subscriber, type) -> (handled lately, None if its database did not answer; dead letters open)
Counts = Mapping[tuple[str, str], tuple[int | None, int]]
Links = Callable[[str, str], tuple[str, str]]  # (subscriber, type) -> (its handled messages, its open dead letters)


def to_svg(g: Graph, *, counts: Counts | None = None, links: Links | None = None) -> str:
    """Lanes and rows, laid out without a layout engine, so the same graph is the same bytes."""
    width = LEFT * 2 + LANE * (len(g.contexts) + 0.5)
    drawn = {(s, route.event_type) for route in g.routes for s in route.subscribers}
    elsewhere = sum(dead for key, (_, dead) in (counts or {}).items() if dead and key not in drawn)
    height = TOP + ROW * (len(g.routes) + 1) + (ROW if elsewhere else 0)
    x = {c: LEFT + LANE * (i + 0.5) for i, c in enumerate(g.contexts)}
    body = [
        svg.group([svg.box(x[c] - 80, 10, 160, 28), svg.text(x[c], 28, c, anchor="middle")], cls="lane-head", context=c)
        + svg.line(x[c], 38, x[c], height - 8, cls="lifeline")
        for c in g.contexts
    ]
    for row, route in enumerate(g.routes):
        y = TOP + ROW * (row + 0.5)
        start = x.get(route.publisher, LEFT)
        parts = [svg.dot(start, y)]
        for subscriber in route.subscribers:
            parts.append(_arrow(start, y, x[subscriber], route, subscriber, counts, links))
        if not route.subscribers:
            parts += [
                svg.line(start, y, width - LEFT, y, cls="arrow"),
                svg.text(width - LEFT, y + 14, "no subscriber", anchor="end"),
            ]
        label_x = start + 40 if route.timer else min([start, *(x[s] for s in route.subscribers)]) + 8
        parts.insert(0, svg.text(label_x, y - 5, route.label))
        cls = "edge timer" if route.timer else "edge nobody" if not route.subscribers else "edge"
        body.append(svg.group(parts, cls=cls, type=route.event_type, publisher=route.publisher))
    if elsewhere:  # in the table below, and on the map too: a letter with no arrow to count it on
        note = f"+ {elsewhere} open dead letter(s) on no arrow: no event type, or one nobody handles now"
        body.append(svg.group([svg.text(LEFT, height - 12, note, cls="dead-count")], cls="dead elsewhere"))
    return svg.document(width, height, body, cls="choreography", title="The choreography: who publishes what to whom")


def edge_counts(*, since: datetime, database_of: Callable[[str], str]) -> dict[tuple[str, str], tuple[int | None, int]]:
    """(subscriber, type) -> (messages handled since `since`, counted on the subscriber's database as
    `database_of` names it, None if it did not answer; dead letters open in the database worked in
    now): grouped queries."""
    counts: dict[tuple[str, str], tuple[int | None, int]] = {}
    for database, routed in _routed_by_database(database_of).items():
        handled = InboxMessage.objects.using(database).filter(
            processed_at__gte=since, subscriber__in={s for s, _ in routed}
        )
        try:
            rows = list(handled.values_list("subscriber", "type").annotate(n=Count("id")).order_by())
        except DatabaseError:  # a false 0 would say its subscribers are idle
            counts |= dict.fromkeys(routed, (None, 0))
            continue
        for subscriber, event_type, n in rows:
            counts[(subscriber, event_type)] = (n, 0)
    dead = DeadLetter.objects.filter(status=DeadLetter.Status.OPEN).values_list("subscriber", "type")
    for subscriber, event_type, n in dead.annotate(n=Count("id")).order_by():
        counts[(subscriber, event_type)] = (counts.get((subscriber, event_type), (0, 0))[0], n)
    return counts


def _routed_by_database(database_of: Callable[[str], str]) -> dict[str, list[tuple[str, str]]]:
    """Each (subscriber, type) of the routing table under the database its handled messages are on."""
    found: dict[str, list[tuple[str, str]]] = {}
    for event_type, subs in routing_table().items():
        for sub in subs:
            found.setdefault(database_of(sub.subscriber), []).append((sub.subscriber, event_type))
    return found


def _arrow(start, y, end, route: Route, subscriber: str, counts: Counts | None, links: Links | None) -> str:
    shapes = [svg.loop(start, y + 2) if end == start else svg.line(start, y, end - 8 if end > start else end + 8, y)]
    handled, dead = (counts or {}).get((subscriber, route.event_type), (0, 0))
    if counts is not None:
        urls = links(subscriber, route.event_type) if links else (None, None)
        at = end + (34 if end == start else 6)
        rate = "—/h" if handled is None else f"{handled}/h"  # unknown: its database did not answer
        shapes.append(svg.group([svg.text(at, y + 13, rate, cls="count")], href=urls[0]))
        if dead:
            shapes.append(svg.group([svg.text(at + 48, y + 13, f"x{dead} dead", cls="dead-count")], href=urls[1]))
    return svg.group(shapes, cls="dead" if dead else "", subscriber=subscriber)


def _pairs(g: Graph) -> dict[tuple[str, str | None], list[str]]:
    pairs: dict[tuple[str, str | None], list[str]] = {}
    for route in g.routes:
        for target in route.subscribers or (None,):
            pairs.setdefault((route.publisher, target), []).append(route.label)
    return pairs


def _id(context: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in context)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def replace_block(markdown: str, mermaid: str, markers: tuple[str, str] = MARKERS) -> str:
    """`markdown` with the Mermaid block between `markers` replaced by `mermaid`."""
    start, end = markers
    if start not in markdown or end not in markdown:
        raise ValueError(f"no {start} ... {end} block to replace")
    head, rest = markdown.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n```mermaid\n{mermaid}```\n{end}{tail}"
