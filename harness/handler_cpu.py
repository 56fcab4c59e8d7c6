"""The CPU of one delivery's handler executions, measured in one process: the handler path alone.

End to end (harness.bench_processes) a delivery's CPU is read from every process at once: the
relay's, the broker's and Dramatiq's shares move with load and mix with the handlers'. Here the
real dispatch runs synchronously (only the broker hop replaced, as for the statement counts), and
each execution is timed on its own clocks: this process's CPU (`time.process_time_ns`, the
handler's Python, Django and psycopg) and its PostgreSQL backend's (the scheduler's runtime in
`/proc/PID/schedstat`, in nanoseconds). What it leaves out is what a worker adds per message
whatever the handler does: Dramatiq, pika, the broker, the relay. Same-machine comparisons only.

With `webhook_url`, each delivery's customer has an endpoint there wanting every status: its
messages and sends are timed too (the receiver's CPU is its own process's, not counted).
"""

import statistics
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID, uuid4

from django.db import connection
from django.test import Client
from django.test.utils import override_settings

from deliveries.customers import create_customer
from harness.bench_api import a_request_body
from harness.statement_counts import body_of, happy_path
from outbox.core.envelope import Envelope
from outbox.handling.dispatch import dispatch
from webhooks.models import Attempt
from webhooks.services import create_endpoint


def backend_runtime_ns(pid: int) -> int:
    """CPU the backend has run, in nanoseconds (its first field of schedstat; it is on the
    same machine: the harness refuses a remote database)."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


class Timed:
    """A hand-over that times each dispatch on the process's and the backend's clocks."""

    def __init__(self, backend_pid: int):
        self.backend_pid = backend_pid
        self.python_ns: dict[tuple[str, str], list[int]] = defaultdict(list)
        self.database_ns: dict[tuple[str, str], list[int]] = defaultdict(list)

    def __call__(self, subscriber: str, envelope: Envelope) -> None:
        body = body_of(envelope)  # a worker gets it decoded from the broker: not the handler's cost
        python, database = time.process_time_ns(), backend_runtime_ns(self.backend_pid)
        dispatch(subscriber=subscriber, body=body)
        self.database_ns[(subscriber, envelope.type)].append(backend_runtime_ns(self.backend_pid) - database)
        self.python_ns[(subscriber, envelope.type)].append(time.process_time_ns() - python)


@dataclass(frozen=True)
class HandlerCpu:
    deliveries: int
    python_ms: list[float]  # per delivery: this process's CPU in its handler executions
    database_ms: list[float]  # per delivery: the backend's
    by_handler: dict[tuple[str, str], tuple[float, float]]  # median ms of one execution: (python, database)
    webhook_sends: list[int]  # per delivery: POSTs to its customer's endpoint (none without one)

    @property
    def total_ms(self) -> list[float]:
        return [p + d for p, d in zip(self.python_ms, self.database_ms, strict=True)]


# DEBUG off as in a worker (DEBUG logs every statement, quoting its parameters); the flight's
# timers due at once.
@override_settings(DEBUG=False, DRONE_SIMULATION_SPEEDUP=1_000_000)
def measure(*, deliveries: int, warm_up: int = 3, webhook_url: str | None = None) -> HandlerCpu:
    """Take `deliveries` (after `warm_up` untimed ones) through the happy path of
    harness.statement_counts, timing each handler execution; with `webhook_url`, its customer's
    endpoint. Needs free drones near harness.bench.BASE and a local PostgreSQL."""
    if connection.vendor != "postgresql":
        raise RuntimeError("the handler CPU is measured on PostgreSQL: set DATABASE_URL=postgres://...")
    connection.ensure_connection()
    backend_pid = connection.connection.info.backend_pid
    python_ms, database_ms, webhook_sends = [], [], []
    by_handler_python, by_handler_database = defaultdict(list), defaultdict(list)
    for n in range(warm_up + deliveries):
        timed = Timed(backend_pid)
        sends = _deliver_one(timed, webhook_url=webhook_url)
        if n < warm_up:
            continue
        webhook_sends.append(sends)
        python_ms.append(sum(map(sum, timed.python_ns.values())) / 1e6)
        database_ms.append(sum(map(sum, timed.database_ns.values())) / 1e6)
        for key, runs in timed.python_ns.items():
            by_handler_python[key].extend(runs)
            by_handler_database[key].extend(timed.database_ns[key])
    by_handler = {
        key: (statistics.median(by_handler_python[key]) / 1e6, statistics.median(by_handler_database[key]) / 1e6)
        for key in sorted(by_handler_python)
    }
    return HandlerCpu(
        deliveries=deliveries,
        python_ms=python_ms,
        database_ms=database_ms,
        by_handler=by_handler,
        webhook_sends=webhook_sends,
    )


@override_settings(DEBUG=False)
def healthz_ms(*, requests: int = 300) -> float:
    """The reference: one GET /healthz through Django's test client in this process, median CPU (ms)."""
    client, times = Client(), []
    for _ in range(requests):
        started = time.process_time_ns()
        client.get("/healthz")
        times.append(time.process_time_ns() - started)
    return statistics.median(times) / 1e6


def _deliver_one(hand: Timed, *, webhook_url: str | None = None) -> int:
    """A new customer each time (one customer's many requests would meet its rate limit), with an
    endpoint at `webhook_url` if given: the webhook POSTs its delivery made, each one a 2xx."""
    customer, token = create_customer(name=f"handler-cpu-{uuid4().hex[:12]}")
    if webhook_url:
        create_endpoint(customer_id=customer.pk, url=webhook_url, description="handler CPU")
    client = Client(headers={"Authorization": f"Bearer {token}"})
    response = client.post("/api/deliveryrequests", a_request_body(), content_type="application/json")
    if response.status_code != 202:
        raise RuntimeError(f"the request was refused: {response.status_code} {response.content[:300]!r}")
    happy_path(hand, UUID(response.json()["deliveryId"]))
    attempts = Attempt.objects.filter(message__endpoint__customer_id=customer.pk)
    failed = attempts.exclude(status_code__gte=200, status_code__lt=300)
    if failed.exists():
        first = failed.first()
        raise RuntimeError(f"a webhook POST of a delivery failed: {first.status_code} {first.error!r}")
    return attempts.count()
