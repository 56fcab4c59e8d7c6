from uuid import UUID

from django.db import transaction

from outbox.core.publishing import atomic as outbox_atomic
from outbox.core.publishing import publish
from tests.probe.events import ProbeEchoed, ProbePinged, ProbeUndoRequested
from tests.probe.models import Effect, Ping


class Exploded(Exception):
    pass


def ping(
    *,
    n: int,
    fail: dict[str, str] | None = None,
    explode: bool = False,
    correlation_id: UUID | None = None,
    available_at=None,
) -> Ping:
    with transaction.atomic():
        record = Ping.objects.create(n=n)
        publish(
            ProbePinged(n=n, fail=fail or {}),
            stream=f"ping:{record.pk}",
            correlation_id=correlation_id,
            available_at=available_at,
        )
        if explode:
            raise Exploded("after publishing, before commit")
        return record


def record_effect(*, subscriber: str, message_id: UUID, type: str, n: int, echo: bool = False) -> None:
    Effect.objects.create(subscriber=subscriber, message_id=message_id, type=type, n=n)
    if echo:
        publish(ProbeEchoed(n=n + 1), stream=f"echo:{subscriber}")


def refuse_inside_a_service(*, n: int) -> None:
    """A service whose refusal comes after a write, inside `outbox.core.publishing.atomic`."""
    with outbox_atomic():
        Ping.objects.create(n=n)
        raise Exploded("the service refused")


def request_undo(*, n: int, fail: dict[str, str] | None = None) -> None:
    with transaction.atomic():
        publish(ProbeUndoRequested(n=n, fail=fail or {}), stream=f"undo:{n}")
