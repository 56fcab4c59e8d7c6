"""Reason codes and the dead-letter store: failure kept as data, never dropped."""

import logging
import traceback as tb
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from outbox.models import DeadLetter

logger = logging.getLogger(__name__)


class Reason(StrEnum):
    """Why a message was dead-lettered; the catalog is documented in the README."""

    INVALID_ENVELOPE = "invalid_envelope"
    UNKNOWN_TYPE = "unknown_type"
    UNSUPPORTED_VERSION = "unsupported_version"
    INVALID_PAYLOAD = "invalid_payload"
    LOOP_DETECTED = "loop_detected"
    HANDLER_ERROR = "handler_error"


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
            updated = DeadLetter.objects.filter(subscriber=subscriber, message_id=message_id).update(
                attempts=F("attempts") + attempts, **details
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
