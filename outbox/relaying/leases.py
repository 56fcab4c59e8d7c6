"""Leases on outbox rows: a relay claims due rows for a short while instead of holding locks
while it talks to the broker, marks what the broker confirmed, and gives back what it could not
send. A lease that runs out (a relay killed, or frozen past it) makes its rows claimable again.

Times are the database's (`now()`) on PostgreSQL: relays on hosts whose clocks disagree never
take back each other's rows, and an event is due by the same clock that judged it published.
"""

import uuid
from datetime import datetime, timedelta
from typing import cast

from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Greatest, Now
from django.utils import timezone

from outbox.core.working_database import connection, current
from outbox.models import OutboxMessage


def claim(*, lease: timedelta, batch_size: int, token: str | None = None) -> list[OutboxMessage]:
    """Claim up to `batch_size` due rows under a lease of `lease`, for this caller alone (`token`)."""
    token = token or uuid.uuid4().hex
    if connection.vendor == "postgresql":
        return _claim_in_one_statement(token, lease=lease, batch_size=batch_size)
    now = timezone.now()  # the embedded default: one host, one clock
    with transaction.atomic(using=current()):
        due = (
            OutboxMessage.objects.filter(published_at__isnull=True, available_at__lte=now)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
            .order_by("id")
        )
        ids = list(due.select_for_update(skip_locked=True).values_list("id", flat=True)[:batch_size])
        if not ids:
            return []
        # The claimed_until check makes a claim safe even where SKIP LOCKED is a no-op (SQLite).
        OutboxMessage.objects.filter(id__in=ids).filter(
            Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)
        ).update(claimed_until=now + lease, claimed_by=token, send_attempts=F("send_attempts") + 1)
    return list(OutboxMessage.objects.filter(claimed_by=token, published_at__isnull=True).order_by("id"))


def _claim_in_one_statement(token: str, *, lease: timedelta, batch_size: int) -> list[OutboxMessage]:
    """Lock the due rows, lease them and read them back in one round trip (the pending index
    serves the inner query). Due times and leases are read and written on the database's
    clock: relays on hosts whose clocks disagree never take back each other's leased rows."""
    table = OutboxMessage._meta.db_table
    rows = OutboxMessage.objects.raw(
        f"""
        UPDATE {table} SET claimed_until = now() + make_interval(secs => %s), claimed_by = %s,
            send_attempts = send_attempts + 1
        WHERE id IN (
            SELECT id FROM {table}
            WHERE published_at IS NULL AND available_at <= now()
                AND (claimed_until IS NULL OR claimed_until < now())
            ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
        )
        RETURNING *
        """,
        [lease.total_seconds(), token, batch_size],
    )
    return sorted(rows, key=lambda row: row.id)


def mark_published(rows: list[OutboxMessage]) -> None:
    """Mark rows this relay still holds; a row claimed anew meanwhile (a replay reset it) stays to send."""
    for held in _still_held(rows):
        held.update(published_at=Now(), claimed_until=None)


def release(rows: list[OutboxMessage]) -> None:
    """Give back claims of rows not sent through no fault of their own: the attempt does not count."""
    for held in _still_held(rows):
        held.update(claimed_until=None, claimed_by="", send_attempts=Greatest(F("send_attempts") - 1, 0))


def release_claim(token: str) -> None:
    """Give back whatever a claim took whose outcome its relay never learned: the database went
    away as it committed, so the rows may be leased to a token no one holds."""
    unsent = OutboxMessage.objects.filter(claimed_by=token, published_at__isnull=True)
    unsent.update(claimed_until=None, claimed_by="", send_attempts=Greatest(F("send_attempts") - 1, 0))


class Unsettled:
    """What a relay could not write back because the database went away mid-round (a failover): claims whose outcome
    it never learned, rows to give back, confirmed rows not yet marked. Settled by the next round that reaches the
    database, not left for the leases to run out, which would send again what the broker had confirmed."""

    def __init__(self):
        self.claims: list[str] = []
        self.to_release: list[OutboxMessage] = []
        self.to_mark: list[OutboxMessage] = []

    def __len__(self) -> int:
        return len(self.claims) + len(self.to_release) + len(self.to_mark)

    def settle(self) -> None:
        """Write each back; a DatabaseError (still unreachable) leaves the rest for next time."""
        if self.to_mark:
            mark_published(self.to_mark)
            self.to_mark = []
        if self.to_release:
            release(self.to_release)
            self.to_release = []
        while self.claims:
            release_claim(self.claims[0])
            self.claims.pop(0)


def postpone(rows: list[OutboxMessage], *, seconds: float, counted: bool = False) -> None:
    """Hold rows `seconds` more instead of their whole lease, then they are tried again. A row
    whose queue is down is not to blame: its attempt is given back unless `counted`."""
    later = timedelta(seconds=seconds)
    until = Now() + later if connection.vendor == "postgresql" else timezone.now() + later  # the database's clock
    attempts = F("send_attempts") if counted else Greatest(F("send_attempts") - 1, 0)
    for held in _still_held(rows):
        held.update(claimed_until=until, send_attempts=attempts)


def seconds_until_next_due() -> float | None:
    """Seconds until the soonest unpublished row is due and not leased by another relay (on the database's clock
    where there is one): how long the relay may sleep. Asked after every drain, however many timers are pending."""
    # The earliest unleased row comes first in the pending index and the earliest lease first in the leased index,
    # so two index probes answer it, never a pass over the pending rows.
    pending = OutboxMessage.objects.filter(published_at__isnull=True)
    unleased = pending.filter(claimed_until__isnull=True).order_by("available_at", "id")
    leased = pending.filter(claimed_until__isnull=False).order_by("claimed_until")
    soonest = unleased.values("available_at")[:1]
    lease_ends = leased.values("claimed_until")[:1]
    if connection.vendor != "postgresql":
        times = [cast(datetime, next(iter(t.values()))) for t in (soonest.first(), lease_ends.first()) if t]
        at = min(times, default=None)
        return None if at is None else max(0.0, (at - timezone.now()).total_seconds())
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT EXTRACT(EPOCH FROM LEAST(({_sql(soonest)}), ({_sql(lease_ends)})) - now())",
            [*_params(soonest), *_params(lease_ends)],
        )
        seconds = cursor.fetchone()[0]
    return None if seconds is None else max(0.0, float(seconds))


def _sql(query) -> str:
    return query.query.sql_with_params()[0]


def _params(query) -> tuple:
    return query.query.sql_with_params()[1]


def _still_held(rows: list[OutboxMessage]):
    """The rows, one query set per claim they came from, each still held by that claim."""
    by_claim: dict[str, list[int]] = {}
    for row in rows:
        by_claim.setdefault(row.claimed_by, []).append(row.id)
    for token, ids in by_claim.items():
        yield OutboxMessage.objects.filter(id__in=ids, claimed_by=token)
