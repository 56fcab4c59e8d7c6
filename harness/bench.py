"""What `manage.py bench` measures, each figure beside the reference it is judged by.

Every figure is timed several times in one run, on one machine, and reported as the median
with min and max; its reference (raw pika with pipelined confirms, Dramatiq's own confirmed
enqueue) is timed in the same run, so the ratio means something on a shared, noisy machine.
"""

import json
import multiprocessing
import os
import platform
import random
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from uuid import UUID

import dramatiq
import pika
from django.conf import settings
from django.core.management import call_command
from django.db import connection, transaction
from django.test.utils import override_settings
from django.utils import timezone

from deliveries.events import DeliveryRequested, Location, PackageInfo
from harness import simulation
from harness.bench_relay import relay_process
from outbox.core.brokers import broker_urls, reconnected_if_lost
from outbox.core.publishing import publish
from outbox.core.rabbitmq import amqp_parameters
from outbox.core.retention import prune
from outbox.core.subscriptions import message_to, queue_name, routing_table, subscribers_of
from outbox.core.working_database import kernel_databases
from outbox.handling.dispatch import dispatch
from outbox.models import InboxMessage, OutboxMessage
from outbox.relaying.relay import Relay

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


# DEBUG off as in production: with it on (the development default) Django records every
# statement, which cost publish() a sixth of its time here and its bare reference nothing.
@override_settings(DEBUG=False)
def publish_events(count: int, *, per_transaction: int = 500) -> float:
    """Seconds to publish `count` delivery.requested events through publish(), `per_transaction` a commit."""
    events = [a_delivery_requested() for _ in range(count)]
    began = time.perf_counter()
    for start in range(0, count, per_transaction):
        with transaction.atomic():
            for event in events[start : start + per_transaction]:
                publish(event, stream=f"delivery:{event.delivery_id}", correlation_id=event.delivery_id)
    return time.perf_counter() - began


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
    with pika.BlockingConnection(amqp_parameters(broker_urls(settings.BROKER_URL))) as conn:
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
    try:
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
    finally:
        # Stopped meanwhile (Ctrl-C, SIGTERM) or failed: a relay still draining, or waiting to hand
        # its count to a parent that no longer reads it, would keep the bench from ever exiting.
        for child in children:
            if child.is_alive():
                child.kill()
                child.join(10)
    unpublished = OutboxMessage.objects.filter(published_at__isnull=True).count()
    if unpublished:
        raise RuntimeError(f"{unpublished} rows left unpublished after {relayed} were relayed")
    return elapsed


def empty_the_outbox_and_queues() -> None:
    """No figure inherits another's work: every table of the run's database emptied (the
    handlers' own state too: a waiting line grown by an earlier run slows the next), and every
    subscriber's queue (the events a latency run's handlers published go on to others)."""
    for database in kernel_databases():  # a context on a database of its own has its tables there
        call_command("flush", database=database, interactive=False, verbosity=0)
    broker = reconnected_if_lost(dramatiq.get_broker())
    for subscriber in sorted({s.subscriber for subs in routing_table().values() for s in subs}):
        broker.declare_queue(queue_name(subscriber), ensure=True)
        broker.channel.queue_purge(queue_name(subscriber))


def machine() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    with pika.BlockingConnection(amqp_parameters(broker_urls(settings.BROKER_URL))) as conn:
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
