"""Envelopes and dead letters as the kernel would make them, of the probe's ping."""

import uuid

from django.utils import timezone

from outbox.core.fingerprints import error_fingerprint
from outbox.models import DeadLetter


def envelope(**overrides) -> dict:
    """A well-formed probe.pinged envelope, as the relay would send it."""
    body = {
        "message_id": str(uuid.uuid4()),
        "type": "probe.pinged",
        "version": 1,
        "occurred_at": timezone.now().isoformat(),
        "correlation_id": str(uuid.uuid4()),
        "causation_id": None,
        "stream": "ping:test",
        "sequence": 1,
        "hops": 0,
        "payload": {"n": 1, "fail": {}},
    }
    return {**body, **overrides}


def a_dead_letter(**overrides) -> DeadLetter:
    """An open letter of probe_b's, handler_error after four attempts, unless `overrides` say otherwise."""
    body = envelope()
    now = timezone.now()
    fields = {
        "subscriber": "probe_b",
        "message_id": body["message_id"],
        "type": body["type"],
        "correlation_id": body["correlation_id"],
        "envelope": body,
        "reason": "handler_error",
        "error": "boom",
        "traceback": "Traceback (most recent call last):\n  boom",
        "attempts": 4,
        "first_failed_at": now,
        "last_failed_at": now,
    }
    fields = {**fields, **overrides}
    fields.setdefault("fingerprint", error_fingerprint(fields.get("exception_type", ""), fields["error"]))
    return DeadLetter.objects.create(**fields)
