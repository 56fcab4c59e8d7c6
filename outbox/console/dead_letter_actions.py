"""What operators do with a dead letter, from the admin or the `dead_letters` command: replay it
through the outbox to the subscriber that failed it, or discard it with a note for the audit trail."""

import logging

from django.db import transaction
from django.utils import timezone
from pydantic import ValidationError

from outbox.core.dead_letters import resolve_letter
from outbox.core.envelope import Envelope
from outbox.core.subscriptions import subscription
from outbox.core.working_database import current, kernel_databases
from outbox.models import DeadLetter, OutboxMessage

logger = logging.getLogger(__name__)


class CannotResolve(Exception):
    """The dead letter is not open, or holds no envelope that could be sent again."""


def replay_dead_letter(*, letter_id: int, by: str = "", note: str = "") -> OutboxMessage:
    """Send the message again to the subscriber that failed it, through the outbox, under its own message id so that
    the subscriber's inbox still drops it if it was processed meanwhile. If it fails again, the same letter opens
    again with its attempts added up."""
    with transaction.atomic(using=current()):
        letter = DeadLetter.objects.select_for_update().get(pk=letter_id)
        if letter.status != DeadLetter.Status.OPEN:
            raise CannotResolve(f"dead letter {letter.pk} is {letter.status}, not open")
        try:
            envelope = Envelope.model_validate(letter.envelope)
        except ValidationError as error:
            raise CannotResolve(f"dead letter {letter.pk} holds no valid envelope; discard it instead") from error
        if subscription(letter.subscriber, envelope.type) is None:
            raise CannotResolve(
                f"{letter.subscriber} no longer handles {envelope.type}: a replay would wait on a queue nobody "
                "reads; discard it instead"
            )
        original, home = _original(envelope.message_id)
        now = timezone.now()
        # The copy goes into the outbox the original is in, whose sweep looks for it: with a context
        # on a database of its own, committed there before the letter is marked (a second replay
        # updates the same copy).
        row, _ = OutboxMessage.objects.using(home).update_or_create(
            message_id=envelope.message_id,
            target_subscriber=letter.subscriber,
            defaults={
                "type": envelope.type,
                "version": envelope.version,
                "source": original.source if original else "",
                "occurred_at": envelope.occurred_at,
                "correlation_id": envelope.correlation_id,
                "causation_id": envelope.causation_id,
                "stream": envelope.stream,
                "sequence": envelope.sequence,
                "hops": envelope.hops,
                "payload": envelope.payload,
                "available_at": now,
                "published_at": None,
                "claimed_until": None,
                "claimed_by": "",
                "send_attempts": 0,
                "resends": 0,
                "recipients": [letter.subscriber],
                "trace_context": envelope.trace_context(),  # the replay joins its story's trace
            },
        )
        resolve_letter(letter, DeadLetter.Status.REPLAYED, by=by, note=note)
        letter.replays += 1
        letter.last_replayed_at = now
        letter.save()
    logger.info("replayed dead letter %s (%s for %s) by %s", letter.pk, letter.type, letter.subscriber, by or "?")
    return row


def _original(message_id) -> tuple[OutboxMessage | None, str]:
    """The event as its publisher's outbox has it, and that database (this one, if pruned)."""
    for database in kernel_databases():
        original = OutboxMessage.objects.using(database).filter(message_id=message_id, target_subscriber="").first()
        if original is not None:
            return original, database
    return None, current()


def discard_dead_letter(*, letter_id: int, by: str, note: str) -> DeadLetter:
    """Give up on a message on purpose; the note says why, for the audit trail."""
    if not note.strip():
        raise CannotResolve("a discard needs a note saying why")
    with transaction.atomic(using=current()):
        letter = DeadLetter.objects.select_for_update().get(pk=letter_id)
        if letter.status != DeadLetter.Status.OPEN:
            raise CannotResolve(f"dead letter {letter.pk} is {letter.status}, not open")
        resolve_letter(letter, DeadLetter.Status.DISCARDED, by=by, note=note)
        letter.save()
    logger.info("discarded dead letter %s by %s: %s", letter.pk, by or "?", note)
    return letter


def open_letters(*, subscriber: str = "", reason: str = "", type: str = ""):
    """Open dead letters, filtered the way operators group them."""
    letters = DeadLetter.objects.filter(status=DeadLetter.Status.OPEN)
    for field, value in (("subscriber", subscriber), ("reason", reason), ("type", type)):
        if value:
            letters = letters.filter(**{field: value})
    return letters.order_by("id")
