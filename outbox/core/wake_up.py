"""How a sleeping relay learns that a transaction which published has committed.

On PostgreSQL a trigger on the outbox table sends a NOTIFY that the relay LISTENs for. Where
there is no LISTEN/NOTIFY (SQLite, the embedded default) `publish()` asks for a `nudge` on
commit, published on the Redis broker's pub/sub, which the relay subscribes to. Polling every
OUTBOX_RELAY_POLL_SECONDS stays the fallback, so a lost wake-up costs latency, never a message.
"""

import logging
import threading
import time
import uuid

import dramatiq
import psycopg
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, DatabaseError

from outbox.core.working_database import connection
from outbox.observability.metrics import NOTIFY_UNHEARD

logger = logging.getLogger(__name__)

try:
    from redis import Redis, RedisError
except ImportError:  # a project on RabbitMQ alone: no Redis broker to nudge relays through

    class RedisError(Exception):  # type: ignore[no-redef]
        """Never raised: there is no Redis client."""

    Redis = None  # type: ignore[assignment,misc]

NOTIFY_CHANNEL = "outbox_pending"


def nudge() -> None:
    """Tell relays subscribed on the Redis broker that rows were committed (best effort)."""
    client = _redis_of(dramatiq.get_broker())
    if client is None:
        return
    try:
        client.publish(_channel(), b"")
    except RedisError as error:
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
    """Sleeps until PostgreSQL announces a new outbox row (LISTEN/NOTIFY), or the timeout, on a connection of its
    own since LISTEN belongs to a session. Every OUTBOX_LISTEN_CHECK_SECONDS it NOTIFYs itself the way committed
    rows do, so that wake-ups which stop arriving are noticed, said, and listened for again."""

    # A probe unheard this long means wake-ups are not arriving: said in the log and in outbox_relay_notify_unheard,
    # polling goes on, and it listens again on a new connection.
    PROBE_DEADLINE_SECONDS = 5.0

    def __init__(self, stop: threading.Event):
        super().__init__(stop)
        self.probe_payload = f"probe:{uuid.uuid4().hex}"
        self.probe_sent_at: float | None = None  # a probe awaiting its echo
        self.next_probe_at = 0.0
        self.unheard = False
        self.conn: psycopg.Connection | None = None
        try:
            self.conn = self._listen()
        except psycopg.Error as error:  # the database is away: poll, and listen once it is back
            logger.warning("relay wake-ups unavailable until the database answers, polling meanwhile: %s", error)

    @staticmethod
    def _listen() -> psycopg.Connection:
        # psycopg connect() keywords of a direct connection (to `default`: another database's relay
        # listens on that database's own parameters). Through a pooler in transaction mode the LISTEN would
        # run on whichever server connection the pooler picked, and the NOTIFYs would arrive there, never here.
        if settings.OUTBOX_LISTEN_CONNECTION and connection.alias == DEFAULT_DB_ALIAS:
            params = dict(settings.OUTBOX_LISTEN_CONNECTION)
        else:
            params = connection.get_connection_params()
            for key in ("cursor_factory", "context", "prepare_threshold"):  # Django's own, not psycopg's
                params.pop(key, None)
        conn = psycopg.connect(**{"connect_timeout": 5, **params}, autocommit=True)
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        return conn

    def __call__(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            # After a database restart, or with the database away as the relay started; until this succeeds it polls.
            if self.conn is None or self.conn.closed:
                self.conn = self._listen()
            self._probe_if_due()
            while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
                for notify in self.conn.notifies(timeout=min(left, 0.5), stop_after=1):
                    if notify.payload != self.probe_payload:
                        return
                    self._heard()
                self._overdue()
        except (psycopg.Error, DatabaseError):
            if self.conn is not None:
                self.conn.close()
            super().__call__(max(0.0, deadline - time.monotonic()))

    def _probe_if_due(self) -> None:
        now = time.monotonic()
        if self.probe_sent_at is None and now >= self.next_probe_at:
            with connection.cursor() as cursor:  # the way publish()'s rows reach the server
                cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, self.probe_payload])
            self.probe_sent_at, self.next_probe_at = now, now + settings.OUTBOX_LISTEN_CHECK_SECONDS

    def _heard(self) -> None:
        self.probe_sent_at = None
        if self.unheard:
            logger.warning("relay wake-ups work again: its LISTEN hears NOTIFY")
            self.unheard = False
            NOTIFY_UNHEARD.set(0)

    def _overdue(self) -> None:
        if self.unheard or self.probe_sent_at is None:
            return
        if time.monotonic() - self.probe_sent_at > self.PROBE_DEADLINE_SECONDS:
            self.unheard = True
            NOTIFY_UNHEARD.set(1)
            logger.warning(
                "relay wake-ups lost: a NOTIFY sent through the relay's database was not heard on its LISTEN "
                "connection in %.0f s; it polls every %s s instead. Behind a pooler in transaction mode, "
                "set OUTBOX_LISTEN_CONNECTION to a direct connection to PostgreSQL",
                self.PROBE_DEADLINE_SECONDS,
                settings.OUTBOX_RELAY_POLL_SECONDS,
            )
            self.probe_sent_at = None  # the next probe, at its time, tells when it works again
            if self.conn is not None:
                self.conn.close()  # and on a new LISTEN connection: whatever broke this one may be gone

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class SubscribeToNudges(Poll):
    """Sleeps until a committed transaction nudges through the Redis broker, or the timeout."""

    def __init__(self, stop: threading.Event, client: "Redis"):
        super().__init__(stop)
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        self.pubsub.subscribe(_channel())

    def __call__(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        try:
            while not self.stop.is_set() and (left := deadline - time.monotonic()) > 0:
                if self.pubsub.get_message(timeout=min(left, 0.5)) is not None:
                    return
        except RedisError:
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
    except (psycopg.Error, RedisError) as error:
        logger.warning("relay wake-ups unavailable, polling instead: %s", error)
    return Poll(stop)


def _redis_of(broker: dramatiq.Broker) -> "Redis | None":
    return getattr(broker, "client", None)


def _channel() -> str:
    return f"{getattr(dramatiq.get_broker(), 'namespace', '')}:{NOTIFY_CHANNEL}"
