"""How a sleeping relay learns that a transaction which published has committed.

On PostgreSQL a trigger on the outbox table sends a NOTIFY that the relay LISTENs for. Where
there is no LISTEN/NOTIFY (SQLite, the embedded default) `publish()` asks for a `nudge` on
commit, published on the Redis broker's pub/sub, which the relay subscribes to. Polling every
OUTBOX_RELAY_POLL_SECONDS stays the fallback, so a lost wake-up costs latency, never a message.
"""

import logging
import threading
import time

import dramatiq
import psycopg
import redis
from django.db import connection

logger = logging.getLogger(__name__)

NOTIFY_CHANNEL = "outbox_pending"


def nudge() -> None:
    """Tell relays subscribed on the Redis broker that rows were committed (best effort)."""
    client = _redis_of(dramatiq.get_broker())
    if client is None:
        return
    try:
        client.publish(_channel(), b"")
    except redis.RedisError as error:
        logger.debug("relay nudge not sent: %s", error)


class Poll:
    """Sleeps until the timeout, or until `stop` is set."""

    def __init__(self, stop: threading.Event):
        self.stop = stop

    def __call__(self, timeout: float) -> None:
        self.stop.wait(timeout)

    def close(self) -> None:
        pass


class ListenForNotify(Poll):
    """Sleeps until PostgreSQL announces a new outbox row (LISTEN/NOTIFY), or the timeout.

    After a database restart it listens again on a new connection; until that succeeds it
    polls.
    """

    def __init__(self, stop: threading.Event):
        super().__init__(stop)
        self.conn = self._listen()

    @staticmethod
    def _listen() -> psycopg.Connection:
        params = connection.get_connection_params()
        for key in ("cursor_factory", "context", "prepare_threshold"):  # Django's own, not psycopg's
            params.pop(key, None)
        conn = psycopg.connect(**params, autocommit=True, connect_timeout=5)
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn

    def __call__(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            if self.conn.closed:
                self.conn = self._listen()
            while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
                for _ in self.conn.notifies(timeout=min(left, 0.5), stop_after=1):
                    return
        except psycopg.Error:
            self.conn.close()
            super().__call__(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self.conn.close()


class SubscribeToNudges(Poll):
    """Sleeps until a committed transaction nudges through the Redis broker, or the timeout."""

    def __init__(self, stop: threading.Event, client: redis.Redis):
        super().__init__(stop)
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(_channel())

    def __call__(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
                if self.pubsub.get_message(timeout=min(left, 0.5)) is not None:
                    return
        except redis.RedisError:
            super().__call__(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self.pubsub.close()


def waiter(stop: threading.Event) -> Poll:
    """The best way this process has to sleep until there is work."""
    try:
        if connection.vendor == "postgresql":
            return ListenForNotify(stop)
        client = _redis_of(dramatiq.get_broker())
        if client is not None:
            return SubscribeToNudges(stop, client)
    except (psycopg.Error, redis.RedisError) as error:
        logger.warning("relay wake-ups unavailable, polling instead: %s", error)
    return Poll(stop)


def _redis_of(broker: dramatiq.Broker) -> redis.Redis | None:
    return getattr(broker, "client", None)


def _channel() -> str:
    return f"{getattr(dramatiq.get_broker(), 'namespace', '')}:{NOTIFY_CHANNEL}"
