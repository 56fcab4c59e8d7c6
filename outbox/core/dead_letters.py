"""Reason codes and the dead-letter store: failure kept as data, never dropped.

The store is what dispatch, the relay and the sweep write to. What operators do with a letter
(replay, discard) is `outbox.console.dead_letter_actions`, above the registry and the outbox."""

import logging
import traceback as tb
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.db.models import F, Value
from django.db.models.functions import Concat
from django.utils import timezone

from outbox.core.envelope import Envelope
from outbox.core.fingerprints import error_fingerprint
from outbox.core.working_database import current
from outbox.models import DeadLetter

logger = logging.getLogger(__name__)


class Reason(StrEnum):
    """Why a message was dead-lettered; the guide's Concepts lists them, and whether a replay helps."""

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
    UNREADABLE = "unreadable"  # found in the broker's dead-letter queue: not a message Dramatiq could decode
    FAILED_BY_DRAMATIQ = "failed_by_dramatiq"  # found there too: Dramatiq failed it before its handler ran


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
    earlier_stands: bool = False,
) -> DeadLetter:
    """Store `body` as dead for `subscriber`; a message that dies again updates its letter. With
    `earlier_stands`, for what says less than any earlier letter (a copy found in the broker's own
    dead-letter queue), an earlier letter only counts the attempts: its reason, error and status stay."""
    now = timezone.now()
    fields = body if isinstance(body, dict) else {}
    exception_type = f"{type(error).__module__}.{type(error).__qualname__}" if error else ""
    details = {
        "reason": str(reason),
        "exception_type": exception_type,
        "error": storable(str(error)) if error else "",
        "fingerprint": error_fingerprint(exception_type, str(error) if error else "", error),
        "traceback": storable("".join(tb.format_exception(error))) if error else "",
        "last_failed_at": now,
        "status": DeadLetter.Status.OPEN,
    }
    message_id = _uuid_or_none(fields.get("message_id"))
    with transaction.atomic(using=current()):
        updated = 0
        if message_id is not None:
            earlier = DeadLetter.objects.filter(subscriber=subscriber, message_id=message_id)
            if earlier_stands:
                updated = earlier.update(attempts=F("attempts") + attempts, last_failed_at=now)
            else:
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
        # The traceback once, here: a failure retried before logged one line each time (dispatch).
        exc_info=error if error is not None and error.__traceback__ is not None else None,
    )
    return letter


def storable(value: Any) -> Any:
    """`value` as a letter can hold it: PostgreSQL's text and jsonb refuse NUL, which is replaced
    (U+FFFD, as in a letter of a binary message the broker set aside) so the letter keeps the rest.
    Dispatch's letters keep their message so; the letter's error and traceback are kept so always."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value


def _uuid_or_none(value: Any):
    from uuid import UUID

    try:
        return UUID(str(value)) if value is not None else None
    except ValueError:
        return None


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
        resolve_letter(letter, DeadLetter.Status.DISCARDED, by="dispatch", note=note)
        letter.save()
        logger.info("replayed dead letter %s was stale and is discarded", letter.pk)


def resolve_letter(letter: DeadLetter, status: str, *, by: str, note: str) -> None:
    """Close or reopen `letter` as `status`, stamping who did it and why into its note (the caller saves)."""
    letter.status, letter.resolved_at, letter.resolved_by = status, timezone.now(), by
    if note:
        stamp = f"[{letter.resolved_at:%Y-%m-%d %H:%M} {by or '?'} {status}] {note}"
        letter.note = f"{letter.note}\n{stamp}".strip()


# Letters that could still be replayed, so something is still owed to their subscriber.
REPLAYABLE = (DeadLetter.Status.OPEN, DeadLetter.Status.REPLAYED)


def resolve_processed(*, subscriber: str, envelope: Envelope) -> int:
    """The subscriber has processed the message (now, or earlier: this copy was a duplicate): its
    open or replayed letter is closed as processed, so no later replay applies it twice once the
    inbox row that guards it is pruned. One indexed UPDATE, run in the handler's transaction."""
    now = timezone.now()
    stamp = f"\n[{now:%Y-%m-%d %H:%M} dispatch processed] {envelope.type} was processed after it was dead-lettered"
    return DeadLetter.objects.filter(
        subscriber=subscriber, message_id=envelope.message_id, status__in=REPLAYABLE
    ).update(
        status=DeadLetter.Status.PROCESSED,
        resolved_at=now,
        resolved_by="dispatch",
        note=Concat("note", Value(stamp)),
    )
