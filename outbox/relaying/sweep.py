"""The redelivery sweep: nothing is lost even when the broker loses it.

Each relayed event knows who must process it (its recipients); the inboxes and the letters say
who did or gave up. A recipient that has done neither OUTBOX_SWEEP_GRACE_SECONDS after the event
was relayed gets it again, as a copy for it alone, and after OUTBOX_SWEEP_MAX_RESENDS the event
is dead-lettered as `never_acknowledged`. Only rows not yet settled, within the horizon, are read,
through a partial index, in pages (each its own short transaction, one relay's at a time: a row of
outbox.models.Lock) until it has caught up: its capacity is the database's, not a page an interval.
"""

import contextvars
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections, transaction
from django.db.models import F, Q
from django.utils import timezone

from outbox import placement
from outbox.core.dead_letters import Reason, record_dead_letter
from outbox.core.subscriptions import subscribers, subscribers_of
from outbox.core.working_database import connection, current, working_in
from outbox.models import DeadLetter, InboxMessage, Lock, OutboxMessage
from outbox.observability.metrics import SWEPT

logger = logging.getLogger(__name__)


# Rows a page reads: its inbox lookups stay one indexed query per subscriber.
PAGE_SIZE = 2000


@dataclass
class Swept:
    looked_at: int = 0
    settled: int = 0
    resent: int = 0
    dead_lettered: int = 0
    pages: int = 0
    skipped: bool = False  # another process was sweeping

    def add(self, other: "Swept") -> None:
        for name in ("looked_at", "settled", "resent", "dead_lettered", "pages"):
            setattr(self, name, getattr(self, name) + getattr(other, name))


def sweep_unacknowledged(
    *, limit: int | None = None, page_size: int = PAGE_SIZE, stop: threading.Event | None = None
) -> Swept:
    """Settle what every recipient acknowledged, resend what one has not, give up after a bound:
    page after page, until every unsettled row past its grace was looked at (or `limit` were, or
    `stop` is set)."""
    swept, now, after = Swept(), _now(), None
    while (limit is None or swept.looked_at < limit) and not (stop and stop.is_set()):
        size = page_size if limit is None else min(page_size, limit - swept.looked_at)
        page, after = _sweep_page(now=now, after=after, size=size)
        if page.skipped:
            swept.skipped = swept.pages == 0
            break
        swept.add(page)
        SWEPT.labels("looked_at").inc(page.looked_at)
        SWEPT.labels("settled").inc(page.settled)
        SWEPT.labels("resent").inc(page.resent)
        SWEPT.labels("dead_lettered").inc(page.dead_lettered)
        if page.looked_at < size:
            break  # caught up
    if swept.resent or swept.dead_lettered:
        logger.warning(
            "sweep: %d relayed events looked at, %d copies sent again, %d never acknowledged",
            swept.looked_at,
            swept.resent,
            swept.dead_lettered,
        )
    return swept


def _sweep_page(*, now, after: tuple | None, size: int) -> tuple[Swept, tuple | None]:
    """One page in one transaction: the next `size` unsettled rows past their grace after `after`."""
    swept = Swept(pages=1)
    with transaction.atomic(using=current()):
        if not _only_sweeper():
            return Swept(skipped=True), after
        unsettled = OutboxMessage.objects.filter(
            target_subscriber="",
            acknowledged_at__isnull=True,
            published_at__isnull=False,
            published_at__gte=now - timedelta(seconds=settings.OUTBOX_SWEEP_HORIZON_SECONDS),
            published_at__lt=now - timedelta(seconds=settings.OUTBOX_SWEEP_GRACE_SECONDS),
        )
        if after is not None:
            published_at, row_id = after
            unsettled = unsettled.filter(Q(published_at__gt=published_at) | Q(published_at=published_at, id__gt=row_id))
        keys = list(unsettled.order_by("published_at", "id").values_list("published_at", "id")[:size])
        swept.looked_at = len(keys)
        ids = [row_id for _, row_id in keys]
        at_once = connection.vendor == "postgresql" and _every_inbox_here()
        settled_at_once = _settle_acknowledged(ids, now=now) if at_once else set()
        rows = list(OutboxMessage.objects.filter(id__in=set(ids) - settled_at_once))
        waiting, unread = _unacknowledged(rows)
        settled = [row.id for row in rows if not waiting.get(row.message_id) and row.message_id not in unread]
        swept.settled = len(settled_at_once) + OutboxMessage.objects.filter(id__in=settled).update(acknowledged_at=now)
        owed = {(row.message_id, s) for row in rows for s in waiting.get(row.message_id, ())}
        copies = _copies_sent_again(owed)
        for row in sorted(rows, key=lambda row: row.id):
            for subscriber in waiting.get(row.message_id, ()):
                copy = copies.get((row.message_id, subscriber))
                if _resend(row, subscriber, copy, now=now):
                    swept.resent += 1
                elif _give_up(row, subscriber, copy, now=now):
                    swept.dead_lettered += 1
    return swept, (keys[-1] if keys else after)


def _settle_acknowledged(ids: list[int], *, now) -> set[int]:
    """Settle, in one statement, the rows of the page whose every recorded recipient has an inbox
    row or a letter that is not a pending replay; the rest (few) are looked at one by one."""
    outbox = OutboxMessage._meta.db_table
    inbox, letters = InboxMessage._meta.db_table, DeadLetter._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {outbox} o SET acknowledged_at = %s
            WHERE o.id = ANY(%s) AND jsonb_array_length(o.recipients) > 0 AND NOT EXISTS (
                SELECT 1 FROM jsonb_array_elements_text(o.recipients) AS r(subscriber)
                WHERE NOT EXISTS (
                    SELECT 1 FROM {inbox} i WHERE i.subscriber = r.subscriber AND i.message_id = o.message_id
                ) AND NOT EXISTS (
                    SELECT 1 FROM {letters} d
                    WHERE d.subscriber = r.subscriber AND d.message_id = o.message_id AND d.status <> %s
                )
            )
            RETURNING o.id
            """,
            [now, ids, DeadLetter.Status.REPLAYED],
        )
        return {row_id for (row_id,) in cursor.fetchall()}


def _every_inbox_here() -> bool:
    """Whether every subscriber's inbox and letters are on this database, as on the default
    topology: a context on a database of its own (outbox.placement.databases) has them on its."""
    return not placement.routed() or all(placement.database_of_subscriber(s) == current() for s in subscribers())


def lag_seconds(*, grace: float | None = None) -> float:
    """The age of the oldest unsettled relayed row beyond its grace (0 when none): the sweep behind,
    or a subscriber that has not acknowledged it (an outage; the sweep is resending to it)."""
    grace = settings.OUTBOX_SWEEP_GRACE_SECONDS if grace is None else grace
    oldest = (
        OutboxMessage.objects.filter(target_subscriber="", acknowledged_at__isnull=True, published_at__isnull=False)
        .filter(published_at__gte=timezone.now() - timedelta(seconds=settings.OUTBOX_SWEEP_HORIZON_SECONDS))
        .order_by("published_at", "id")
        .values_list("published_at", flat=True)
        .first()
    )
    if oldest is None:
        return 0.0
    return max(0.0, (timezone.now() - oldest).total_seconds() - grace)


def _only_sweeper() -> bool:
    """Whether this transaction holds the sweep's lock (a row of outbox.models.Lock, which no
    context's role may lock; made again if it is missing, as after a flush)."""
    if connection.vendor != "postgresql":
        return True  # SQLite serialises writers
    with connection.cursor() as cursor:
        cursor.execute(_TAKE_THE_SWEEP.format(table=connection.ops.quote_name(Lock._meta.db_table)))
        return cursor.fetchone()[0]


_TAKE_THE_SWEEP = (
    "WITH made AS (INSERT INTO {table} (name) VALUES ('sweep') ON CONFLICT (name) DO NOTHING RETURNING name) "
    "SELECT EXISTS (SELECT FROM made) OR EXISTS (SELECT FROM {table} WHERE name = 'sweep' FOR UPDATE SKIP LOCKED)"
)


def _recipients(row: OutboxMessage) -> list[str]:
    return list(row.recipients) if row.recipients else subscribers_of(row.type)


def _unacknowledged(rows: list[OutboxMessage]) -> tuple[dict[UUID, list[str]], set[UUID]]:
    """Per message, the recipients with neither an inbox row nor an open or discarded dead letter;
    and the messages with a recipient on a database that did not answer (another context's: this
    page goes on without them, which are neither settled nor sent again until it answers)."""
    wanted: dict[str, list[UUID]] = {}
    for row in rows:
        for subscriber in _recipients(row):
            wanted.setdefault(subscriber, []).append(row.message_id)
    missing: dict[UUID, list[str]] = {}
    unread: set[UUID] = set()
    for subscriber, ids in wanted.items():
        where = placement.database_of_subscriber(subscriber)  # its inbox is beside its context's tables
        try:
            done = _acknowledged(subscriber, ids, where)
        except DatabaseError as error:
            if where == current():
                raise  # this page's own database: the page fails, and the next run tries again
            connections[where].close()  # a new one next time: a connection that failed is not checked again
            logger.warning("sweep: %s's acknowledgements unread, its database %s is away: %s", subscriber, where, error)
            unread.update(ids)
            continue
        for message_id in ids:
            if message_id not in done:
                missing.setdefault(message_id, []).append(subscriber)
    return missing, unread


def _acknowledged(subscriber: str, ids: list[UUID], where: str) -> set[UUID]:
    """Of `ids`, those `subscriber` processed or gave up on (a letter not waiting for its replay)."""
    done = set(
        InboxMessage.objects.using(where)
        .filter(subscriber=subscriber, message_id__in=ids)
        .values_list("message_id", flat=True)
    )
    letters = (
        DeadLetter.objects.using(where)
        .filter(subscriber=subscriber, message_id__in=ids)
        .exclude(status=DeadLetter.Status.REPLAYED)  # a replay not yet processed is still owed
        .values_list("message_id", flat=True)
    )
    return done | {message_id for message_id in letters if message_id is not None}


def _now():
    """The database's clock, which also stamped `published_at`; the process's on SQLite (one host)."""
    if connection.vendor != "postgresql":
        return timezone.now()
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        return cursor.fetchone()[0]


def _copies_sent_again(owed: set[tuple[UUID, str]]) -> dict[tuple[UUID, str], OutboxMessage]:
    """The copies for one subscriber (resends, replays) of the page's unacknowledged events, locked,
    in one query: during a subscriber's outage every row of every page is owed to it."""
    if not owed:
        return {}
    copies = OutboxMessage.objects.select_for_update().filter(
        message_id__in={message_id for message_id, _ in owed},
        target_subscriber__in={subscriber for _, subscriber in owed},
    )
    return {(c.message_id, c.target_subscriber): c for c in copies.order_by("id")}


def _resend(row: OutboxMessage, subscriber: str, existing: OutboxMessage | None, *, now) -> bool:
    """Queue a copy for `subscriber` alone, unless one is on its way or the resends are spent."""
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
    OutboxMessage.objects.filter(pk=existing.pk).update(
        published_at=None,
        claimed_until=None,
        claimed_by="",
        send_attempts=0,
        available_at=now,
        resends=F("resends") + 1,
    )
    return True


def _give_up(row: OutboxMessage, subscriber: str, copy: OutboxMessage | None, *, now) -> bool:
    grace = timedelta(seconds=settings.OUTBOX_SWEEP_GRACE_SECONDS)
    spent = (
        copy is not None
        and copy.resends >= settings.OUTBOX_SWEEP_MAX_RESENDS
        and copy.published_at is not None
        and copy.published_at <= now - grace
    )
    if spent:
        # Beside the subscriber's inbox, on its database (committed there before this page commits:
        # should the page roll back, the next one finds the letter and settles the row).
        with working_in(placement.database_of_subscriber(subscriber)):
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


class Sweeper(threading.Thread):
    """The redelivery sweep, every OUTBOX_SWEEP_INTERVAL_SECONDS, in a thread of the relay's own:
    it runs whatever the relay is doing (a relay kept busy for hours never returns from its drain),
    on a database connection of its own, and an error in it never stops the relay."""

    def __init__(self, stop: threading.Event, *, also: tuple = ()):
        super().__init__(name="outbox-sweep", daemon=True)
        self.stop, self.runs, self.also = stop, 0, also  # `also`: more periodic work, each a callable
        # The relay's context: a relay run in a thread of its own in one database (`working_in`,
        # as the kernel's pytest fixture runs one per database) sweeps that database's outbox.
        self.relays_context = contextvars.copy_context()

    def run(self) -> None:
        self.relays_context.run(self._sweep_until_stopped)

    def _sweep_until_stopped(self) -> None:
        try:
            while not self.stop.is_set():
                try:
                    sweep_unacknowledged(stop=self.stop)
                    for job in self.also:
                        job()
                    self.runs += 1
                except Exception as error:
                    logger.warning("redelivery sweep failed, will try again: %s", error, exc_info=True)
                    close_old_connections()
                self.stop.wait(settings.OUTBOX_SWEEP_INTERVAL_SECONDS)
        finally:
            connections.close_all()  # this thread's: its outbox's, and the others' it read acknowledgements on
