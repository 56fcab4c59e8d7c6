"""What a team that adds a context needs to test its handlers (the guide's Testing page).

`deliver()` hands one message to one subscriber through the real dispatch, in the test's process,
and says what came of it; `an_envelope()` builds one. `run_choreography()` plays the choreography
in process, every event to each of its subscribers, until nothing is left: a unit test of a whole
flow; `owed()`, `pending()` and `hand_over()` play it in the order a test chooses. `published()` lists what
was published. `wait_until_processed()` waits, in an integration
test against real relays and workers, until every event of a story was processed or set aside.
`failing()` makes a handler fail on purpose. An event counts as handled once its subscriber's inbox
holds it or a letter of it exists: the kernel's own records.
"""

import dataclasses
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID, uuid4

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone
from pydantic import BaseModel

from outbox.console.timeline import causal_order
from outbox.core import subscriptions
from outbox.core.envelope import Envelope
from outbox.core.working_database import kernel_databases
from outbox.handling.dispatch import Outcome, dispatch
from outbox.models import DeadLetter, InboxMessage, OutboxMessage


class ChoreographyDidNotSettle(AssertionError):
    """run_choreography handed over `limit` messages and more kept coming: an event storm."""


class DeadLettered(AssertionError):
    """A handler failed while run_choreography played the flow (`dead_letters="raise"`)."""


@dataclasses.dataclass(frozen=True)
class Handed:
    """What came of handing one message to one subscriber (`deliver`): its `outcome`, the `dead_letter` that says
    why it was set aside if it was, and what the subscriber `published` in turn while handling it, compensations too."""

    # "processed" (the handler ran and its work was kept), "duplicate" (its inbox held the message already: the
    # handler did not run again), "stale" (an ordered subscriber was past its place in its stream) or "dead_lettered".
    outcome: str
    envelope: Envelope
    dead_letter: DeadLetter | None = None
    published: tuple[Envelope, ...] = ()

    def __repr__(self) -> str:
        # What a failed `assert handed.outcome == "processed"` shows: why, not only that.
        why = f", {self.dead_letter.reason}: {self.dead_letter.error}" if self.dead_letter else ""
        return f"<Handed {self.envelope.type} v{self.envelope.version}: {self.outcome}{why}>"


def an_envelope(
    type: str,
    payload: Mapping[str, Any] | BaseModel,
    *,
    version: int = 1,
    message_id: UUID | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
    stream: str | None = None,
    sequence: int = 1,
    hops: int = 0,
    occurred_at: datetime | None = None,
) -> Envelope:
    """The envelope a publisher of `type` would send with `payload` (a dict, or the subscriber's own `Reader`, never
    the publisher's contract), as it arrives off the wire. Unless told, it is a new message, the first of a story and
    a stream of its own (`type:message_id`) so an ordered subscriber takes it; `stream` and `sequence` test order."""
    if isinstance(payload, BaseModel):
        payload = payload.model_dump(mode="json", by_alias=True)
    message_id = message_id or uuid4()
    envelope = Envelope(
        message_id=message_id,
        type=type,
        version=version,
        occurred_at=occurred_at or timezone.now(),
        correlation_id=correlation_id or uuid4(),
        causation_id=causation_id,
        stream=stream or f"{type}:{message_id}",
        sequence=sequence,
        hops=hops,
        payload=dict(payload),
    )
    return Envelope.model_validate(_wire_form(envelope))


def deliver(
    subscriber: str,
    message: str | Envelope,
    payload: Mapping[str, Any] | BaseModel | None = None,
    *,
    version: int = 1,
    message_id: UUID | None = None,
    correlation_id: UUID | None = None,
    causation_id: UUID | None = None,
    stream: str | None = None,
    sequence: int = 1,
    hops: int = 0,
    occurred_at: datetime | None = None,
) -> Handed:
    """Hand one message to `subscriber` through the real dispatch, in this process, and say what came of it: a message
    of type `message` with `payload` (built by `an_envelope`, which the keywords go to), or an `Envelope` as it is (one
    `published()` lists, or handed before). No broker and no retries: a handler that fails is dead-lettered at once."""
    if isinstance(message, Envelope):
        fields = (payload, version, message_id, correlation_id, causation_id, stream, sequence, hops, occurred_at)
        if fields != (None, 1, None, None, None, None, 1, 0, None):
            raise TypeError("an Envelope is handed as it is: give no payload or envelope fields with it")
        envelope = message
    else:
        if payload is None:
            raise TypeError(f"deliver({subscriber!r}, {message!r}) needs the payload to hand")
        envelope = an_envelope(
            message,
            payload,
            version=version,
            message_id=message_id,
            correlation_id=correlation_id,
            causation_id=causation_id,
            stream=stream,
            sequence=sequence,
            hops=hops,
            occurred_at=occurred_at,
        )
    # A typo would otherwise pass for a message the subscriber does not know (dead-lettered as unknown_type).
    if subscriptions.subscription(subscriber, envelope.type) is None:
        handles = sorted(subscriptions._subscriptions.get(subscriber, {}))
        raise LookupError(
            f"{subscriber} has no handler for {envelope.type} (it handles: {', '.join(handles) or 'nothing'})"
        )
    caused_by = Q(causation_id=envelope.message_id)
    caused_before = {(row._state.db, row.id) for row in _rows(None, caused_by)}
    outcome = dispatch(subscriber=subscriber, body=_wire_form(envelope))
    letter = _letter(subscriber, envelope.message_id) if outcome is Outcome.DEAD_LETTERED else None
    caused = [row for row in _rows(None, caused_by) if (row._state.db, row.id) not in caused_before]
    return Handed(
        outcome=outcome.value,
        envelope=envelope,
        dead_letter=letter,
        published=tuple(Envelope.model_validate(row.envelope(traced=False)) for row in caused),
    )


def _wire_form(envelope: Envelope) -> dict:
    """The body a worker is given: JSON's values, and no trace context where there is none."""
    return envelope.model_dump(
        mode="json", exclude={k for k in ("traceparent", "tracestate") if not getattr(envelope, k)}
    )


def published(type: str | None = None, *, correlation_id: UUID | None = None) -> list[Envelope]:
    """The envelopes published so far, oldest first: all, or of one `type`, or of one story."""
    rows = _rows(correlation_id, Q(type=type) if type is not None else Q())
    return [Envelope.model_validate(row.envelope(traced=False)) for row in rows]


def owed(
    type: str | None = None, *, correlation_id: UUID | None = None, to: str | None = None, due_only: bool = False
) -> list[tuple[str, Envelope]]:
    """Each (subscriber, envelope) still owed: a published envelope (of one `type`, of one story)
    that a subscriber of it (or `to`) has not handled yet, oldest first; `due_only` leaves out what
    is scheduled for later."""
    conditions = [Q(type=type)] if type is not None else []
    if due_only:
        conditions.append(Q(available_at__lte=timezone.now()))
    found: dict[tuple[str, UUID], Envelope] = {}  # a replayed copy is owed once, like its original
    for row in _rows(correlation_id, *conditions):
        waiting = [s for s in recipients(row) if to in (None, s) and s not in handled_by(row)]
        if waiting:
            envelope = Envelope.model_validate(row.envelope(traced=False))
            found.update(
                {
                    (subscriber, row.message_id): envelope
                    for subscriber in waiting
                    if (subscriber, row.message_id) not in found
                }
            )
    return [(subscriber, envelope) for (subscriber, _), envelope in found.items()]


def pending(
    type: str | None = None, *, correlation_id: UUID | None = None, to: str | None = None, due_only: bool = False
) -> list[Envelope]:
    """The published envelopes (of one `type`, of one story) that a subscriber of theirs, or `to`,
    has not handled yet, oldest first; `due_only` leaves out what is scheduled for later."""
    envelopes = {e.message_id: e for _, e in owed(type, correlation_id=correlation_id, to=to, due_only=due_only)}
    return list(envelopes.values())


def hand_over(
    event: str | Envelope,
    *,
    correlation_id: UUID | None = None,
    to: str | None = None,
    dead_letters: str = "raise",
) -> list[Handed]:
    """Hand a published envelope to each of its subscribers that has not handled it (or to `to` alone) through the real
    dispatch; given a type, each pending envelope of it (of one story), oldest first. A handler that fails is
    dead-lettered at once: `dead_letters="raise"` fails the test with its error, `"keep"` leaves the letter to see."""
    if dead_letters not in ("raise", "keep"):
        raise ValueError(f"dead_letters is 'raise' or 'keep', not {dead_letters!r}")
    if not isinstance(event, (str, Envelope)):
        raise TypeError(f"hand_over takes an event type or an Envelope, not {type(event).__name__}")
    if isinstance(event, Envelope):
        story = owed(event.type, correlation_id=event.correlation_id, to=to)
        pairs = [(subscriber, envelope) for subscriber, envelope in story if envelope.message_id == event.message_id]
    else:
        pairs = owed(event, correlation_id=correlation_id, to=to)
    handed = []
    for subscriber, envelope in pairs:
        handed.append(deliver(subscriber, envelope))
        letter = handed[-1].dead_letter
        if letter is not None and dead_letters == "raise":
            raise DeadLettered(
                f"{subscriber} dead-lettered {envelope.type} ({letter.reason}): {letter.error}\n{letter.traceback}"
            )
    return handed


def run_choreography(
    *,
    correlation_id: UUID | None = None,
    hold: tuple[str, ...] = (),
    timers: bool = False,
    dead_letters: str = "raise",
    limit: int = 10_000,
) -> int:
    """Hand every event not yet handled to each of its subscribers, in the order they were published, and the events
    that publishes in turn, until none is left; how many were handed. `correlation_id` keeps to one story, `hold` leaves
    those types waiting, timers wait unless `timers=True`; a failed handler's letter is as in `hand_over`."""
    if dead_letters not in ("raise", "keep"):
        raise ValueError(f"dead_letters is 'raise' or 'keep', not {dead_letters!r}")
    handed = 0
    while pending := _unhandled(correlation_id, hold=hold, timers=timers):
        row, subscriber = pending
        if handed >= limit:
            raise ChoreographyDidNotSettle(f"{limit} messages handed over and still {row.type} for {subscriber}")
        dispatch(subscriber=subscriber, body=row.envelope())
        handed += 1
        letter = _letter(subscriber, row.message_id)
        if letter is not None and dead_letters == "raise" and letter.status == "open":
            raise DeadLettered(
                f"{subscriber} dead-lettered {row.type} ({letter.reason}): {letter.error}\n{letter.traceback}"
            )
    return handed


def wait_until_processed(*, correlation_id: UUID | None = None, timeout: float = 30.0, interval: float = 0.05) -> None:
    """Return once every event (of the story, or all) that is due has been relayed and each of
    its subscribers has processed it or dead-lettered it; raise TimeoutError naming what is out."""
    deadline = time.monotonic() + timeout
    while True:
        outstanding = _outstanding(correlation_id)
        if not outstanding:
            return
        if time.monotonic() >= deadline:
            raise TimeoutError(f"after {timeout:g} s still not processed: {', '.join(outstanding[:10])}")
        time.sleep(interval)


@contextmanager
def failing(subscriber: str, event_type: str, error: Exception | None = None) -> Iterator[None]:
    """Within the block, `subscriber`'s handler for `event_type` raises `error` (a RuntimeError
    by default) instead of running: in this process only (run_choreography, a worker thread the
    test started), never in worker processes of their own."""
    known = subscriptions.subscription(subscriber, event_type)
    if known is None:
        raise LookupError(f"{subscriber} has no handler for {event_type}")
    failure = error or RuntimeError(f"{subscriber}'s handler for {event_type} failed on purpose (outbox.testing)")

    def fail(message):
        raise failure

    handlers = subscriptions._subscriptions[subscriber]
    handlers[event_type] = dataclasses.replace(known, handler=fail)
    try:
        yield
    finally:
        handlers[event_type] = known


def _rows(correlation_id: UUID | None, *conditions: Q) -> list[OutboxMessage]:
    """The outbox's rows (of one story), oldest first: in id order, the order they were published
    in. With a context on a database of its own its events are in its own outbox: every one is
    read, and the rows put in causal order (ids are an order within one database only)."""
    rows: list[OutboxMessage] = []
    databases = kernel_databases()
    for database in databases:
        found = OutboxMessage.objects.using(database).filter(*conditions).order_by("id")
        rows += found if correlation_id is None else found.filter(correlation_id=correlation_id)
    return rows if len(databases) == 1 else causal_order(rows)


def _letter(subscriber: str, message_id: UUID) -> DeadLetter | None:
    """The subscriber's letter of the message, on whichever database its inbox is."""
    for database in kernel_databases():
        letter = DeadLetter.objects.using(database).filter(subscriber=subscriber, message_id=message_id).first()
        if letter is not None:
            return letter
    return None


def recipients(row: OutboxMessage) -> list[str]:
    """Who gets `row`: its one target (a replay, a resent copy), else every subscriber decided at publish."""
    return [row.target_subscriber] if row.target_subscriber else list(row.recipients)


def handled_by(row: OutboxMessage) -> set[str]:
    """The subscribers that have handled `row`: processed it (their inbox holds it) or set it
    aside (a dead letter of it that is not waiting for its replay)."""
    handled: set[str] = set()
    for database in kernel_databases():  # each subscriber's inbox is beside its context's tables
        handled.update(
            InboxMessage.objects.using(database).filter(message_id=row.message_id).values_list("subscriber", flat=True)
        )
        handled.update(
            DeadLetter.objects.using(database)
            .filter(message_id=row.message_id)
            .exclude(status=DeadLetter.Status.REPLAYED)
            .values_list("subscriber", flat=True)
        )
    return handled


def _unhandled(correlation_id, *, hold, timers) -> tuple[OutboxMessage, str] | None:
    rows = _rows(correlation_id, ~Q(type__in=hold), Q() if timers else Q(available_at__lte=timezone.now()))
    for row in rows:
        if missing := [s for s in recipients(row) if s not in handled_by(row)]:
            return row, missing[0]
    return None


def _outstanding(correlation_id) -> list[str]:
    """What is still out, read in one snapshot: read statement by statement, a handler committing between two reads
    would show its inbox row but not the events it published with it (read before), and nothing would seem out while
    those were still to be relayed and handled."""
    # No snapshot spans several databases: the outboxes are read again after, and an event published meanwhile
    # (by a handler whose inbox row was read) is out.
    if len(kernel_databases()) > 1:
        before = {(row._state.db, row.id) for row in _rows(correlation_id)}
        outstanding = _outstanding_now(correlation_id)
        meanwhile = [f"{row.type} #{row.id}" for row in _rows(correlation_id) if (row._state.db, row.id) not in before]
        return outstanding + [f"{name} published meanwhile" for name in meanwhile]
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        # REPEATABLE READ gives the snapshot (a SQLite read transaction has one already); inside a transaction of the
        # caller's the level can no longer be set, and is left as it is.
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _outstanding_now(correlation_id)


def _outstanding_now(correlation_id) -> list[str]:
    due = _rows(correlation_id, Q(available_at__lte=timezone.now()))
    waiting = [f"{row.type} #{row.id} not relayed" for row in due if row.published_at is None]
    unhandled = [
        f"{row.type} #{row.id} for {subscriber}"
        for row in due
        if row.published_at is not None
        for subscriber in recipients(row)
        if subscriber not in handled_by(row)
    ]
    return waiting + unhandled
