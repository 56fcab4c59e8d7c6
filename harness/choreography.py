"""Run the choreography in a chosen order: outbox events handed to their subscribers synchronously.

It uses the real dispatch (inbox, handler, events published in the same transaction); only
the broker hop is replaced, so a test can decide which message arrives first. What counts as
handed over is the kernel's own record, as `outbox.testing` reads it (an inbox row, or a dead
letter not waiting for its replay), so a delivery played partly here message by message and
partly by `outbox.testing.run_choreography` agrees with itself.
"""

from uuid import UUID

from django.utils import timezone

from outbox.console.timeline import causal_order
from outbox.core.working_database import kernel_databases
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, OutboxMessage
from outbox.placement import database_of_subscriber as of_subscriber
from outbox.testing import handled_by, recipients


def _story(delivery_id: UUID, **conditions) -> list[OutboxMessage]:
    """The delivery's events in the order they were published: in every outbox (a context on a
    database of its own has its own), in causal order across them."""
    rows = []
    for database in kernel_databases():
        rows += OutboxMessage.objects.using(database).filter(correlation_id=delivery_id, **conditions).order_by("id")
    return rows if len(kernel_databases()) == 1 else causal_order(rows)


class Choreography:
    def pending(
        self, delivery_id: UUID, type: str | None = None, *, only: str | None = None, due_only: bool = False
    ) -> list[OutboxMessage]:
        """Events of the delivery that some subscriber (or `only`) has not been handed yet."""
        rows = _story(delivery_id, available_at__lte=timezone.now()) if due_only else _story(delivery_id)
        return [row for row in rows if (type is None or row.type == type) and self._waiting(row, only)]

    def deliver(self, type: str, delivery_id: UUID, *, only: str | None = None) -> int:
        """Hand every pending `type` event of the delivery to its subscribers (or just `only`), due or not."""
        rows = self.pending(delivery_id, type, only=only)
        for row in rows:
            self.hand_over(row, only=only)
        return len(rows)

    def hand_over(self, row: OutboxMessage, *, only: str | None = None, dead_letter_expected: bool = False) -> None:
        """Dispatch `row` to its subscribers (or `only`); a dead letter fails the test unless expected.

        Outside a worker a raising handler is dead-lettered at once instead of raising, so without
        this check a crashing handler would pass unnoticed.
        """
        for subscriber in self._waiting(row, only):
            self.dispatch(subscriber, row)
            letters = DeadLetter.objects.using(of_subscriber(subscriber))  # beside its inbox
            letter = letters.filter(subscriber=subscriber, message_id=row.message_id).first()
            if letter is not None and not dead_letter_expected:
                raise AssertionError(
                    f"{subscriber} dead-lettered {row.type} ({letter.reason}): {letter.error}\n{letter.traceback}"
                )

    def dispatch(self, subscriber: str, row: OutboxMessage) -> None:
        """One copy to one subscriber: the broker hop, replaced."""
        dispatch(subscriber=subscriber, body=row.envelope())

    def settle(self, delivery_id: UUID, *, hold: tuple[str, ...] = ()) -> None:
        """Deliver everything due, in order, until nothing new appears; `hold` types stay pending."""
        while rows := [r for r in self.pending(delivery_id, due_only=True) if r.type not in hold]:
            self.deliver(rows[0].type, delivery_id)

    def published_types(self, delivery_id: UUID) -> list[str]:
        return [row.type for row in _story(delivery_id)]

    @staticmethod
    def _waiting(row: OutboxMessage, only: str | None) -> list[str]:
        handled = handled_by(row)
        return [s for s in recipients(row) if only in (None, s) and s not in handled]
