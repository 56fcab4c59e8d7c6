"""The relay: hand committed outbox rows to the broker, one copy per subscriber queue.

Rows are claimed (a short lease in its own transaction, `SKIP LOCKED`, so relays share the work),
sent with publisher confirms (on RabbitMQ in packs: outbox.relaying.publishers) and marked
published; no lock or transaction is held while talking to the broker. A relay that dies between
sending and marking leaves an expiring lease, and the inboxes drop the copies sent again. Rows are
found by "not yet published", never by a watermark. Any error backs off and is retried, what the
broker confirmed marked first; a row that alone keeps failing is held back while the rows behind
it flow, then set aside as `unsendable` for each subscriber it had not reached.
"""

import logging
import random
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Hashable
from datetime import timedelta
from functools import partial

import dramatiq
from django.conf import settings
from django.db import DatabaseError, close_old_connections, transaction
from django.utils import timezone

from outbox import placement
from outbox.core import wake_up
from outbox.core.brokers import is_rabbitmq, is_redis
from outbox.core.dead_letters import Reason, record_dead_letter
from outbox.core.subscriptions import message_to, queue_name, subscribers, subscribers_of
from outbox.core.working_database import current, working_in
from outbox.models import OutboxMessage
from outbox.observability import tracing
from outbox.observability.metrics import RELAYED, SEND_FAILURES
from outbox.relaying import heartbeats, leases
from outbox.relaying.broker_letters import collect_broker_dead_letters
from outbox.relaying.publishers import Outcome
from outbox.relaying.queue_outages import QueueOutages, QueueUnavailable, Reached
from outbox.relaying.sweep import Sweeper

logger = logging.getLogger(__name__)

# A row failing alone counts towards being set aside only if other rows were sent this recently.
SUSPICION_SECONDS = 60
try:
    from redis.exceptions import ConnectionError as RedisConnectionError
except ImportError:  # a project on RabbitMQ alone has no Redis client
    RedisConnectionError = OSError  # type: ignore[misc,assignment]
_BROKER_ERRORS = (dramatiq.errors.BrokerError, RedisConnectionError, OSError)


def _closed_by_the_broker(error: Exception | None) -> bool:
    """RabbitMQ closed the channel (a copy it refused: too large, a bad property). Its client is
    loaded whenever it raised, so it is asked only where it is there."""
    exceptions = sys.modules.get("pika.exceptions")
    return exceptions is not None and isinstance(error, exceptions.ChannelClosedByBroker)


def publisher_for(broker: dramatiq.Broker, *, pack_size: int):
    """The relay's publisher for `broker`: RabbitMQ's with its confirms, or Redis's pipeline; None
    for another broker (each copy then goes through Dramatiq's `enqueue`). Each loads its client."""
    if is_rabbitmq(broker) and broker.confirm_delivery:
        from outbox.relaying.rabbitmq_publisher import PipelinedPublisher

        return PipelinedPublisher(broker, pack_size=pack_size)
    if is_redis(broker):
        from outbox.relaying.redis_publisher import RedisPipelinedPublisher

        return RedisPipelinedPublisher(broker)
    return None


class BrokerUnavailable(Exception):
    """The broker refused or lost a send; the unsent rows were released for a later try."""


class BrokerRefused(Exception):
    """The broker nacked or returned a copy of the row."""


class _SendFailed(Exception):
    """A row that failed to send, and the subscribers whose copy got through all the same."""

    def __init__(self, row: OutboxMessage, error: Exception, *, delivered_to: frozenset[str] = frozenset()):
        super().__init__(f"{type(error).__name__}: {error}")
        self.row, self.error, self.delivered_to = row, error, delivered_to


def _key(row: OutboxMessage) -> tuple[int, str]:
    """A row as the publisher tracks it: one claim of it. Copies sent under an older claim (its
    lease ran out while they awaited their confirms) never count for a newer one."""
    return row.id, row.claimed_by


class Relay:
    def __init__(
        self,
        *,
        broker: dramatiq.Broker | None = None,
        batch_size: int | None = None,
        lease_seconds: float | None = None,
    ):
        self.broker = broker or dramatiq.get_broker()
        self.batch_size = batch_size or settings.OUTBOX_RELAY_BATCH_SIZE
        self.lease = timedelta(seconds=lease_seconds or settings.OUTBOX_RELAY_LEASE_SECONDS)
        self.relayed = 0
        self.last_success: float | None = None
        self.failed_rounds = 0  # rounds that ended in an error and a pause
        self.idle = threading.Event()  # set while it waits for a NOTIFY or the next poll
        self.unsettled = leases.Unsettled()  # what a round could not write back: the database had gone
        self.next_beat = 0.0  # monotonic time of the next heartbeat
        self.process, self.started_at = heartbeats.process_name("relay"), timezone.now()
        self.queues_down = QueueOutages()  # queues that return this relay's copies as unroutable
        self.reached = Reached()  # row id -> subscribers whose copy the broker took (outbox.relaying.queue_outages)
        self.publisher = publisher_for(self.broker, pack_size=settings.OUTBOX_RELAY_PACK_SIZE)

    def relay_batch(self) -> int:
        """Claim, send and mark one batch of due rows; return how many were published."""
        rows = self.claim_batch()
        if not rows:
            return 0
        if self.publisher is None:
            outcome, suspects = self._send_one_by_one(rows)
            failed = {_key(suspect.row) for suspect in suspects}
            return self._settle({_key(row): row for row in rows if _key(row) not in failed}, outcome, suspects)
        in_flight, suspects = self._start(rows)
        try:
            return self._settle(in_flight, self.publisher.finish(), suspects)
        finally:
            self._release(list(in_flight.values()))  # only if the broker left some unresolved

    def drain(self, stop: threading.Event | None = None) -> int:
        """Relay until nothing is due and nothing is in flight."""
        self.unsettled.settle()  # what an earlier round could not write back
        if self.publisher is not None:
            return self._stream(stop)
        total = 0
        while not (stop and stop.is_set()):
            count = self.relay_batch()
            total += count
            if count < self.batch_size:
                break
        return total

    def _stream(self, stop: threading.Event | None) -> int:
        """Claim and send while earlier copies await their confirms; mark rows as confirms arrive. RabbitMQ confirms a
        copy a consumer takes at once only when the consumer acks it, after its handler ran: waiting for each batch's
        confirms before claiming the next would hold every event committed meanwhile for a handler's duration."""
        in_flight: dict[tuple[int, str], OutboxMessage] = {}
        total = 0
        try:
            while True:
                claimed: list[OutboxMessage] = []
                suspects: list[_SendFailed] = []
                # After a nack nothing new is sent until the copies in flight are resolved: only a
                # quiet channel can be swapped for a fresh one (see PipelinedPublisher.wants_fresh_channel).
                quieting = self._pipelined.wants_fresh_channel and bool(in_flight)
                if len(in_flight) < 2 * self.batch_size and not (stop and stop.is_set()) and not quieting:
                    claimed = self.claim_batch()
                    if claimed:
                        started, suspects = self._start(claimed)
                        in_flight.update(started)
                if not in_flight and not suspects:
                    return total
                busy = len(claimed) >= self.batch_size
                total += self._settle(in_flight, self._pipelined.collect(wait=0 if busy else 0.005), suspects)
                self._beat_if_due()  # a relay kept busy for minutes is alive too
        finally:
            self._release(list(in_flight.values()))  # stopped by an error: claimed, not sent

    @property
    def _pipelined(self):
        """The publisher, in a relay that pipelines (on every broker but Dramatiq's stub)."""
        assert self.publisher is not None
        return self.publisher

    def _start(self, rows: list[OutboxMessage]) -> tuple[dict[tuple[int, str], OutboxMessage], list[_SendFailed]]:
        """Put the rows in flight; a row that cannot even be encoded is a suspect instead."""
        in_flight: dict[tuple[int, str], OutboxMessage] = {}
        suspects: list[_SendFailed] = []
        batch: list[tuple[Hashable, list[dramatiq.Message]]] = []
        for row in rows:
            with tracing.relaying(row.trace_context, event_type=row.type, message_id=row.message_id):
                try:
                    batch.append((_key(row), self._copies(row)))
                    in_flight[_key(row)] = row
                except Exception as error:
                    suspects.append(_SendFailed(row, error))
        self._pipelined.start(batch)
        return in_flight, suspects

    def _copies(self, row: OutboxMessage) -> list[dramatiq.Message]:
        envelope = row.envelope()
        return [message_to(subscriber, envelope) for subscriber in self._not_reached(row)]

    def _not_reached(self, row: OutboxMessage) -> list[str]:
        """The row's subscribers whose copy the broker has not taken yet (all, the first time)."""
        reached = self.reached.get(row.id, ())
        return [subscriber for subscriber in self.recipients(row) if subscriber not in reached]

    def _isolate(
        self, rows: list[OutboxMessage]
    ) -> tuple[list[OutboxMessage], list[_SendFailed], list, Exception | None]:
        """Find the row whose copy made the broker close the channel (over its max_message_size, say), which no
        confirm tells: send the rows again in halves until it is alone, the only suspect. Returns what was sent, the
        suspects, and, should the broker be lost meanwhile, the rows not yet resolved with the error."""
        sent: list[OutboxMessage] = []
        suspects: list[_SendFailed] = []
        groups = [rows[: len(rows) // 2], rows[len(rows) // 2 :]] if len(rows) > 1 else [rows]
        while groups:
            group = groups.pop()
            if not group:
                continue
            unresolved: dict[Hashable, OutboxMessage] = {_key(row): row for row in group}
            outcome = self._pipelined.publish([(key, self._copies(row)) for key, row in unresolved.items()])
            sent += [unresolved.pop(key) for key in outcome.confirmed if key in unresolved]
            for key in outcome.refused & unresolved.keys():
                row = unresolved.pop(key)
                suspects.append(self._refusal(row, outcome.acked.get(key, set())))
            if not unresolved:
                continue
            if not _closed_by_the_broker(outcome.error):
                return sent, suspects, [*unresolved.values(), *(row for g in groups for row in g)], outcome.error
            if len(unresolved) == 1:
                suspects.append(_SendFailed(next(iter(unresolved.values())), outcome.error))
            else:
                left = list(unresolved.values())
                groups += [left[: len(left) // 2], left[len(left) // 2 :]]
        return sent, suspects, [], None

    def _refusal(self, row: OutboxMessage, acked_queues: set[str]) -> _SendFailed:
        self.reached.add(row.id, {s for s in self._not_reached(row) if queue_name(s) in acked_queues})
        delivered = frozenset(self.reached.get(row.id, ()))
        return _SendFailed(row, BrokerRefused("the broker refused a copy"), delivered_to=delivered)

    def _beat_if_due(self) -> None:
        """The heartbeat, every OUTBOX_HEARTBEAT_SECONDS; failing to write it is no outage of the relay."""
        if time.monotonic() < self.next_beat:
            return
        self.next_beat = time.monotonic() + heartbeats.interval()
        try:
            with transaction.atomic(using=current()):  # a savepoint when called inside another: the failure stays here
                heartbeats.beat(process=self.process, kind="relay", started_at=self.started_at, relayed=self.relayed)
        except DatabaseError as error:
            logger.debug("relay heartbeat not written: %s", error)

    def _settle(self, in_flight: dict, outcome: Outcome, suspects: list[_SendFailed]) -> int:
        """Mark the rows the broker confirmed; a refused row is a suspect, kept leased or set
        aside. An error releases everything still in flight, uncounted, except when the broker
        closed the channel over one row: that row is found and counted (see `_isolate`)."""
        sent = [in_flight.pop(key) for key in outcome.confirmed if key in in_flight]
        refused = [(key, in_flight.pop(key)) for key in outcome.refused if key in in_flight]
        for key, row in refused:  # the copies the broker took need not be sent again
            acked = outcome.acked.get(key, set())
            self.reached.add(row.id, {s for s in self._not_reached(row) if queue_name(s) in acked})
        waiting = [(row, outcome.unroutable[key]) for key, row in refused if outcome.unroutable.get(key)]
        refused = [(key, row) for key, row in refused if not outcome.unroutable.get(key)]
        suspects = suspects + [self._refusal(row, outcome.acked.get(key, set())) for key, row in refused]
        if _closed_by_the_broker(outcome.error) and in_flight:
            logger.warning(
                "the broker closed the channel (%s): sending %d rows again in halves", outcome.error, len(in_flight)
            )
            more_sent, more_suspects, lost, error = self._isolate(list(in_flight.values()))
            in_flight.clear()
            in_flight.update({_key(row): row for row in lost})
            sent, suspects, outcome = sent + more_sent, suspects + more_suspects, Outcome(error=error)
        try:
            if sent:
                self.last_success = time.monotonic()
            if outcome.error is not None:
                raise outcome.error
            if suspects and not sent and not self._sending_lately():
                raise suspects[-1].error  # nothing goes through: no row can be told apart from the broker
        except Exception as error:
            # None of them is to blame, the rows waiting for a queue included.
            self._release([*in_flight.values(), *(s.row for s in suspects), *(row for row, _ in waiting)])
            in_flight.clear()
            SEND_FAILURES.labels("broker").inc()
            raise BrokerUnavailable(f"{type(error).__name__}: {error}") from error
        finally:
            self.mark_published(sent)
        self.relayed += len(sent)
        taken = {queue_name(subscriber) for row in sent for subscriber in self._not_reached(row)}
        for row in sent:
            self.reached.pop(row.id, None)
        # Held back only once the confirmed rows are marked: should this fail (the database gone),
        # they are not sent again after their lease.
        self._wait_for_queues(waiting)
        if self.queues_down:
            self.queues_down.taken(taken)
        for event_type, count in Counter(row.type for row in sent).items():
            RELAYED.labels(event_type).inc(count)
        SEND_FAILURES.labels("row").inc(len(suspects))
        for suspect in suspects:  # a row that fails while its neighbours go through keeps its lease
            self._set_aside_if_hopeless(suspect)
        return len(sent)

    def _wait_for_queues(self, waiting: list[tuple[OutboxMessage, set[str]]]) -> None:
        """Rows with a copy returned unroutable wait for its queue, uncounted (see
        outbox.relaying.queue_outages), and the queue is declared again, in case it was deleted; the copies
        of a queue down past OUTBOX_RELAY_QUEUE_WAIT_SECONDS are set aside instead."""
        if not waiting:
            return
        queues = set().union(*(queues for _, queues in waiting))
        wait = self.queues_down.returned(queues)
        if hasattr(self.publisher, "declare_again"):  # RabbitMQ's
            for queue in sorted(queues):
                self.publisher.declare_again(queue)
        bound = settings.OUTBOX_RELAY_QUEUE_WAIT_SECONDS
        overdue = [(row, down) for row, queues in waiting if (down := self.queues_down.overdue(queues))]
        for row, down in overdue:
            error = QueueUnavailable(
                f"queue {', '.join(down)} unavailable for over {bound:g} s (OUTBOX_RELAY_QUEUE_WAIT_SECONDS)"
            )
            logger.warning("relay sets %s aside: %s", row, error)
            self._set_aside(row, error, attempts=row.send_attempts)
        set_aside = {row.id for row, _ in overdue}
        leases.postpone([row for row, _ in waiting if row.id not in set_aside], seconds=wait)

    def _send_one_by_one(self, rows: list[OutboxMessage]) -> tuple[Outcome, list[_SendFailed]]:
        """Through the broker's own enqueue, each copy confirmed in turn (confirms off, or a
        broker of another kind); a broker error stops the batch there."""
        outcome, suspects, streak = Outcome(), [], 0
        for row in rows:
            delivered_to: set[str] = set()
            try:
                self.send(row, delivered_to=delivered_to)
            except Exception as error:
                if isinstance(error, _BROKER_ERRORS) or streak:
                    outcome.error = error  # rows fail one after another: the broker's trouble, not a row's
                    break
                suspects.append(_SendFailed(row, error, delivered_to=frozenset(delivered_to)))
                streak += 1
                continue
            outcome.confirmed.add(_key(row))
            streak = 0
        return outcome, suspects

    def claim_batch(self) -> list[OutboxMessage]:
        token = uuid.uuid4().hex
        try:
            return leases.claim(lease=self.lease, batch_size=self.batch_size, token=token)
        except DatabaseError:
            self.unsettled.claims.append(token)  # it may have committed as the database went away
            raise

    def mark_published(self, rows: list[OutboxMessage]) -> None:
        try:
            leases.mark_published(rows)
        except DatabaseError:
            self.unsettled.to_mark.extend(rows)  # confirmed by the broker: not to be sent again
            raise

    def _release(self, rows: list[OutboxMessage]) -> None:
        try:
            leases.release(rows)
        except DatabaseError as error:  # the round is failing already; give them back at the next one
            self.unsettled.to_release.extend(rows)
            logger.debug("%d claimed rows not given back yet: %s", len(rows), error)

    def seconds_until_next_due(self) -> float | None:
        return leases.seconds_until_next_due()

    def send(self, row: OutboxMessage, *, delivered_to: set[str] | None = None) -> None:
        """Enqueue one copy per subscriber; returns once the broker has confirmed each (adding
        each subscriber to `delivered_to` as its copy is taken)."""
        envelope = row.envelope()
        for subscriber in self._not_reached(row):
            self.broker.enqueue(message_to(subscriber, envelope))
            if delivered_to is not None:
                delivered_to.add(subscriber)

    def recipients(self, row: OutboxMessage) -> list[str]:
        """Those decided at publish time; rows written before they were recorded fall back to the registry."""
        if row.recipients:
            return list(row.recipients)
        return [row.target_subscriber] if row.target_subscriber else subscribers_of(row.type)

    def _sending_lately(self) -> bool:
        """Other rows went through lately: a row that fails alone is then to blame, not the broker."""
        return self.last_success is not None and time.monotonic() - self.last_success < SUSPICION_SECONDS

    def _set_aside_if_hopeless(self, failure: _SendFailed) -> None:
        row = failure.row
        logger.warning("relay could not send %s (attempt %d): %s", row, row.send_attempts, failure)
        self.reached.add(row.id, failure.delivered_to)
        if row.send_attempts < settings.OUTBOX_RELAY_MAX_SEND_ATTEMPTS:
            # Tried again after 2, 4, 8... seconds, not a whole lease later: a copy nacked while a
            # quorum queue elects a new leader goes through at the next try.
            leases.postpone([row], seconds=min(2.0**row.send_attempts, self.lease.total_seconds()), counted=True)
            return
        self._set_aside(row, failure.error, attempts=row.send_attempts)

    def _subscribers_here(self) -> list[str]:
        """The subscribers whose inbox and letters are on this relay's database."""
        return [s for s in subscribers() if placement.database_of_subscriber(s) == current()]

    def _set_aside(self, row: OutboxMessage, error: Exception, *, attempts: int) -> None:
        """A dead letter (`unsendable`) for each subscriber the row has not reached, and the row
        marked published, in one transaction."""
        try:
            body = row.envelope()
        except Exception:
            body = row.envelope(traced=False)  # what broke it (its trace context) stays out of the letter
        with transaction.atomic(using=current()):
            for subscriber in self._not_reached(row):  # one whose copy got through needs no replay
                # Beside its inbox: on another database, committed at once (set aside again, it adds up).
                with working_in(placement.database_of_subscriber(subscriber)):
                    record_dead_letter(
                        subscriber=subscriber, body=body, reason=Reason.UNSENDABLE, error=error, attempts=attempts
                    )
            # Marked with its letters or not at all: not through self.mark_published, whose
            # failure would leave the row to be marked later (unsettled.to_mark, meant for rows the
            # broker confirmed) while its letters rolled back. Unmarked, its lease runs out and it
            # is set aside again.
            leases.mark_published([row])
        self.reached.pop(row.id, None)

    def run(
        self,
        *,
        stop: threading.Event,
        once: bool = False,
        on_progress: Callable[["Relay"], None] | None = None,
    ) -> None:
        """Relay until `stop` is set (or, with `once`, until what is due is sent). An outage of the broker or the
        database is logged once when it starts and once when it ends, and retried with exponential backoff between."""
        waiter = wake_up.waiter(stop)
        outage_since: float | None = None
        backoff = 0.5
        # Beside the sweep: what the broker set aside unread becomes a dead letter the console shows.
        collect = partial(collect_broker_dead_letters, self.broker, self._subscribers_here())
        sweeper = None if once else Sweeper(stop, also=(collect,))
        if sweeper is not None:
            sweeper.start()
        try:
            while not stop.is_set():
                try:
                    self.drain(stop)
                    if not once:
                        self._beat_if_due()
                    if on_progress:
                        on_progress(self)
                    if once:
                        return
                    poll = settings.OUTBOX_RELAY_POLL_SECONDS
                    next_due = self.seconds_until_next_due()
                except Exception as error:  # whatever it is, the relay outlives it
                    if once:
                        raise
                    if outage_since is None:
                        outage_since = time.monotonic()
                        expected = isinstance(error, BrokerUnavailable | DatabaseError)
                        logger.warning("relay paused, will retry with backoff: %s", error, exc_info=not expected)
                    self.failed_rounds += 1
                    close_old_connections()
                    stop.wait(random.uniform(backoff / 2, backoff))  # jittered: relays do not return in step
                    backoff = min(backoff * 2, settings.OUTBOX_RELAY_MAX_BACKOFF_SECONDS)
                    continue
                if outage_since is not None:
                    logger.warning("relay resumed after %.1f s", time.monotonic() - outage_since)
                    outage_since, backoff = None, 0.5
                self.idle.set()
                waiter(poll if next_due is None else min(poll, next_due))
                self.idle.clear()
        finally:
            waiter.close()
            if sweeper is not None:
                sweeper.join(timeout=30)
            if not once:
                heartbeats.gone(self.process)
