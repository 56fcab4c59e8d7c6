"""Relays and workers write a heartbeat (outbox.models.Heartbeat) every OUTBOX_HEARTBEAT_SECONDS, so the
messaging overview shows which are alive, when each was last seen and what it has done.

A beat is stamped, and judged, on the clock of the database it is written to: the processes' hosts'
clocks may be off from one another's and from the reader's, and a worker whose clock is behind would
look dead while it runs (`move_context` would then move a context from under it). SQLite, the
embedded default, is one host: its clock is the one."""

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from datetime import datetime, timedelta

import dramatiq
from django.conf import settings
from django.db import DatabaseError, close_old_connections, connections
from django.db.models.functions import Now
from django.utils import timezone

from outbox.core.subscriptions import envelopes_handled
from outbox.core.working_database import connection, kernel_databases

logger = logging.getLogger(__name__)

# A stop sent to a whole process group (Ctrl-C under honcho, `kill %1`, systemd's default KillMode)
# reaches each Dramatiq worker process twice: once from the group, once forwarded by Dramatiq's main
# process, a few milliseconds apart. Dramatiq reads the second as "kill now".
SAME_STOP_WITHIN_SECONDS = 1.0
LISTED_FOR = timedelta(days=1)  # a process not seen for longer is no longer listed, silent or not


def interval() -> float:
    return settings.OUTBOX_HEARTBEAT_SECONDS


def silent(last_seen: datetime, now: datetime) -> bool:
    """Not seen for three beats by `now` (the database's): dead, paused, or cut off from the database."""
    return last_seen < silence_begins(now)


def silence_begins(now: datetime) -> datetime:
    """A beat older than this, by `now` (the database's), is silent."""
    return now - timedelta(seconds=3 * interval())


def process_name(kind: str) -> str:
    return f"{kind}@{socket.gethostname()}:{os.getpid()}"


def gone(process: str) -> None:
    """A process that stops cleanly takes its heartbeat with it: only the silent ones stay listed."""
    from outbox.models import Heartbeat

    try:
        Heartbeat.objects.filter(process=process).delete()
    except Exception as error:  # stopping because the database is away: the row ages out of the overview
        logger.debug("heartbeat of %s not removed: %s", process, error)


def beat(*, process: str, kind: str, started_at, relayed: int = 0, handled: int = 0) -> None:
    from outbox.models import Heartbeat  # the broker's middleware loads before Django's apps

    Heartbeat.objects.update_or_create(
        process=process,
        defaults={
            "kind": kind,
            "started_at": started_at,
            "last_seen": Now() if connection.vendor == "postgresql" else timezone.now(),
            "relayed": relayed,
            "handled": handled,
        },
    )


class WorkerHeartbeat(dramatiq.Middleware):
    """Dramatiq middleware: each worker process counts the messages it handled and beats from a
    thread of its own."""

    def __init__(self):
        self.handled = 0
        self._lock = threading.Lock()
        # One beat per worker: a process (or a test) may run several, and each thread ends with its own.
        self._beats: dict[int, tuple[threading.Event, threading.Thread]] = {}

    def after_process_boot(self, broker):
        """In a Dramatiq worker process: read a doubled stop signal as the one stop it is, and
        take this process's heartbeat with it if a real second signal kills the process."""
        if threading.current_thread() is not threading.main_thread():
            return
        dramatiqs = signal.getsignal(signal.SIGTERM)
        if not callable(dramatiqs):
            return
        first: float | None = None

        def on_sigterm(signum, frame):
            nonlocal first
            now = time.monotonic()
            if first is not None and now - first < SAME_STOP_WITHIN_SECONDS:
                return  # the same stop, delivered by the group and again by Dramatiq's main process
            if first is not None:  # a second stop, sent on purpose: Dramatiq exits at once
                gone(process_name("worker"))
            first = first or now
            dramatiqs(signum, frame)

        signal.signal(signal.SIGTERM, on_sigterm)

    def after_process_message(self, broker, message, *, result=None, exception=None):
        # Run before Retries' (the hooks run last to first), which marks a pack that raised as retried:
        # this attempt handled its envelopes; the retry, unpacked, will not.
        envelopes = envelopes_handled(message)
        with self._lock:
            self.handled += envelopes

    def after_worker_boot(self, broker, worker):
        stop = threading.Event()
        thread = threading.Thread(target=self._beat, args=(stop,), daemon=True, name="heartbeat")
        self._beats[id(worker)] = (stop, thread)
        thread.start()

    def before_worker_shutdown(self, broker, worker):
        stop, thread = self._beats.pop(id(worker), (None, None))
        if stop is not None:
            stop.set()
            # Waited for: a worker process exits right after this, and a daemon thread dies with it
            # before it removes the heartbeat, which would then read as a silent process.
            thread.join(timeout=10)

    def _beat(self, stop: threading.Event) -> None:
        process, started_at = process_name("worker"), timezone.now()
        while not stop.is_set():
            try:
                beat(process=process, kind="worker", started_at=started_at, handled=self.handled)
            except Exception as error:  # the database may be away: the next beat tries again
                logger.debug("worker heartbeat not written: %s", error)
                with contextlib.suppress(Exception):
                    close_old_connections()
            finally:
                # Back to the pool between beats: held, it would leave the handlers' threads, which
                # the pool is sized for (DJANGO_DB_POOL_MAX_SIZE = --threads), one connection short.
                with contextlib.suppress(Exception):
                    connection.close()
            stop.wait(interval())
        gone(process)
        with contextlib.suppress(Exception):
            connection.close()


def silent_since(last_seen: datetime, now: datetime) -> float:
    return (now - last_seen).total_seconds()


def now_on(database: str) -> datetime:
    """The time on `database`'s clock, which its heartbeats are stamped with."""
    if connections[database].vendor != "postgresql":
        return timezone.now()
    with connections[database].cursor() as cursor:
        cursor.execute("SELECT statement_timestamp()")
        return cursor.fetchone()[0]


def seen_within_a_day() -> tuple[list[dict], list[str]]:
    """Every relay and worker seen in the last day, for the messaging overview: each relay's beats
    are in the database it serves, the workers' where they work; and the databases that did not
    answer (a context's database away leaves the rest listed)."""
    from outbox.models import Heartbeat

    seen, unanswered = [], []
    for database in kernel_databases():
        try:
            now = now_on(database)
            recent = Heartbeat.objects.using(database).filter(last_seen__gte=now - LISTED_FOR)
            beats = list(recent.order_by("kind", "process"))
        except DatabaseError:
            unanswered.append(database)
            continue
        seen += [
            {
                "process": beat.process,
                "database": database,
                "kind": beat.kind,
                "silent_for": silent_since(beat.last_seen, now),
                "silent": silent(beat.last_seen, now),
                "started_at": beat.started_at,
                "relayed": beat.relayed,
                "handled": beat.handled,
            }
            for beat in beats
        ]
    return seen, unanswered


def alive(database: str) -> list[tuple[str, float]]:
    """The relays and workers whose heartbeat in `database` is not silent, each with the seconds
    since it was last seen (`move_context` refuses to run beside them)."""
    from outbox.models import Heartbeat

    now = now_on(database)
    beats = Heartbeat.objects.using(database).filter(last_seen__gte=silence_begins(now))
    return [(beat.process, silent_since(beat.last_seen, now)) for beat in beats.order_by("process")]


def silent_in(database: str) -> int:
    """How many of the relays and workers `seen_within_a_day` lists for `database` are silent: one count."""
    from outbox.models import Heartbeat

    now = now_on(database)
    return (
        Heartbeat.objects.using(database)
        .filter(last_seen__gte=now - LISTED_FOR, last_seen__lt=silence_begins(now))
        .count()
    )
