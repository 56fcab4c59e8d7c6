"""Packs: several envelopes bound for one subscriber, carried by one broker message, so that the
broker's hand-over and acknowledgement and Dramatiq's consumer are paid once a pack.

Each envelope is dispatched as if it had come alone (its own inbox row, letter, metrics and log
line), in one transaction shared with its neighbours (OUTBOX_PACK_TRANSACTION) but for a handler
with `outside_effects`, committed alone. Should a handler fail, the pass is rolled back and done
again without it, its error taking the path it would have taken alone; an ordered handler's streams
are held first, in stream order, and kept across passes. A pack is each envelope's first attempt
only: one to be retried leaves it as a message of its own. Each envelope has the time limit to
itself, and what is left once a pack has used one goes on alone, so that a pack ends within
RabbitMQ's consumer_timeout; a pack that comes again is unpacked, each envelope enqueued alone.
"""

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import dramatiq
from django.conf import settings
from django.db import transaction
from dramatiq import Retry
from dramatiq.middleware import CurrentMessage, TimeLimit
from dramatiq.middleware.time_limit import TimeLimitExceeded

from outbox.core.envelope import Envelope
from outbox.core.subscriptions import (
    HANDED_ON,
    actor_name,
    came_before,
    message_to,
    queue_name,
    subscription,
)
from outbox.core.working_database import current
from outbox.handling import log_context
from outbox.handling.dispatch import (
    FailedInSharedTransaction,
    PackTurn,
    WorkRolledBack,
    dispatch_in_pack,
    entered,
    one_line,
    retry_delay_ms,
    rolled_back,
)
from outbox.handling.ordering import hold
from outbox.handling.receipts import receive_together, sure_to_reach_their_handler, withdraw_receipts
from outbox.observability.metrics import PACKS_REDONE

logger = logging.getLogger(__name__)


def dispatch_pack(*, subscriber: str, bodies: list[Any], broker: dramatiq.Broker) -> None:
    """Dispatch each envelope of a pack as if it had come alone, those that may in one transaction;
    one to be retried is enqueued alone once what the pack did is committed."""
    with entered(subscriber):
        _dispatch_pack(subscriber, bodies, broker)


def _dispatch_pack(subscriber: str, bodies: list[Any], broker: dramatiq.Broker) -> None:
    pack = CurrentMessage.get_current_message()
    if pack is not None and came_before(pack):
        _hand_on(broker, subscriber, bodies, pack)
        return
    limit = _time_limit(broker) if pack is not None else None  # in a worker's thread only
    limit_ms = _limit_ms(broker, pack, limit) if limit is not None and pack is not None else None
    started, lost, position = time.monotonic(), None, 0
    together = settings.OUTBOX_PACK_TRANSACTION
    unpacked = _Unpacked(subscriber, bodies, pack, limit, limit_ms)

    def out_of_time() -> bool:
        return limit_ms is not None and (time.monotonic() - started) * 1000 >= limit_ms

    while position < len(bodies):
        # The pack has used one limit (or a pass of it failed with none left): the rest goes on alone.
        if (position or not unpacked.share) and out_of_time():
            _hand_on(
                broker,
                subscriber,
                [b for p, b in enumerate(bodies) if p >= position and p not in unpacked.settled],
                pack,
            )
            break
        if together and unpacked.share and unpacked.may_share(position):
            position, owed, reports = _handle_together(unpacked, position, out_of_time)
        else:  # in a transaction of its own, committed before the next envelope starts
            owed, reports = [], []
            unpacked.handle(position, owed, PackTurn(reports=reports))
            position += 1
        for report in reports:  # committed: what came of each may now be said
            report()
        lost = _retry_each_alone(broker, subscriber, owed) or lost
    if lost is not None:
        # Dramatiq's Retries enqueues the pack again, to be unpacked. Should the broker refuse that too,
        # Dramatiq logs it and acknowledges the pack (Broker.emit_after swallows a middleware's error):
        # the envelope is then owed, with no inbox row and no letter, and the redelivery sweep
        # (outbox.relaying.sweep) sends it again after OUTBOX_SWEEP_GRACE_SECONDS, as a copy the broker lost.
        raise lost


Owed = list[tuple[dramatiq.Message, BaseException]]


def _handle_together(
    unpacked: "_Unpacked", start: int, out_of_time: Callable[[], bool]
) -> tuple[int, Owed, list[Callable[[], None]]]:
    """Handle the envelopes from `start` that may share a transaction in one, and commit it.

    Returns where they ended, the retries owed and the outcomes to report, so that the pack goes on from there."""
    run = _Run(start, start + 1)
    while run.end < len(unpacked.bodies) and unpacked.may_share(run.end):
        run.end += 1
    # No savepoint per envelope: when a handler fails, the pass is rolled back and the same envelopes handled
    # again, that handler not run but its error taking the path it would alone (a retry owed, or a dead letter).
    # Each pass leaves one more handler out, so this ends; a second failure ends the run (see _one_pass).
    while True:
        try:
            with transaction.atomic(using=current()):
                run.sure = sure_to_reach_their_handler(
                    unpacked.subscriber, {p: unpacked.bodies[p] for p in range(start, run.end) if p not in run.failed}
                )
                run.receipts = receive_together(unpacked.subscriber, run.sure)
                _look_for_letters_of_failed_copies(run, unpacked.bodies)
                # Inbox rows first, then the cursors of every stream at once, in stream order: the order a lone
                # message takes them in (its row, then its cursor), so neither two packs nor a pack and a lone
                # copy of one of its messages deadlock.
                held = _hold_streams(unpacked.subscriber, run.sure)
                while True:
                    try:
                        # Holding streams, a failed pass rolls back to this savepoint, not the transaction: the
                        # streams and rows stay held, so no later event of a held stream is applied in between and
                        # leaves the earlier one stale. The next pass withdraws the rows of those that failed since.
                        with transaction.atomic(using=current(), savepoint=held):
                            return _one_pass(unpacked, run, out_of_time)
                    except FailedInSharedTransaction:
                        if not held or out_of_time() or transaction.get_connection(current()).needs_rollback:
                            raise  # out of the transaction: everything in it is rolled back
                        # Rolled back to the savepoint: the streams and the rows still held.
        except FailedInSharedTransaction:
            if out_of_time():  # a second pass could take another limit: what failed is retried, the rest handed on
                unpacked.share = False
                unpacked.settled.update(run.failed)
                bodies, pack = unpacked.bodies, unpacked.pack
                return start, [(_alone(unpacked.subscriber, bodies[p], pack), e) for p, e in run.failed.items()], []


@dataclass
class _Run:
    """The envelopes of a pack handled in one transaction, from `start` to `end` (which a second
    failure brings in), and what is known of them: the handlers that failed, the envelopes sure to
    reach their handler and the receipts written for them."""

    start: int
    end: int
    failed: dict[int, BaseException] = field(default_factory=dict)
    sure: dict[int, Envelope] = field(default_factory=dict)
    receipts: dict[int, tuple[bool, bool]] = field(default_factory=dict)


def _one_pass(
    unpacked: "_Unpacked", run: _Run, out_of_time: Callable[[], bool]
) -> tuple[int, Owed, list[Callable[[], None]]]:
    """Handle the run's envelopes in order, inside its transaction; FailedInSharedTransaction when a
    handler fails (recorded in `run.failed`), for the caller to roll back and call again."""
    owed: Owed = []
    reports: list[Callable[[], None]] = []
    unkept = _failed_since(run)
    withdraw_receipts(unpacked.subscriber, [run.sure[p].message_id for p in unkept])
    position = run.start
    while True:
        try:
            receipt = None if position in unkept else run.receipts.get(position)
            turn = PackTurn(reports=reports, shared=True, failed=run.failed.get(position), receipt=receipt)
            unpacked.handle(position, owed, turn)
        except FailedInSharedTransaction as failure:
            run.failed[position] = failure.error
            if len(run.failed) > 1:  # failing often (an outage): the rest of the pack goes one by one
                run.end, unpacked.share = position + 1, False
            PACKS_REDONE.labels(unpacked.subscriber).inc()
            logger.info(
                "%s rolls its pack back and handles it again without envelope %d of %d, whose handler failed: %s",
                unpacked.subscriber,
                position + 1,
                len(unpacked.bodies),
                failure,
            )
            raise
        position += 1
        if position == run.end or out_of_time():
            break
    # What is left (the pack has used its time limit, or failed twice) goes on alone: not received here.
    left = [p for p, (first, _) in run.receipts.items() if first and p >= position and p not in unkept]
    withdraw_receipts(unpacked.subscriber, [run.sure[p].message_id for p in left])
    if rolled_back(transaction.get_connection(current())):
        # Nothing outside a handler should fail and go on; should something have, the pack fails,
        # comes again and is unpacked.
        raise WorkRolledBack(f"{unpacked.subscriber}'s pack transaction was rolled back outside a handler")
    return position, owed, reports


def _hold_streams(subscriber: str, sure: dict[int, Envelope]) -> bool:
    """Take the cursors of every stream an ordered handler's envelope among `sure` belongs to, in
    stream order; False, and no statement, when there is none."""
    streams = sorted({e.stream for e in sure.values() if (sub := subscription(subscriber, e.type)) and sub.ordered})
    if streams:
        hold(subscriber=subscriber, streams=streams)
    return bool(streams)


def _look_for_letters_of_failed_copies(run: _Run, bodies: list[Any]) -> None:
    """A later copy of a message whose earlier copy in the run failed: that copy's letter, if it has
    one, is written in the pass, after these rows were, which could not see it. The copy looks for
    it once processed and closes it, as a copy come alone after the letter would (`first_receipt`)."""
    failed = {str(bodies[p].get("message_id")) for p in run.failed}  # each an envelope: it reached its handler
    for position, (first, dead_lettered) in run.receipts.items():
        if first and not dead_lettered and str(run.sure[position].message_id) in failed:
            run.receipts[position] = (True, True)


def _failed_since(run: _Run) -> set[int]:
    """The positions whose rows, written before the first pass, are not to be kept: an envelope whose handler
    failed since, and any later copy of its message, which then writes its own row (`first_receipt`) and is handled
    as the first, as in a pack without the failed one. Only rows this pack wrote: one processed before keeps its row."""
    ours = {run.sure[p].message_id for p in run.failed if run.receipts.get(p, (False,))[0]}
    return {p for p in run.receipts if run.sure[p].message_id in ours} if ours else set()


class _Unpacked:
    """A pack's envelopes, each dispatched as the message it would have been alone."""

    def __init__(
        self,
        subscriber: str,
        bodies: list[Any],
        pack: dramatiq.Message | None,
        limit: TimeLimit | None,
        limit_ms: int | None,
    ):
        self.subscriber, self.bodies, self.pack, self.limit, self.limit_ms = subscriber, bodies, pack, limit, limit_ms
        # Whether envelopes may still share a transaction: after a second handler fails in one pack
        # (a dependency down fails them all), the rest is handled one by one, each in a transaction of
        # its own, so that a failing pack costs at most two passes again, not one a failure.
        self.share = True
        self.settled: set[int] = set()  # positions already owed their retry, not to be handed on

    def may_share(self, position: int) -> bool:
        """Whether the envelope may be handled in a shared transaction: anything but one whose handler has
        outside effects, or is ordered for a subscriber with limits (OUTBOX_SUBSCRIBER_LIMITS). What is not an
        envelope, or has no handler, is only dead-lettered, so it may."""
        body = self.bodies[position]
        event_type = body.get("type") if isinstance(body, dict) else None
        sub = subscription(self.subscriber, event_type) if isinstance(event_type, str) else None
        # An ordered handler under limits writes its inbox row after the pack holds its streams: a lone copy
        # of its message, holding its row and waiting for the stream, would deadlock with the pack.
        return sub is None or not (
            sub.outside_effects or (sub.ordered and self.subscriber in settings.OUTBOX_SUBSCRIBER_LIMITS)
        )

    def handle(self, position: int, owed: Owed, turn: PackTurn) -> None:
        """Dispatch one envelope with the time limit to itself; one that fails is owed a retry alone,
        enqueued once what the pack did is committed. FailedInSharedTransaction goes to the caller.
        What the kernel logs of it (its letter, its retry) is said with its outcome, once committed."""
        alone = _alone(self.subscriber, self.bodies[position], self.pack)
        token = CurrentMessage._MESSAGE.set(alone)  # what dispatch reads: this envelope's attempts and age
        if self.limit is not None:
            self.limit.manager.remove_timeout(threading.get_ident())
            self.limit.manager.add_timeout(threading.get_ident(), self.limit_ms)
        lines: list[logging.LogRecord] = []
        at = len(turn.reports)  # said before the outcome dispatch reports, as they would be alone
        try:
            with log_context.holding_back(lines):
                dispatch_in_pack(subscriber=self.subscriber, body=self.bodies[position], turn=turn)
        except FailedInSharedTransaction:
            raise
        except (Exception, TimeLimitExceeded) as error:
            owed.append((alone, error))
        finally:
            CurrentMessage._MESSAGE.reset(token)
            turn.reports.insert(at, partial(log_context.say, lines))


def _retry_each_alone(broker: dramatiq.Broker, subscriber: str, owed: Owed) -> BaseException | None:
    """Enqueue each failed envelope alone; what the broker refused, for the pack to fail on at its end."""
    lost = None
    for alone, error in owed:
        try:
            _retry_alone(broker, alone, error)
        except Exception as enqueue_failed:  # the broker refused it: the others still get their turn
            logger.warning("%s could not enqueue %s alone: %s", subscriber, alone.message_id, enqueue_failed)
            lost = enqueue_failed
    return lost


def _hand_on(broker: dramatiq.Broker, subscriber: str, bodies: list[Any], pack: dramatiq.Message | None) -> None:
    """Enqueue each envelope alone, a first attempt as old as the pack, counted when it comes (the
    heartbeat reads HANDED_ON). Should one enqueue fail, the pack comes again and is unpacked: the
    inboxes skip what was done."""
    for body in bodies:
        broker.enqueue(_alone(subscriber, body, pack))
    if pack is not None:
        pack.options[HANDED_ON] = len(bodies)


def _time_limit(broker: dramatiq.Broker) -> TimeLimit | None:
    return next((m for m in broker.middleware if isinstance(m, TimeLimit)), None)


def _limit_ms(broker: dramatiq.Broker, message: dramatiq.Message, limit: TimeLimit) -> int:
    """The limit the TimeLimit middleware gave the pack, which each envelope gets to itself."""
    actor = broker.get_actor(message.actor_name)
    return message.options.get("time_limit") or actor.options.get("time_limit", limit.time_limit)


def _alone(subscriber: str, body: Any, pack: dramatiq.Message | None) -> dramatiq.Message:
    """The message this envelope would have been on its own, relayed when its pack was (its age counts from then)."""
    if isinstance(body, dict):
        alone = message_to(subscriber, body)
    else:  # not an envelope: dispatch sets it aside (a retry only if even that fails)
        alone = dramatiq.Message(
            queue_name=queue_name(subscriber), actor_name=actor_name(subscriber), args=(body,), kwargs={}, options={}
        )
    return alone.copy(message_timestamp=pack.message_timestamp) if pack is not None else alone


def _retry_alone(broker: dramatiq.Broker, message: dramatiq.Message, error: BaseException) -> None:
    """Retry a failed envelope alone as dramatiq.middleware.Retries would: one more retry counted, after the
    actor's backoff or the delay it asked for. A refused enqueue is raised, for the pack to fail on at its end."""
    retries = message.options.get("retries", 0)
    message.options["retries"] = retries + 1  # a message put back over a limit took one off first
    if isinstance(error, Retry) and error.delay is not None:  # dispatch logged its line and chose the delay
        delay = error.delay
    else:
        delay = retry_delay_ms(message, retries)
        logger.warning(
            "%s will retry %s alone in %d ms: %s", message.queue_name, message.message_id, delay, one_line(error)
        )
    broker.enqueue(message, delay=delay)
