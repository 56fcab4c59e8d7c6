"""The relay's publisher on RabbitMQ: up to `window` copies in flight on a channel of its own in
confirm mode, collected by delivery tag (outbox.relaying.publishers says what every publisher keeps)."""

import contextlib
import logging
import time
from collections import deque
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import dramatiq
import pika
import pika.exceptions
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from outbox.core.subscriptions import acts_outside, pack_of
from outbox.relaying.publishers import CONFIRM_TIMEOUT_SECONDS, FLUSH_EVERY, Outcome, with_enqueue_hooks

logger = logging.getLogger("outbox.relaying.publishers")


@dataclass
class _Copy:
    """One message in flight on the channel, known by its delivery tag."""

    keys: tuple[Hashable, ...]  # the rows' keys it carries a copy of: one, or a pack's several
    message_id: str
    queue: str
    returned: bool = False


class ChannelLost(pika.exceptions.AMQPChannelError):
    """The channel closed with copies unconfirmed on it: their delivery tags mean nothing any more."""


class PipelinedPublisher:
    """Copies in flight across batches: `start` writes a batch out and returns, `collect` hands
    back the rows resolved so far, so the relay can send what committed meanwhile."""

    def __init__(self, broker: RabbitmqBroker, *, window: int = 1000, pack_size: int = 1):
        self.broker = broker
        self.parameters = broker.parameters
        self.window = window
        self.pack_size = pack_size  # copies for one queue in one broker message, at most (1: each its own)
        # pika's blocking connection and channel; the relay drives the channel's `_impl` itself.
        self.connection: Any = None
        self.channel: Any = None
        self._nacked = False  # a nack came on this channel: the next batch opens a new one
        self._hooked = True  # whether the broker's middleware has enqueue hooks, asked at each start()
        self._declared: set[str] = set()
        self._forget()
        self._next_tag = 1

    def _forget(self) -> None:
        self._pending: dict[int, _Copy] = {}  # delivery tag -> the copy sent under it
        self._tags_of: dict[tuple[str, str], deque[int]] = {}  # (message id, queue) -> unconfirmed tags, in order
        self._copies_left: dict[Hashable, int] = {}  # key -> copies not yet confirmed (acked or nacked)
        self._acked: dict[Hashable, set[str]] = {}  # key -> queues whose copy was acked
        self._unroutable: dict[Hashable, set[str]] = {}  # key -> queues whose copy came back
        self._refused: set[Hashable] = set()
        self._error: Exception | None = None
        self._channel_closed: Exception | None = None  # the broker closed the channel: why
        self._last_progress = time.monotonic()

    @property
    def wants_fresh_channel(self) -> bool:
        """A nack came on this channel: the next batch goes out on a new one, once nothing is in
        flight on this one (delivery tags are the channel's own, so two cannot be mixed)."""
        return self._nacked

    @property
    def outstanding(self) -> int:
        """Keys sent and not yet handed back by `collect`."""
        return len(self._copies_left)

    def publish(self, batch: Sequence[tuple[Hashable, list[dramatiq.Message]]]) -> Outcome:
        """Send every message of the batch; return once each is confirmed, refused or lost."""
        self.start(batch)
        return self.finish()

    def start(self, batch: Sequence[tuple[Hashable, list[dramatiq.Message]]]) -> None:
        """Write the batch out, waiting only while `window` confirms are outstanding."""
        for key, messages in batch:
            self._copies_left[key] = len(messages)
        if self._error is not None:
            return  # the connection is already lost: collect() reports it
        try:
            self._open()
            self._hooked = with_enqueue_hooks(self.broker)
            for sent, (keys, message) in enumerate(self._packed(batch), start=1):
                self._send(keys, message)
                if len(self._pending) >= self.window:
                    self._wait(lambda: len(self._pending) < self.window)
                elif sent % FLUSH_EVERY == 0:
                    self._process(time_limit=0)  # write out, read confirms
            self._process(time_limit=0)
        except (pika.exceptions.AMQPError, OSError, TimeoutError) as error:
            self._lost(error)

    def _packed(
        self, batch: Sequence[tuple[Hashable, list[dramatiq.Message]]]
    ) -> Iterator[tuple[tuple, dramatiq.Message]]:
        """The batch's messages, the copies bound for one queue packed `pack_size` at a time (in the batch's order,
        so a stream's events keep theirs), each with the keys whose copies it carries; a copy for a handler with
        outside effects alone, between the packs. Not packed while some middleware has enqueue hooks: they see
        each copy, as Dramatiq's enqueue would show it."""
        if self.pack_size <= 1 or self._hooked:
            yield from (((key,), message) for key, messages in batch for message in messages)
            return
        by_queue: dict[str, list[tuple[Hashable, dramatiq.Message]]] = {}
        for key, messages in batch:
            for message in messages:
                by_queue.setdefault(message.queue_name, []).append((key, message))
        for copies in by_queue.values():
            chunk: list[tuple[Hashable, dramatiq.Message]] = []
            for key, message in copies:
                if acts_outside(message):
                    yield from _as_one(chunk)
                    chunk = []
                    yield (key,), message
                    continue
                chunk.append((key, message))
                if len(chunk) == self.pack_size:
                    yield from _as_one(chunk)
                    chunk = []
            yield from _as_one(chunk)

    def collect(self, *, wait: float = 0.0) -> Outcome:
        """Keys resolved so far, after waiting up to `wait` seconds for more confirms: those whose every copy was
        acked, and those refused whose every copy is confirmed (with the queues that took one). Once the connection
        is lost, also the error; every key still out is forgotten, a refused one handed back as it stands."""
        if self._error is None and self._pending:
            try:
                self._process(time_limit=wait)
                if time.monotonic() - self._last_progress > CONFIRM_TIMEOUT_SECONDS:
                    raise TimeoutError(f"no confirm for {CONFIRM_TIMEOUT_SECONDS} s, {len(self._pending)} missing")
            except (pika.exceptions.AMQPError, OSError, TimeoutError) as error:
                self._lost(error)
        resolved = {k for k, left in self._copies_left.items() if left <= 0}
        # A refused key waits for the confirms of its other copies, so that the queues it names as
        # reached are every one the broker took a copy for; once the connection is lost, none will come.
        refused = self._refused & (self._copies_left.keys() if self._error is not None else resolved)
        outcome = Outcome(refused=refused, error=self._error)
        outcome.confirmed = resolved - self._refused
        for key in outcome.confirmed | outcome.refused:
            del self._copies_left[key]
            acked, unroutable = self._acked.pop(key, set()), self._unroutable.pop(key, set())
            if key in outcome.refused:
                outcome.acked[key] = acked
                if unroutable:
                    outcome.unroutable[key] = unroutable
        self._refused -= outcome.refused
        if outcome.error is not None:
            self._forget()
        return outcome

    def finish(self) -> Outcome:
        """Wait until every key sent is resolved or the connection is lost."""
        outcome = Outcome()
        while True:
            part = self.collect(wait=0.05)
            outcome.confirmed |= part.confirmed
            outcome.refused |= part.refused
            outcome.acked.update(part.acked)
            outcome.unroutable.update(part.unroutable)
            outcome.error = part.error
            if part.error is not None or not self._copies_left:
                return outcome

    def _lost(self, error: Exception) -> None:
        self._error = error
        self.close()

    def _send(self, keys: tuple[Hashable, ...], message: dramatiq.Message) -> None:
        if message.queue_name not in self._declared:
            self.broker.declare_queue(message.queue_name, ensure=True)  # with Dramatiq's own arguments
            self._declared.add(message.queue_name)
        if self._hooked:
            self.broker.emit_before("enqueue", message, None)
        self._pending[self._next_tag] = _Copy(keys, message.message_id, message.queue_name)
        self._tags_of.setdefault((message.message_id, message.queue_name), deque()).append(self._next_tag)
        self._next_tag += 1
        self.channel._impl.basic_publish(
            exchange="",
            routing_key=message.queue_name,
            body=message.encode(),
            properties=self._properties(message),
            mandatory=True,
        )
        if self._hooked:
            self.broker.emit_after("enqueue", message, None)

    def _properties(self, message: dramatiq.Message) -> pika.BasicProperties:
        """Those of Dramatiq's own enqueue: persistent, with the message's priority."""
        return pika.BasicProperties(delivery_mode=2, priority=message.options.get("broker_priority"))

    def _wait(self, done) -> None:
        deadline = time.monotonic() + CONFIRM_TIMEOUT_SECONDS
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self._pending)} confirms still missing after {CONFIRM_TIMEOUT_SECONDS} s")
            self._process(time_limit=0.05)

    def _process(self, *, time_limit: float) -> None:
        """Write out and read in; a channel the broker closed meanwhile lost every copy on it."""
        self.connection.process_data_events(time_limit=time_limit)
        if self._channel_closed is not None:
            raise self._channel_closed

    def _on_channel_closed(self, channel, reason: Exception) -> None:
        """The broker closed our channel (a copy it will not take: over its max_message_size, an
        invalid property): confirms for what was in flight on it will never come."""
        if isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            self._channel_closed = reason

    def _on_confirm(self, frame) -> None:
        method = frame.method
        tags = [method.delivery_tag]
        if method.multiple:
            tags = sorted(t for t in self._pending if t <= method.delivery_tag)
        self._last_progress = time.monotonic()
        acked = isinstance(method, pika.spec.Basic.Ack)
        for tag in tags:
            copy = self._pending.pop(tag, None)
            if copy is None:
                continue
            siblings = self._tags_of.get((copy.message_id, copy.queue))
            if siblings is not None:
                with contextlib.suppress(ValueError):
                    siblings.remove(tag)
                if not siblings:
                    del self._tags_of[(copy.message_id, copy.queue)]
            for key in copy.keys:
                if key not in self._copies_left:
                    continue
                self._copies_left[key] -= 1
                if acked and not copy.returned:
                    self._acked.setdefault(key, set()).add(copy.queue)
                else:
                    self._refused.add(key)  # a nack, or the ack of a copy that came back unrouted
            if not acked:
                self._nacked = True

    def _on_return(self, channel, method, properties, body) -> None:
        """An unroutable copy (its queue is gone, or its node is down) comes back before its own ack:
        its row stays unsent, whatever its sibling copies' acks say."""
        # Its queue is not declared again from here: Dramatiq's broker remembers it as declared,
        # and in a cluster the declaration fails as long as the queue's node is down. The workers
        # declare their queues when they start. The relay takes it as that queue's outage (logged
        # once by the relay, not per copy): the row waits, uncounted, and is sent again shortly.
        message_id = dramatiq.Message.decode(body).message_id
        for tag in self._tags_of.get((message_id, method.routing_key), ()):
            copy = self._pending[tag]
            if not copy.returned:
                copy.returned = True
                for key in copy.keys:
                    if key in self._copies_left:
                        self._refused.add(key)
                        self._unroutable.setdefault(key, set()).add(copy.queue)
                break
        logger.debug("broker returned %s for queue %s: %s", message_id, method.routing_key, method.reply_text)

    def _open(self) -> None:
        if self._nacked and not self._pending:
            # RabbitMQ nacks a copy whose quorum queue lost its leader; a channel that went on
            # talking to the old leader was seen to nack that queue's copies for 30 s more, where a
            # new channel reaches the new leader at once. Nothing is in flight (the relay stops
            # sending until then, however busy): start afresh.
            self._nacked = False
            self.close()
        if self.channel is not None and self.channel.is_open and self.connection.is_open:
            try:
                # While the relay slept nobody answered the broker's heartbeats: it may have
                # closed the connection. Reading what is pending tells, and answers them.
                self._process(time_limit=0)
                return
            except (pika.exceptions.AMQPError, OSError):
                if self._pending:
                    raise  # copies in flight on it are lost: the relay must hear of it
        if self._pending:
            # The broker closed the channel (or its connection) under copies still unconfirmed:
            # the tags of a new channel start at 1 again and would be taken for theirs.
            raise ChannelLost(f"the channel closed with {len(self._pending)} copies unconfirmed")
        self.close()
        self.connection = pika.BlockingConnection(self.parameters)
        self.channel = self.connection.channel()
        # Confirm mode on the underlying channel with our own callback: BlockingChannel's
        # confirm_delivery() would make every basic_publish wait for its own confirm.
        confirming: list[object] = []
        self.channel._impl.confirm_delivery(ack_nack_callback=self._on_confirm, callback=confirming.append)
        self.channel._impl.add_on_return_callback(self._on_return)
        self.channel._impl.add_on_close_callback(self._on_channel_closed)
        self._channel_closed = None
        self._next_tag = 1
        self._wait(lambda: confirming)

    def close(self) -> None:
        connection, self.connection, self.channel = self.connection, None, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                connection.close()

    def declare_again(self, queue: str) -> bool:
        """Declare `queue` once more, with its delay and dead-letter queues and Dramatiq's own arguments, so that one
        deleted under a running relay comes back (Dramatiq's broker and this publisher declare each once a process).
        False while the broker refuses (the queue's node is down); its channel, closed by that, opens anew on use."""
        broker = self.broker
        try:
            for declare in (broker._declare_queue, broker._declare_dq_queue, broker._declare_xq_queue):
                declare(queue)
        except pika.exceptions.AMQPChannelError as error:
            logger.debug("queue %s not declared again: %s", queue, error)
            del broker.channel
            return False
        except (pika.exceptions.AMQPError, OSError) as error:
            logger.debug("queue %s not declared again: %s", queue, error)
            del broker.connection
            return False
        return True


def _as_one(chunk: list[tuple[Hashable, dramatiq.Message]]) -> Iterator[tuple[tuple, dramatiq.Message]]:
    """A chunk's copies as one broker message, with their keys: the copy itself when it is alone."""
    if chunk:
        keys = tuple(key for key, _ in chunk)
        yield keys, chunk[0][1] if len(chunk) == 1 else pack_of([message for _, message in chunk])
