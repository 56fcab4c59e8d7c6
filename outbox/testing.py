"""What a team that adds a context needs to test its handlers (docs/testing-a-context.md).

- `run_choreography()` plays the choreography in the test's own process: every event in the
  outbox goes to each of its subscribers through the real dispatch (inbox, ordering, upcasting,
  dead letters), then whatever they published, until nothing is left. No broker, no relay, no
  worker: a unit test of a whole flow.
- `published()` lists what was published, by type and by correlation, as envelopes.
- `wait_until_processed()` is for integration tests against a real relay and real workers: it
  returns once every event of a correlation has been relayed and each of its subscribers has
  processed it or set it aside as a dead letter, and fails naming what is still out.
- `failing()` makes one subscriber's handler fail on purpose, for testing retries, dead letters
  and compensations.

An event counts as handled by a subscriber once that subscriber's inbox holds it or a dead letter
of it exists: the kernel's own records, so a flow half played by hand and half by
`run_choreography` agrees with itself.
"""

import dataclasses
import time
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from outbox.core import subscriptions
from outbox.core.envelope import Envelope
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, InboxMessage, OutboxMessage


class ChoreographyDidNotSettle(AssertionError):
    """run_choreography handed over `limit` messages and more kept coming: an event storm."""


class DeadLettered(AssertionError):
    """A handler failed while run_choreography played the flow (`dead_letters="raise"`)."""


def published(type: str | None = None, *, correlation_id: UUID | None = None) -> list[Envelope]:
    """The envelopes published so far, oldest first: all, or of one `type`, or of one story."""
    rows = _rows(correlation_id)
    if type is not None:
        rows = rows.filter(type=type)
    return [Envelope.model_validate(row.envelope(traced=False)) for row in rows]


def run_choreography(
    *,
    correlation_id: UUID | None = None,
    hold: tuple[str, ...] = (),
    timers: bool = False,
    dead_letters: str = "raise",
    limit: int = 10_000,
) -> int:
    """Hand every event not yet handled to each of its subscribers, in the order they were
    published, and the events that publishes in turn, until none is left; how many were handed.

    `correlation_id` keeps to one story; `hold` leaves events of those types waiting (to hand
    them over later, or never); events scheduled for later (timers) wait too unless `timers=True`
    fires them at once. A handler that fails is dead-lettered at once (outside a worker there are
    no retries): with `dead_letters="raise"` (the default) that fails the test with the error and
    its traceback, with `"keep"` the letter stays for the test to look at.
    """
    if dead_letters not in ("raise", "keep"):
        raise ValueError(f"dead_letters is 'raise' or 'keep', not {dead_letters!r}")
    handed = 0
    while pending := _unhandled(correlation_id, hold=hold, timers=timers):
        row, subscriber = pending
        if handed >= limit:
            raise ChoreographyDidNotSettle(f"{limit} messages handed over and still {row.type} for {subscriber}")
        dispatch(subscriber=subscriber, body=row.envelope())
        handed += 1
        letter = DeadLetter.objects.filter(subscriber=subscriber, message_id=row.message_id).first()
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


def _rows(correlation_id: UUID | None):
    rows = OutboxMessage.objects.order_by("id")
    return rows if correlation_id is None else rows.filter(correlation_id=correlation_id)


def recipients(row: OutboxMessage) -> list[str]:
    """Who gets `row`: its one target (a replay, a resent copy), else every subscriber decided at publish."""
    return [row.target_subscriber] if row.target_subscriber else list(row.recipients)


def handled_by(row: OutboxMessage) -> set[str]:
    """The subscribers that have handled `row`: processed it (their inbox holds it) or set it
    aside (a dead letter of it that is not waiting for its replay)."""
    inbox = InboxMessage.objects.filter(message_id=row.message_id).values_list("subscriber", flat=True)
    letters = (
        DeadLetter.objects.filter(message_id=row.message_id)
        .exclude(status=DeadLetter.Status.REPLAYED)
        .values_list("subscriber", flat=True)
    )
    return {*inbox, *letters}


def _unhandled(correlation_id, *, hold, timers) -> tuple[OutboxMessage, str] | None:
    rows = _rows(correlation_id).exclude(type__in=hold)
    if not timers:
        rows = rows.filter(available_at__lte=timezone.now())
    for row in rows.iterator():
        if missing := [s for s in recipients(row) if s not in handled_by(row)]:
            return row, missing[0]
    return None


def _outstanding(correlation_id) -> list[str]:
    """What is still out, read in one snapshot. Read statement by statement, a handler committing
    between two reads showed its inbox row (its message handled) but not the events it published
    with it (read before it): nothing seemed out while those were still to be relayed and handled.
    PostgreSQL's REPEATABLE READ gives the snapshot (a SQLite read transaction has one already);
    inside a transaction of the caller's the level can no longer be set, and is left as it is."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if outermost and connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        return _outstanding_now(correlation_id)


def _outstanding_now(correlation_id) -> list[str]:
    due = _rows(correlation_id).filter(available_at__lte=timezone.now())
    waiting = [f"{row.type} #{row.id} not relayed" for row in due.filter(published_at__isnull=True)]
    relayed = due.filter(~Q(published_at=None))
    unhandled = [
        f"{row.type} #{row.id} for {subscriber}"
        for row in relayed.iterator()
        for subscriber in recipients(row)
        if subscriber not in handled_by(row)
    ]
    return waiting + unhandled
