"""Reason codes and the dead-letter store: failure kept as data, never dropped."""

import logging
import traceback as tb
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from outbox.envelope import Envelope
from outbox.models import DeadLetter, OutboxMessage
from outbox.subscriptions import subscription

logger = logging.getLogger(__name__)


class Reason(StrEnum):
    """Why a message was dead-lettered; the catalog is documented in the README."""

    INVALID_ENVELOPE = "invalid_envelope"
    UNKNOWN_TYPE = "unknown_type"
    UNSUPPORTED_VERSION = "unsupported_version"
    INVALID_PAYLOAD = "invalid_payload"
    UNPROCESSABLE = "unprocessable"  # the handler met a value that cannot be stored or read (DataError, overflow)
    LOOP_DETECTED = "loop_detected"
    EXPIRED = "expired"
    HANDLER_ERROR = "handler_error"
    COMPENSATION_FAILED = "compensation_failed"
    UNSENDABLE = "unsendable"  # the relay kept failing to hand this row to the broker
    NEVER_ACKNOWLEDGED = "never_acknowledged"  # the sweep sent it again and again; no inbox, no dead letter


class Rejected(Exception):
    """Raised by a handler for a message that can never succeed: dead-lettered without retries."""

    def __init__(self, reason: str, message: str = ""):
        super().__init__(message or reason)
        self.reason = reason


def record_dead_letter(
    *,
    subscriber: str,
    body: Any,
    reason: str,
    error: BaseException | None = None,
    attempts: int = 1,
    first_failed_at: datetime | None = None,
) -> DeadLetter:
    """Store `body` as dead for `subscriber`; a message that dies again updates its letter."""
    now = timezone.now()
    fields = body if isinstance(body, dict) else {}
    details = {
        "reason": str(reason),
        "exception_type": f"{type(error).__module__}.{type(error).__qualname__}" if error else "",
        "error": str(error) if error else "",
        "traceback": "".join(tb.format_exception(error)) if error else "",
        "last_failed_at": now,
        "status": DeadLetter.Status.OPEN,
    }
    message_id = _uuid_or_none(fields.get("message_id"))
    with transaction.atomic():
        updated = 0
        if message_id is not None:
            earlier = DeadLetter.objects.filter(subscriber=subscriber, message_id=message_id)
            updated = earlier.exclude(status=DeadLetter.Status.DISCARDED).update(
                attempts=F("attempts") + attempts, **details
            )
            # An operator gave up on it: a later failure adds up, but does not reopen it.
            updated += earlier.filter(status=DeadLetter.Status.DISCARDED).update(
                attempts=F("attempts") + attempts, **{k: v for k, v in details.items() if k != "status"}
            )
        if updated:
            letter = DeadLetter.objects.get(subscriber=subscriber, message_id=message_id)
        else:
            letter = DeadLetter.objects.create(
                subscriber=subscriber,
                message_id=message_id,
                type=str(fields.get("type", ""))[:100],
                correlation_id=_uuid_or_none(fields.get("correlation_id")),
                envelope=body if isinstance(body, dict | list | str | int | float) else repr(body),
                attempts=attempts,
                first_failed_at=first_failed_at or now,
                **details,
            )
    logger.warning(
        "dead-lettered %s %s for %s: %s %s",
        letter.type or "?",
        message_id,
        subscriber,
        reason,
        details["error"],
    )
    return letter


def _uuid_or_none(value: Any):
    from uuid import UUID

    try:
        return UUID(str(value)) if value is not None else None
    except ValueError:
        return None


class CannotResolve(Exception):
    """The dead letter is not open, or holds no envelope that could be sent again."""


def replay_dead_letter(*, letter_id: int, by: str = "", note: str = "") -> OutboxMessage:
    """Send the message again to the subscriber that failed it, through the outbox.

    It keeps its message id, so the subscriber's inbox still drops it if it was processed
    meanwhile. If it fails again, the same letter opens again with its attempts added up.
    """
    with transaction.atomic():
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
        original = OutboxMessage.objects.filter(message_id=envelope.message_id, target_subscriber="").first()
        now = timezone.now()
        row, _ = OutboxMessage.objects.update_or_create(
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
                "trace_context": envelope.trace_context(),  # the replay joins the delivery's trace
            },
        )
        _resolve(letter, DeadLetter.Status.REPLAYED, by=by, note=note)
        letter.replays += 1
        letter.save()
    logger.info("replayed dead letter %s (%s for %s) by %s", letter.pk, letter.type, letter.subscriber, by or "?")
    return row


def close_stale_replay(*, subscriber: str, envelope: Envelope) -> None:
    """A replayed message of an ordered stream arrived after a newer one was applied, and was dropped:
    say so on its letter, instead of leaving it "replayed" as if it had been processed."""
    letter = (
        DeadLetter.objects.select_for_update()
        .filter(subscriber=subscriber, message_id=envelope.message_id, status=DeadLetter.Status.REPLAYED)
        .first()
    )
    if letter is not None:
        note = f"dropped on replay: {envelope.stream} had moved past #{envelope.sequence}"
        _resolve(letter, DeadLetter.Status.DISCARDED, by="dispatch", note=note)
        letter.save()
        logger.info("replayed dead letter %s was stale and is discarded", letter.pk)


def discard_dead_letter(*, letter_id: int, by: str, note: str) -> DeadLetter:
    """Give up on a message on purpose; the note says why, for the audit trail."""
    if not note.strip():
        raise CannotResolve("a discard needs a note saying why")
    with transaction.atomic():
        letter = DeadLetter.objects.select_for_update().get(pk=letter_id)
        if letter.status != DeadLetter.Status.OPEN:
            raise CannotResolve(f"dead letter {letter.pk} is {letter.status}, not open")
        _resolve(letter, DeadLetter.Status.DISCARDED, by=by, note=note)
        letter.save()
    logger.info("discarded dead letter %s by %s: %s", letter.pk, by or "?", note)
    return letter


def _resolve(letter: DeadLetter, status: str, *, by: str, note: str) -> None:
    letter.status, letter.resolved_at, letter.resolved_by = status, timezone.now(), by
    if note:
        stamp = f"[{letter.resolved_at:%Y-%m-%d %H:%M} {by or '?'} {status}] {note}"
        letter.note = f"{letter.note}\n{stamp}".strip()


def open_letters(*, subscriber: str = "", reason: str = "", type: str = ""):
    """Open dead letters, filtered the way operators group them."""
    letters = DeadLetter.objects.filter(status=DeadLetter.Status.OPEN)
    for field, value in (("subscriber", subscriber), ("reason", reason), ("type", type)):
        if value:
            letters = letters.filter(**{field: value})
    return letters.order_by("id")
