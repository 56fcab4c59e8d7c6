"""The relay's publisher on Redis: a whole batch through Dramatiq's own script in one pipeline round trip."""

import logging
import uuid
from collections.abc import Hashable, Sequence

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker
from dramatiq.common import current_millis

from outbox.relaying.publishers import Outcome, with_enqueue_hooks

logger = logging.getLogger("outbox.relaying.publishers")


class RedisPipelinedPublisher:
    """Dramatiq's `RedisBroker.enqueue` for a whole batch in one pipeline round trip: each copy goes through the
    broker's own `dispatch` script with the arguments `enqueue` gives it, so Dramatiq's workers read it unchanged.
    A copy whose script failed refuses its row; a lost connection leaves the whole batch unsent."""

    def __init__(self, broker: RedisBroker):
        self.broker = broker
        self._outcome = Outcome()

    outstanding = 0  # a pipeline's replies come back with it: nothing is left in flight
    wants_fresh_channel = False  # no channels, no nacks

    def publish(self, batch: Sequence[tuple[Hashable, list[dramatiq.Message]]]) -> Outcome:
        self.start(batch)
        return self.finish()

    def start(self, batch: Sequence[tuple[Hashable, list[dramatiq.Message]]]) -> None:
        broker = self.broker
        pipeline = broker.client.pipeline(transaction=False)
        keys, dispatch, hooked = [], broker.scripts["dispatch"], with_enqueue_hooks(broker)
        for key, messages in batch:
            for message in messages:
                message = message.copy(options={"redis_message_id": str(uuid.uuid4())})
                if hooked:
                    broker.emit_before("enqueue", message, None)
                arguments = [
                    "enqueue",
                    current_millis(),
                    message.queue_name,
                    broker.broker_id,
                    broker.heartbeat_timeout,
                    broker.dead_message_ttl,
                    broker._should_do_maintenance("enqueue"),
                    broker._max_unpack_size(),
                    message.options["redis_message_id"],
                    message.encode(),
                ]
                dispatch(args=arguments, keys=[broker.namespace], client=pipeline)
                keys.append(key)
        try:
            results = pipeline.execute(raise_on_error=False)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as error:
            self._outcome.error = error  # nothing of a pipeline is known to have run: the whole batch is unsent
            return
        refused = {key for key, result in zip(keys, results, strict=True) if isinstance(result, Exception)}
        for key, result in zip(keys, results, strict=True):
            if isinstance(result, Exception):
                logger.warning("redis refused a copy of %s: %s", key, result)
        self._outcome.refused |= refused
        self._outcome.confirmed |= {key for key, _ in batch} - refused

    def collect(self, *, wait: float = 0.0) -> Outcome:
        outcome, self._outcome = self._outcome, Outcome()
        return outcome

    finish = collect

    def close(self) -> None:
        """Nothing of its own to close: it borrows the broker's connection pool."""
