"""The redelivery sweep: nothing is lost even when the broker loses it.

For every relayed event the outbox knows who must process it (its recipients) and can see who
did (the inboxes) or gave up (open or discarded dead letters). A recipient that has done
neither OUTBOX_SWEEP_GRACE_SECONDS after the event was relayed gets it again, through the
outbox, as a copy for that subscriber alone (its inbox drops it if the first copy was only
late). After OUTBOX_SWEEP_MAX_RESENDS such copies it is dead-lettered as `never_acknowledged`.

Only rows not yet settled, relayed within OUTBOX_SWEEP_HORIZON_SECONDS, are looked at, through
a partial index; a row every recipient has acknowledged is marked settled and never read again.
"""

import logging
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from outbox.dead_letters import Reason, record_dead_letter
from outbox.models import DeadLetter, InboxMessage, OutboxMessage
from outbox.subscriptions import subscribers_of

logger = logging.getLogger(__name__)


@dataclass
class Swept:
    looked_at: int = 0
    settled: int = 0
    resent: int = 0
    dead_lettered: int = 0
    skipped: bool = False  # another process was sweeping


def sweep_unacknowledged(*, limit: int = 5000) -> Swept:
    """Settle what every recipient acknowledged, resend what one has not, give up after a bound."""
    swept, now = Swept(), timezone.now()
    with transaction.atomic():
        if not _only_sweeper():
            return Swept(skipped=True)
        unsettled = OutboxMessage.objects.filter(
            target_subscriber="",
            acknowledged_at__isnull=True,
            published_at__isnull=False,
            published_at__gte=now - timedelta(seconds=settings.OUTBOX_SWEEP_HORIZON_SECONDS),
            published_at__lt=now - timedelta(seconds=settings.OUTBOX_SWEEP_GRACE_SECONDS),
        ).order_by("published_at", "id")[:limit]
        rows = list(unsettled)
        swept.looked_at = len(rows)
        waiting = _unacknowledged(rows)
        settled = [row.id for row in rows if not waiting.get(row.message_id)]
        swept.settled = OutboxMessage.objects.filter(id__in=settled).update(acknowledged_at=now)
        for row in rows:
            for subscriber in waiting.get(row.message_id, ()):
                if _resend(row, subscriber, now=now):
                    swept.resent += 1
                elif _give_up(row, subscriber, now=now):
                    swept.dead_lettered += 1
    if swept.resent or swept.dead_lettered:
        logger.warning(
            "sweep: %d relayed events looked at, %d copies sent again, %d never acknowledged",
            swept.looked_at,
            swept.resent,
            swept.dead_lettered,
        )
    return swept


def _only_sweeper() -> bool:
    if connection.vendor != "postgresql":
        return True  # SQLite serialises writers
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(hashtext('outbox.sweep'))")
        return cursor.fetchone()[0]


def _recipients(row: OutboxMessage) -> list[str]:
    return list(row.recipients) if row.recipients else subscribers_of(row.type)


def _unacknowledged(rows: list[OutboxMessage]) -> dict[UUID, list[str]]:
    """Per message, the recipients with neither an inbox row nor an open or discarded dead letter."""
    wanted: dict[str, list[UUID]] = {}
    for row in rows:
        for subscriber in _recipients(row):
            wanted.setdefault(subscriber, []).append(row.message_id)
    missing: dict[UUID, list[str]] = {}
    for subscriber, ids in wanted.items():
        done = set(
            InboxMessage.objects.filter(subscriber=subscriber, message_id__in=ids).values_list("message_id", flat=True)
        )
        done |= set(
            DeadLetter.objects.filter(subscriber=subscriber, message_id__in=ids)
            .exclude(status=DeadLetter.Status.REPLAYED)  # a replay not yet processed is still owed
            .values_list("message_id", flat=True)
        )
        for message_id in ids:
            if message_id not in done:
                missing.setdefault(message_id, []).append(subscriber)
    return missing


def _resend(row: OutboxMessage, subscriber: str, *, now) -> bool:
    """Queue a copy for `subscriber` alone, unless one is on its way or the resends are spent."""
    copy = OutboxMessage.objects.select_for_update().filter(message_id=row.message_id, target_subscriber=subscriber)
    existing = copy.first()
    grace = timedelta(seconds=settings.OUTBOX_SWEEP_GRACE_SECONDS)
    if existing is None:
        OutboxMessage.objects.create(
            message_id=row.message_id,
            type=row.type,
            version=row.version,
            source=row.source,
            occurred_at=row.occurred_at,
            correlation_id=row.correlation_id,
            causation_id=row.causation_id,
            stream=row.stream,
            sequence=row.sequence,
            hops=row.hops,
            payload=row.payload,
            available_at=now,
            target_subscriber=subscriber,
            recipients=[subscriber],
            resends=1,
        )
        return True
    if existing.published_at is None or existing.published_at > now - grace:
        return False  # a copy is on its way, or had too little time yet
    if existing.resends >= settings.OUTBOX_SWEEP_MAX_RESENDS:
        return False
    copy.update(
        published_at=None,
        claimed_until=None,
        claimed_by="",
        send_attempts=0,
        available_at=now,
        resends=F("resends") + 1,
    )
    return True


def _give_up(row: OutboxMessage, subscriber: str, *, now) -> bool:
    spent = OutboxMessage.objects.filter(
        Q(published_at__lte=now - timedelta(seconds=settings.OUTBOX_SWEEP_GRACE_SECONDS)),
        message_id=row.message_id,
        target_subscriber=subscriber,
        resends__gte=settings.OUTBOX_SWEEP_MAX_RESENDS,
    ).exists()
    if spent:
        record_dead_letter(
            subscriber=subscriber,
            body=row.envelope(),
            reason=Reason.NEVER_ACKNOWLEDGED,
            error=LookupError(
                f"{subscriber} acknowledged none of {settings.OUTBOX_SWEEP_MAX_RESENDS + 1} copies sent "
                f"{settings.OUTBOX_SWEEP_GRACE_SECONDS:.0f} s or more apart"
            ),
            attempts=settings.OUTBOX_SWEEP_MAX_RESENDS + 1,
        )
    return spent
