"""One business transaction as a sequence diagram: its timeline (outbox.console.timeline) drawn as SVG.

One lane per party, one row per event: an arrow from its publisher to each subscriber, drawn
as that subscriber's copy went (processed, pending, dead-lettered with a cross). A timer a
context sends itself is a loop, drawn where it fires; one still to fire is grey. A dead letter
gets a red row of its own with its reason, a replay an orange one where it was sent, copies
skipped as duplicates a faint one. The left gutter is the time since the first event.

Rows are in causal order: each event after its cause, and of those whose cause is drawn, the one
that happened first (a timer where it fires, not where it was set) first.
"""

from collections.abc import Callable
from datetime import datetime, timedelta

from outbox.console import svg
from outbox.console.causality import in_causal_order

LANE, ROW, TOP, GUTTER = 170.0, 24.0, 56.0, 104.0
LOOP = 28.0  # a loop's width: a label beside one starts past it
Link = Callable[[int], str]  # a dead letter's id -> its page
Draw = Callable[[float], str]  # a row (or a label), drawn at its height


def causal_order(events: list[dict]) -> list[dict]:
    """Each event after its cause; of those whose cause is drawn, the earliest first (timeline's order)."""
    return in_causal_order(
        events, name=lambda e: e["message_id"], cause=lambda e: e.get("causation_id"), when=lambda e: e["occurred_at"]
    )


def offset(delta: timedelta) -> str:
    """+0 ms, +850 ms, +4.2 s, +3 min 05 s, +2 h 10 min."""
    seconds = delta.total_seconds()
    sign = "-" if seconds < 0 else "+"
    seconds = abs(seconds)
    if seconds < 1:
        return f"{sign}{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{sign}{seconds:.1f} s"
    if seconds < 3600:
        return f"{sign}{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{sign}{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def render(
    events: list[dict],
    *,
    lanes: tuple[str, ...],
    now: datetime,
    origin: tuple[str, str] | None = None,
    link: Link | None = None,
    title: str = "sequence diagram",
) -> str:
    """The diagram of `events` (correlation_timeline's, `scheduled=True` for pending timers). `lanes` come first, any
    other party after them; `origin` = (customer lane, context) draws an uncaused event of that context as a request
    from the customer; `link` makes dead letters links."""
    events = causal_order(events)
    parties = list(lanes)
    for event in events:
        for party in (event["published_by"], *(s["subscriber"] for s in event["subscribers"])):
            if party not in parties:
                parties.append(party)
    x = {party: GUTTER + LANE * (i + 0.5) for i, party in enumerate(parties)}
    start = events[0]["occurred_at"] if events else now
    labels = _Labels(right=GUTTER + LANE * len(parties))
    drawn = [draw(TOP + ROW * (i + 0.5)) for i, draw in enumerate(_placed(events, x, start, now, origin, labels, link))]
    height = TOP + ROW * (len(drawn) + 1)
    body = [
        svg.group([svg.box(x[p] - 75, 8, 150, 28), svg.text(x[p], 26, p, anchor="middle")], cls="lane-head", lane=p)
        + svg.line(x[p], 36, x[p], height - 8, cls="lifeline")
        for p in parties
    ]
    if not events:
        body.append(svg.text(GUTTER, TOP + ROW, "No events yet.", cls="when"))
    heads = [x[p] + svg.text_width(p) / 2 for p in parties]
    width = max(GUTTER + LANE * len(parties), *heads, *labels.reach) + 24
    return svg.document(width, height, body + drawn, cls="sequence", title=title)


class _Labels:
    """Where each row's label goes, and how far right they reach (the picture is made that wide)."""

    def __init__(self, right: float):
        self.right, self.reach = right, [right]

    def place(self, start: float, content: str, *, loop: bool = False, only_loop: bool = False) -> Draw:
        """Right of an arrow's `start`, past a loop drawn there; a lone loop's label that would run
        past the last lane goes left of its lane instead (clear of the loop, which turns right)."""
        width = svg.text_width(content)
        at = start + (LOOP + 12 if loop else 8)
        if only_loop and at + width > self.right and start - 12 - width >= GUTTER:
            return lambda y: svg.text(start - 12, y - 5, content, anchor="end")
        self.reach.append(at + width)
        return lambda y: svg.text(at, y - 5, content)


def _placed(events: list[dict], x: dict, start, now, origin, labels: _Labels, link) -> list[Draw]:
    """Every row top to bottom: each event's (in causal order), and each dead letter, replay and
    duplicate of its copies after it, where it happened among the events that followed."""
    rows: list[Draw] = []
    later: list[tuple[datetime, int, Draw]] = []  # (when, order made, row) not yet placed
    requests: set[datetime] = set()  # one request arrow a transaction: its uncaused events share their moment
    for event in events:
        while later and later[0][0] <= event["occurred_at"]:
            rows.append(later.pop(0)[2])
        rows += _event_rows(event, x, start=start, now=now, origin=origin, labels=labels, requests=requests)
        for at, draw in _copy_rows(event, x, start=start, labels=labels, link=link):
            later.append((at or event["occurred_at"], len(later) + len(rows), draw))
        later.sort(key=lambda item: (item[0], item[1]))
    return rows + [draw for _, _, draw in later]


def _event_rows(event: dict, x: dict, *, start, now, origin, labels: _Labels, requests: set) -> list[Draw]:
    """The event's row, after the customer's request when it is the first one the request published."""
    rows, publisher = [], event["published_by"]
    when = offset(event["occurred_at"] - start)
    subscribers = event["subscribers"]
    timer = [s["subscriber"] for s in subscribers] == [publisher]
    uncaused = origin and publisher == origin[1] and not event.get("causation_id") and not timer
    if uncaused and event["occurred_at"] not in requests:
        requests.add(event["occurred_at"])
        customer, request = x[origin[0]], labels.place(x[origin[0]], "request")
        rows.append(lambda y: _row(y, when, [svg.line(customer, y, x[publisher] - 8, y), request(y)], "edge"))
    left = min([x[publisher], *(x[s["subscriber"]] for s in subscribers)])
    looped = any(s["subscriber"] == publisher for s in subscribers)
    label = labels.place(left, _event_label(event, now), loop=looped and left == x[publisher], only_loop=timer)
    kind = "edge timer" if timer else "edge"

    def draw(y: float) -> str:
        shapes = [svg.dot(x[publisher], y), label(y)]
        for s in subscribers:
            cls = "pending" if event.get("scheduled") or s["outcome"] == "pending" else s["outcome"]
            shapes.append(svg.group([_arrow(x[publisher], x[s["subscriber"]], y)], cls=cls, subscriber=s["subscriber"]))
        return _row(y, when, shapes, f"{kind} pending" if event.get("scheduled") else kind, event=event)

    return [*rows, draw]


def _copy_rows(event: dict, x: dict, *, start, labels: _Labels, link) -> list[tuple[datetime | None, Draw]]:
    """(when, row) for each copy's dead letter, replay and duplicates (these last: no time)."""
    found = []
    for s in event["subscribers"]:
        letter = s.get("dead_letter")
        if letter:
            text = f"{event['type']}: dead letter, {letter['reason']} (x{letter['attempts']})"
            found.append(("dead", letter["first_failed_at"], text, link(letter["id"]) if link else None, s))
        if s.get("replayed_at"):
            found.append(("replay", s["replayed_at"], f"{event['type']} replayed to {s['subscriber']}", None, s))
        if s.get("duplicates"):
            count = s["duplicates"]
            text = f"{count} duplicate cop{'y' if count == 1 else 'ies'} of {event['type']} skipped"
            found.append(("faint", None, text, None, s))
    return [(at, _copy_row(event, x, cls, at, text, href, s, start, labels)) for cls, at, text, href, s in found]


def _copy_row(event, x, cls, at, text, href, s, start, labels: _Labels) -> Draw:
    publisher, lane = x[event["published_by"]], x[s["subscriber"]]
    label = labels.place(min(publisher, lane), text, loop=publisher == lane, only_loop=publisher == lane)

    def draw(y: float) -> str:
        when = svg.text(GUTTER - 8, y + 4, offset(at - start) if at else "", cls="when", anchor="end")
        return svg.group(
            [when, _arrow(publisher, lane, y), label(y)],
            cls=f"edge {cls}",
            href=href,
            type=event["type"],
            subscriber=s["subscriber"],
        )

    return draw


def _row(y: float, when: str, shapes: list[str], cls: str, event: dict | None = None) -> str:
    data = {"type": event["type"], "message_id": str(event["message_id"])} if event else {}
    return svg.group([svg.text(GUTTER - 8, y + 4, when, cls="when", anchor="end"), *shapes], cls=cls, **data)


def _arrow(start: float, end: float, y: float) -> str:
    """A loop stays within its row's height: below the row above's label, above the next's."""
    if start == end:
        return svg.loop(start, y - 6, width=LOOP, height=10)
    return svg.line(start, y, end - 8 if end > start else end + 8, y)


def _event_label(event: dict, now: datetime) -> str:
    label = event["type"]
    if event.get("scheduled"):
        return f"{label} (timer, fires in {offset(event['occurred_at'] - now)[1:]})"
    return label
