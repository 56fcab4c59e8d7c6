"""Dispatch: what the Dramatiq actor behind every subscriber queue does with one message.

In one transaction it records the message in the subscriber's inbox, runs the handler and
keeps whatever the handler published; a redelivered message finds its inbox row and is
skipped. A message that can never succeed is dead-lettered at once; one that keeps failing
(an exception, or Dramatiq's time limit) is retried with bounded exponential backoff and then
dead-lettered. If the dead letter itself cannot be written (the database fails over), the
message is retried again, up to OUTBOX_DEAD_LETTER_RETRIES more times, instead of being
acknowledged and forgotten.
"""

import logging
import random
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from functools import partial
from typing import Any, NoReturn

import dramatiq
from django.conf import settings
from django.db import DataError, transaction
from django.db.models import F
from django.utils import timezone
from dramatiq import Retry
from dramatiq.common import compute_backoff
from dramatiq.middleware import CurrentMessage
from dramatiq.middleware.retries import DEFAULT_MAX_BACKOFF, DEFAULT_MIN_BACKOFF
from dramatiq.middleware.time_limit import TimeLimitExceeded
from dramatiq.rate_limits import RateLimitExceeded
from opentelemetry.trace import SpanKind
from psycopg.pq import TransactionStatus
from pydantic import ValidationError

from outbox import placement
from outbox.core import working_database
from outbox.core.contracts import upcast
from outbox.core.dead_letters import (
    Reason,
    Rejected,
    close_stale_replay,
    record_dead_letter,
    resolve_processed,
    storable,
)
from outbox.core.envelope import Envelope
from outbox.core.publishing import handling
from outbox.core.subscriptions import Received, Subscription, context_of, subscription, unprocessable_hook
from outbox.handling import log_context
from outbox.handling.limits import within_limits
from outbox.handling.ordering import Position, advance
from outbox.handling.receipts import first_receipt
from outbox.models import InboxMessage
from outbox.observability import tracing
from outbox.observability.metrics import HANDLED, HANDLER_SECONDS

logger = logging.getLogger(__name__)


class WorkRolledBack(RuntimeError):
    """A handler returned after a caught error rolled its transaction back (a service raised inside
    `outbox.placement.atomic`, which has no savepoint, or a statement failed): nothing it did would be kept,
    its inbox row included, so it is retried and then dead-lettered instead of acknowledged as processed."""


class FailedInSharedTransaction(Exception):
    """A handler failed in a pack's shared transaction, where its work has no savepoint of its own: the whole
    transaction is to be rolled back and the pack's envelopes handled again without this one's handler, whose
    `error` then takes the path it would have taken alone (`outbox.handling.packs`)."""

    def __init__(self, error: BaseException):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def rolled_back(connection) -> bool:
    """Whether committing now would keep nothing: Django marked the transaction for rollback, or PostgreSQL
    aborted it at a failed statement that told Django nothing (a service's own `cursor.execute`)."""
    if connection.needs_rollback:  # the ORM's save(), the kernel's statements and `atomic()` mark it when they fail
        return True
    if connection.vendor != "postgresql" or connection.connection is None:
        return False
    # PostgreSQL answers such a transaction's COMMIT with a ROLLBACK that psycopg does not raise, so the status
    # is read from libpq (no round trip).
    return connection.connection.info.transaction_status == TransactionStatus.INERROR


def _refuse_rolled_back_work(subscriber: str, envelope: Envelope) -> None:
    if rolled_back(transaction.get_connection(working_database.current())):
        raise WorkRolledBack(
            f"{subscriber}'s handler of {envelope.type} went on after an error rolled its transaction back "
            "(a service's error or a failed statement caught inside the handler): nothing it did was kept"
        )


class Outcome(Enum):
    """What came of a message for one subscriber."""

    PROCESSED = "processed"  # the handler ran and its work was kept
    DUPLICATE = "duplicate"  # its inbox held the message already: the handler did not run again
    STALE = "stale"  # an ordered subscriber was past its place in its stream
    DEAD_LETTERED = "dead_lettered"  # set aside, with its reason
    RETRIED = "retried"  # raised, to be retried (Dramatiq's Retry, or any failure)


def dispatch(*, subscriber: str, body: Any) -> Outcome:
    """A message come alone: its handler's work and its inbox row in a transaction of its own, its
    outcome counted and logged at once. Raises what is to be retried."""
    return _dispatched(subscriber, body, _ALONE)


def dispatch_in_pack(*, subscriber: str, body: Any, turn: "PackTurn") -> Outcome:
    """An envelope's turn in a pack (outbox.handling.packs): as if it had come alone, but its
    outcome is said once the pack's transaction commits, and, sharing that transaction, a failure
    of its handler raises FailedInSharedTransaction for the pack to be handled again without it."""
    return _dispatched(subscriber, body, turn)


class _Alone:
    """The path of a message come alone."""

    failed = None

    def handle(self, sub: Subscription, envelope: Envelope, payload: Any) -> Outcome:
        return _handle_once(sub, envelope, payload)

    def kept_from_its_handler(self, error: BaseException) -> None:
        """Nothing to undo: nothing was written before its transaction."""

    def say(self, report: Callable[[], None]) -> None:
        report()


_ALONE = _Alone()


@dataclass
class PackTurn:
    """An envelope's turn in a pack: dispatched as if it had come alone, but its outcome goes to `reports`, said
    once the pack's transaction commits, never for work rolled back with it."""

    reports: list[Callable[[], None]]
    shared: bool = False  # its handler's work joins the pack's transaction without a savepoint
    # Its handler failed in a pass since rolled back and is not run again: the error takes the path it would alone.
    failed: BaseException | None = None
    receipt: tuple[bool, bool] | None = None  # its inbox row was written with the pack's (`receive_together`)

    def handle(self, sub: Subscription, envelope: Envelope, payload: Any) -> Outcome:
        if not self.shared:
            return _handle_once(sub, envelope, payload)
        try:
            # No savepoint: Django's costs a message more CPU than a transaction of its own; a failure redoes the pack.
            return _handle_once(sub, envelope, payload, savepoint=False, receipt=self.receipt)
        except (Exception, TimeLimitExceeded) as error:
            raise FailedInSharedTransaction(error) from error

    def kept_from_its_handler(self, error: BaseException) -> None:
        """Its inbox row, written with the pack's, must not stay: the pack's transaction is handled
        again without this envelope, whose error then takes its path."""
        if self.receipt is not None and self.receipt[0]:
            raise FailedInSharedTransaction(error) from error

    def say(self, report: Callable[[], None]) -> None:
        self.reports.append(report)


def entered(subscriber: str) -> AbstractContextManager[None]:
    """Work in `subscriber`'s database under its context's role: a message's or a pack's. A
    worker's thread keeps the role for its next message; anywhere else (a test) it is given back."""
    return placement.handling_for(subscriber, keep_role=CurrentMessage.get_current_message() is not None)


def _dispatched(subscriber: str, body: Any, path: "_Alone | PackTurn") -> Outcome:
    started, outcome = time.perf_counter(), Outcome.RETRIED
    event_type = _field(body, "type")
    try:
        with entered(subscriber):
            outcome = _dispatch(subscriber, body, path)
        return outcome
    finally:
        path.say(partial(_report, subscriber, body, event_type, outcome, time.perf_counter() - started))


def _report(subscriber: str, body: Any, event_type: str, outcome: Outcome, seconds: float) -> None:
    HANDLED.labels(subscriber, event_type, outcome.value).inc()
    HANDLER_SECONDS.labels(subscriber, event_type).observe(seconds)
    _log_handled(subscriber, body, event_type, outcome, seconds)


def _log_handled(subscriber: str, body: Any, event_type: str, outcome: Outcome, seconds: float) -> None:
    """One line per message, as task queues log each task (Celery: received, succeeded in 0.01 s):
    `grep <correlation id>` finds every handler a story went through, with its outcome and time."""
    level = logging.getLevelName(settings.OUTBOX_HANDLED_LOG_LEVEL)
    if not logger.isEnabledFor(level):
        return
    message_id, correlation_id = _field(body, "message_id"), _field(body, "correlation_id")
    logger.log(
        level,
        "%s %s %s message=%s correlation=%s in %.1f ms",
        subscriber,
        outcome.value,
        event_type,
        message_id,
        correlation_id,
        seconds * 1000,
        extra={
            "subscriber": subscriber,
            "event_type": event_type,
            "message_id": message_id,
            "correlation_id": correlation_id,
            "outcome": outcome.value,
            "duration_ms": round(seconds * 1000, 2),
        },
    )


def _field(body: Any, name: str) -> str:
    """A field of a body that may not be an envelope at all, bounded for labels and log lines."""
    return str(body.get(name, "?"))[:100] if isinstance(body, dict) else "?"


def _dispatch(subscriber: str, body: Any, path: "_Alone | PackTurn") -> Outcome:
    """The outcome of one message for one subscriber; raises to be retried (counted as retried)."""
    try:
        envelope = Envelope.model_validate(body)
    except ValidationError as error:
        record_dead_letter(subscriber=subscriber, body=storable(body), reason=Reason.INVALID_ENVELOPE, error=error)
        return Outcome.DEAD_LETTERED

    with log_context.about(subscriber, envelope):
        if not tracing.active():
            return _dispatch_envelope(subscriber, body, envelope, path)
        attributes = {
            "subscriber": subscriber,
            "message_id": str(envelope.message_id),
            "correlation_id": str(envelope.correlation_id),
        }
        name = f"handle {envelope.type}"
        with tracing.following(envelope.trace_context(), name, kind=SpanKind.CONSUMER, attributes=attributes) as span:
            outcome = _dispatch_envelope(subscriber, body, envelope, path)
            if span is not None:
                span.set_attribute("outcome", outcome.value)
            return outcome


def _dispatch_envelope(subscriber: str, body: Any, envelope: Envelope, path: "_Alone | PackTurn") -> Outcome:
    sub = subscription(subscriber, envelope.type)
    try:
        if path.failed is not None:
            raise path.failed  # as if its handler had failed just now
        accepted = _refuse_unacceptable(sub, subscriber, envelope)
        payload = _read(accepted, envelope)
        with within_limits(subscriber):
            return path.handle(accepted, envelope, payload)
    except FailedInSharedTransaction:
        raise
    except Rejected as error:
        path.kept_from_its_handler(error)
        _give_up(subscriber, body, envelope, error.reason, error)
        return Outcome.DEAD_LETTERED
    except RateLimitExceeded as error:
        path.kept_from_its_handler(error)
        _put_back_without_spending_a_retry()
    except (Exception, TimeLimitExceeded) as error:
        path.kept_from_its_handler(error)
        if isinstance(error, DataError) and sub is not None and not sub.compensation:
            _give_up(subscriber, body, envelope, Reason.UNPROCESSABLE, error)
            return Outcome.DEAD_LETTERED
        retries, first_failed_at = _failures_so_far()
        if retries >= settings.OUTBOX_MAX_RETRIES:
            # Should this raise, Dramatiq retries the message: its actor allows the extra attempts.
            record_dead_letter(
                subscriber=subscriber,
                body=storable(body),
                reason=Reason.COMPENSATION_FAILED if sub is not None and sub.compensation else Reason.HANDLER_ERROR,
                error=error,
                attempts=retries + 1,
                first_failed_at=first_failed_at,
            )
            return Outcome.DEAD_LETTERED
        _retry_later(subscriber, envelope, retries, error)


# The database refusing a value (out of range, a NUL in text) or failing to read a stored one back
# (a date past year 9999) is a DataError, raised by the same message every time: retrying only
# delays the compensations. A compensation handler meeting one is retried and then dead-lettered
# as compensation_failed like any other failure of a compensation, so that it stays in view.
COMPENSATED = (Reason.INVALID_PAYLOAD, Reason.UNPROCESSABLE)


def _give_up(subscriber: str, body: Any, envelope: Envelope, reason: str, error: BaseException) -> None:
    """Dead-letter a message that can never succeed, at once; for a payload the subscriber can
    never process, run its compensations (`when_unprocessable`) in the same transaction."""
    body = storable(body)  # what its letter cannot hold (a NUL) replaced: the letter keeps the rest
    hook = unprocessable_hook(subscriber) if reason in COMPENSATED else None
    if hook is None:
        record_dead_letter(subscriber=subscriber, body=body, reason=reason, error=error)
        return
    try:
        with transaction.atomic(using=working_database.current()):
            record_dead_letter(subscriber=subscriber, body=body, reason=reason, error=error)
            with handling(envelope), placement.acting_as(context_of(subscriber)):
                hook(envelope)
            _refuse_rolled_back_work(subscriber, envelope)  # or the letter itself would be rolled back
    except Exception as failure:  # the letter still gets written, saying the compensation failed too
        logger.exception("%s could not compensate for unprocessable %s", subscriber, envelope.message_id)
        record_dead_letter(subscriber=subscriber, body=body, reason=Reason.COMPENSATION_FAILED, error=failure)


def _refuse_unacceptable(sub: Subscription | None, subscriber: str, envelope: Envelope) -> Subscription:
    """The subscription that takes the envelope; Rejected if none does, or it went round too often."""
    if sub is None:
        raise Rejected(Reason.UNKNOWN_TYPE, f"{subscriber} has no handler for {envelope.type}")
    if envelope.hops > settings.OUTBOX_MAX_HOPS:
        raise Rejected(Reason.LOOP_DETECTED, f"{envelope.hops} hops exceed OUTBOX_MAX_HOPS={settings.OUTBOX_MAX_HOPS}")
    return sub


def _refuse_expired() -> None:
    """Checked once the message is known to be new: an old copy of a processed one is a duplicate, not expired."""
    message = CurrentMessage.get_current_message()
    age = time.time() - message.message_timestamp / 1000 if message else 0
    if age > settings.OUTBOX_MESSAGE_TTL_SECONDS:
        raise Rejected(Reason.EXPIRED, f"{age:.0f} s since relayed, over OUTBOX_MESSAGE_TTL_SECONDS")


def _read(sub: Subscription, envelope: Envelope) -> Any:
    """The payload through the subscriber's reader, upcast first to a version it reads."""
    version, payload = upcast(envelope.type, envelope.version, envelope.payload, wanted=sub.versions)
    if version not in sub.versions:
        raise Rejected(
            Reason.UNSUPPORTED_VERSION,
            f"{sub.subscriber} reads {envelope.type} versions {sorted(sub.versions)}, not {envelope.version}",
        )
    try:
        return sub.read(payload)
    except ValidationError as error:
        raise Rejected(Reason.INVALID_PAYLOAD, str(error)) from error


def _handle_once(
    sub: Subscription,
    envelope: Envelope,
    payload: Any,
    *,
    savepoint: bool = True,
    receipt: tuple[bool, bool] | None = None,
) -> Outcome:
    with transaction.atomic(using=working_database.current(), savepoint=savepoint):
        first, dead_lettered = receipt if receipt is not None else first_receipt(sub.subscriber, envelope)
        if not first:
            InboxMessage.objects.filter(subscriber=sub.subscriber, message_id=envelope.message_id).update(
                duplicates=F("duplicates") + 1
            )
            resolve_processed(subscriber=sub.subscriber, envelope=envelope)  # a letter written after it was processed
            return Outcome.DUPLICATE
        _refuse_expired()  # raises out of the block: the inbox row is rolled back with it
        if sub.ordered:
            position = advance(subscriber=sub.subscriber, stream=envelope.stream, sequence=envelope.sequence)
            if position == Position.STALE:
                # Workers reorder a stream's events as a matter of course, so most stale copies have
                # no letter: only a replayed one (which the inbox insert saw) has one to close.
                if dead_lettered:
                    close_stale_replay(subscriber=sub.subscriber, envelope=envelope)
                return Outcome.STALE
        with handling(envelope), placement.acting_as(sub.context):
            sub.handler(Received(envelope=envelope, payload=payload))
        _refuse_rolled_back_work(sub.subscriber, envelope)
        if dead_lettered:  # rare (a replay, or a copy the sweep gave up on): one UPDATE more
            resolve_processed(subscriber=sub.subscriber, envelope=envelope)
    return Outcome.PROCESSED


def _retry_later(subscriber: str, envelope: Envelope, retries: int, error: BaseException) -> NoReturn:
    """One line for a failure that will be retried, and Dramatiq's Retries middleware told when
    (`Retry`, which Dramatiq does not log as an error): its traceback, one every retry, is left
    for the dead letter, which logs it once and keeps it."""
    message = CurrentMessage.get_current_message()
    delay = retry_delay_ms(message, retries) if message is not None else 0
    logger.warning(
        "%s will retry %s message=%s (attempt %d of %d) in %d ms: %s",
        subscriber,
        envelope.type,
        envelope.message_id,
        retries + 1,
        settings.OUTBOX_MAX_RETRIES + 1,
        delay,
        one_line(error),
        extra={"subscriber": subscriber, "event_type": envelope.type, "attempt": retries + 1, "delay_ms": delay},
    )
    raise Retry(one_line(error), delay=delay) from error


def retry_delay_ms(message: dramatiq.Message, retries: int) -> int:
    """The backoff Dramatiq's Retries middleware gives a message retried `retries` times before
    (the actor's min_backoff doubling, jittered, up to its max_backoff)."""
    actor = dramatiq.get_broker().get_actor(message.actor_name)
    max_backoff = min(actor.options.get("max_backoff", DEFAULT_MAX_BACKOFF), DEFAULT_MAX_BACKOFF)
    _, delay = compute_backoff(
        retries, factor=actor.options.get("min_backoff", DEFAULT_MIN_BACKOFF), max_backoff=max_backoff
    )
    return delay


def one_line(error: BaseException) -> str:
    """`ValueError: the first line of its message`, bounded: what a log line of a retry says."""
    first = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{type(error).__name__}: {first}"[:300] if first else type(error).__name__


def _put_back_without_spending_a_retry() -> NoReturn:
    """Over a limit is not a failure: re-enqueue after a short, jittered delay, retries untouched."""
    message = CurrentMessage.get_current_message()
    if message is not None:
        message.options["retries"] = message.options.get("retries", 0) - 1  # Retries adds it back
    raise Retry(delay=random.randint(50, 500))


def _failures_so_far() -> tuple[int, datetime]:
    """How often this message has been retried, and when it first failed."""
    message = CurrentMessage.get_current_message()
    if message is None:  # called directly, outside a worker
        return settings.OUTBOX_MAX_RETRIES, timezone.now()
    first = message.options.setdefault("first_failed_at", timezone.now().isoformat())
    return message.options.get("retries", 0), datetime.fromisoformat(first)
