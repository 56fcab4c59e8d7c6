"""What a worker adds to every message, whatever the handler does: the same handler on the same
kind of event, timed once dispatched in this process and once through RabbitMQ and Dramatiq's
workers.

The in-process side is `dispatch()` alone (the envelope's check, the inbox row, the handler, the
commit, the metrics and the log line) on this process's CPU clock and its PostgreSQL backend's.
The worker side is every CPU second the worker processes, PostgreSQL and RabbitMQ spent while
they handled the same number of messages, read from /proc. The difference is Dramatiq's consumer
and middleware, pika, the broker's delivery and acknowledgement, the pool's hand-out and check, and
the log line's trip to Dramatiq's parent process: what a delivery pays once per handler execution
(17 of them), and what handling several messages as one would divide.
"""

import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import dramatiq
from django.conf import settings
from django.db import connection
from django.test.utils import override_settings

from harness import process_cpu
from harness.bench import empty_the_outbox_and_queues, publish_events
from harness.handler_cpu import backend_runtime_ns
from outbox.core.subscriptions import message_to
from outbox.handling.dispatch import dispatch
from outbox.models import InboxMessage, OutboxMessage

SUBSCRIBER = "packages"  # its delivery.requested handler: one row written, one event published


@dataclass(frozen=True)
class MessageCost:
    """CPU milliseconds per message: each side's total over its messages (a pause for the
    garbage collector counts on both sides)."""

    in_process_python: float  # dispatch() in this process
    in_process_database: float  # its PostgreSQL backend
    workers: float  # the worker processes
    database: float  # every PostgreSQL process, the same way
    broker: float  # RabbitMQ, the same way

    @property
    def in_process(self) -> float:
        return self.in_process_python + self.in_process_database

    @property
    def through_workers(self) -> float:
        return self.workers + self.database + self.broker


@override_settings(DEBUG=False)
def measure(*, messages: int, env: dict[str, str], warm_up: int = 50) -> MessageCost:
    """`messages` delivery.requested events handled in this process, `messages` more by two
    worker processes of eight threads (as the end-to-end figure runs them), after `warm_up`
    untimed ones each way."""
    empty_the_outbox_and_queues()
    publish_events(2 * (messages + warm_up))
    rows = list(OutboxMessage.objects.order_by("id"))
    here, there = rows[: messages + warm_up], rows[messages + warm_up :]
    python_ms, database_ms = _in_process(here)
    workers, database, broker = _through_workers(there, warm_up=warm_up, env=env)
    return MessageCost(
        in_process_python=statistics.fmean(python_ms[warm_up:]),
        in_process_database=statistics.fmean(database_ms[warm_up:]),
        workers=workers * 1000 / messages,
        database=database * 1000 / messages,
        broker=broker * 1000 / messages,
    )


def _in_process(rows: list[OutboxMessage]) -> tuple[list[float], list[float]]:
    connection.ensure_connection()
    backend = connection.connection.info.backend_pid
    python_ms, database_ms = [], []
    for row in rows:
        body = row.envelope()  # a worker gets it decoded from the broker: not dispatch's cost
        python, database = time.process_time_ns(), backend_runtime_ns(backend)
        dispatch(subscriber=SUBSCRIBER, body=body)
        database_ms.append((backend_runtime_ns(backend) - database) / 1e6)
        python_ms.append((time.process_time_ns() - python) / 1e6)
    return python_ms, database_ms


def _through_workers(rows: list[OutboxMessage], *, warm_up: int, env: dict[str, str]) -> tuple[float, float, float]:
    """CPU seconds of the workers, PostgreSQL and RabbitMQ while the workers handled `rows`
    after the first `warm_up` (enqueued and handled before the meter starts)."""
    env = {
        **env,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": uuid.uuid4().hex * 2,
        "DJANGO_DB_POOL_MAX_SIZE": "8",  # a connection for every thread, as end to end
    }
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    workers = subprocess.Popen(
        [*manage, "rundramatiq", "--processes", "2", "--threads", "8"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    broker = dramatiq.get_broker()
    # A plain count of the subscriber's inbox, not of these ids: the polling's own statement is
    # on PostgreSQL's meter too, and a thousand ids to match at each poll would weigh on it.
    handled = InboxMessage.objects.filter(subscriber=SUBSCRIBER)
    before = handled.count()  # the in-process side's
    try:
        for row in rows[:warm_up]:
            broker.enqueue(message_to(SUBSCRIBER, row.envelope()))
        _wait_for(handled, before + warm_up, workers)
        meter = process_cpu.CpuMeter(
            {
                "workers": lambda: process_cpu.tree(workers.pid),
                "database": lambda: process_cpu.named("postgres"),
                "broker": lambda: process_cpu.named("beam.smp"),
            }
        )
        meter.start()
        for row in rows[warm_up:]:
            broker.enqueue(message_to(SUBSCRIBER, row.envelope()))
        _wait_for(handled, before + len(rows), workers)
        spent = meter.stop()
    finally:
        workers.terminate()
        workers.wait(60)
    return spent["workers"], spent["database"], spent["broker"]


def _wait_for(handled, count: int, workers: subprocess.Popen, *, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while (done := handled.count()) < count:
        if workers.poll() is not None:
            raise RuntimeError(f"the workers exited ({workers.returncode}) with {done} of {count} messages handled")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the workers handled {done} of {count} messages in {seconds:.0f} s")
        time.sleep(0.1)
