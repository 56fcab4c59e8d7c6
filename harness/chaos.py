"""The chaos rig: the real system as separate processes under injected faults, then a ledger.

`manage.py chaos` starts web, two relays and two workers on a database and queue prefix of its
own, submits deliveries over HTTP and, at moments drawn from a seeded generator, kills a relay or
a worker (SIGKILL), pauses one past the broker's heartbeat (SIGSTOP, SIGCONT) and closes every
broker connection. `--rabbitmq-cluster 3` adds stopping and killing nodes of a cluster of its own;
`--database-replica` puts the database on a primary with a synchronous replica and fails it over
once. Meanwhile a webhook receiver of its own (`WebhookReceiver`) is down for a while. When the
system is quiet it checks the ledger (`harness.ledger`), prints the verdict and removes its database and
queues.
"""

import contextlib
import os
import random
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone
from standardwebhooks import Webhook, WebhookVerificationError

from deliveries.models import Delivery
from harness.simulation import Api
from outbox.core.working_database import kernel_databases

KINDS = ("kill_relay", "kill_worker", "pause_relay", "pause_worker", "close_broker_connections")
CLUSTER_KINDS = ("stop_broker_node", "kill_broker_node")  # only on a cluster of the rig's own
FAILOVER = "failover_database"  # only on a primary with a replica of the rig's own; once: there is no third server
FAILOVER_OUTAGE_SECONDS = 3.0  # no primary at all for this long (at most the pause), then the replica is promoted
# What the rig's webhook endpoint asks for: a few statuses, so that the run's extra load stays small.
WEBHOOK_EVENT_TYPES = ["delivery.in_transit", "delivery.delivered", "delivery.failed", "delivery.cancelled"]
WEBHOOK_BACKOFF_SECONDS = "1,2,3"  # then every 6 to 12 s: retries land within the rig's settle time


@dataclass(frozen=True)
class Fault:
    at: float  # seconds after the start of the submission
    kind: str
    target: str = ""

    def __str__(self):
        return f"t+{self.at:6.1f}s {self.kind}{' ' + self.target if self.target else ''}"


def plan_faults(
    rng: random.Random,
    *,
    duration: float,
    per_kind: int,
    broker_is_rabbitmq: bool,
    cluster_nodes: int = 0,
    database_replica: bool = False,
) -> list[Fault]:
    """`per_kind` faults of each kind at times spread over the run, on targets drawn at random;
    with `cluster_nodes`, nodes of the rig's own cluster are stopped and killed too; with
    `database_replica`, one failover of the database (drawn last: the other faults stay the seed's)."""
    faults = []
    for kind in KINDS + (CLUSTER_KINDS if cluster_nodes else ()):
        if kind == "close_broker_connections" and not broker_is_rabbitmq:
            continue
        for _ in range(per_kind):
            if kind == "close_broker_connections":
                target = ""
            elif kind in CLUSTER_KINDS:
                target = f"node-{rng.randint(1, cluster_nodes)}"
            else:
                target = f"{kind.split('_')[1]}-{rng.randint(1, 2)}"
            faults.append(Fault(at=round(rng.uniform(1.0, duration), 1), kind=kind, target=target))
    if database_replica and per_kind:
        faults.append(Fault(at=round(rng.uniform(1.0, duration), 1), kind=FAILOVER))
    return sorted(faults, key=lambda f: f.at)


def with_heartbeat(url: str) -> str:
    """A paused process is noticed (and its unacknowledged messages requeued) within seconds."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("amqp"):
        return url
    query = dict(parse_qsl(parts.query))
    query.setdefault("heartbeat", "5")
    return urlunsplit(parts._replace(query=urlencode(query)))


def chaos_env(*, run_env: dict[str, str], speedup: float, broker_urls: list[str] | None = None) -> dict[str, str]:
    """The environment of every process of the run: its own database and queues (`run_env`, the
    scratch run's), a short heartbeat; on the rig's own cluster, every node in BROKER_URL and
    quorum queues."""
    cluster = {"RABBITMQ_QUEUE_TYPE": "quorum"} if broker_urls else {}
    return {
        **run_env,
        **cluster,
        "BROKER_URL": " ".join(with_heartbeat(url) for url in (broker_urls or [settings.BROKER_URL])),
        "DRONE_SIMULATION_SPEEDUP": str(speedup),
        "DRONE_POSITION_REPORTS": "3",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
        "DJANGO_SECURE_SSL_REDIRECT": "0",  # plain HTTP on localhost
        # Deliveries left unconfirmed fail soon, and their drones bring the packages back.
        "DELIVERY_CONFIRMATION_TIMEOUT_SECONDS": "10",
        # A message the broker lost is re-sent a minute after it was sent, not 15.
        "OUTBOX_SWEEP_GRACE_SECONDS": "60",
        "OUTBOX_SWEEP_INTERVAL_SECONDS": "10",
        # Webhooks to the rig's own receiver, on loopback over plain HTTP, retried within seconds.
        "WEBHOOKS_ALLOW_HTTP": "1",
        "WEBHOOKS_ALLOW_PRIVATE_NETWORKS": "127.0.0.0/8",
        "WEBHOOKS_BACKOFF_SECONDS": WEBHOOK_BACKOFF_SECONDS,
        "PYTHONUNBUFFERED": "1",
    }


class System:
    """Web, two relays (two for each database with an outbox) and two worker processes, each in a
    process group of its own."""

    def __init__(self, *, env: dict[str, str], addr: str, logs: Path, threads: int):
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        # Two relays for each database with an outbox, taking turns: relay-1 and relay-2, which the
        # faults hit, are one of each when a context is on a database of its own.
        relays = [database for _ in range(2) for database in kernel_databases()]
        self.commands = {
            "web": [*manage, "runserver", addr, "--noreload"],
            **{
                f"relay-{i}": [*manage, "relay_outbox", *(["--database", db] if db != "default" else [])]
                for i, db in enumerate(relays, 1)
            },
            "worker-1": [*manage, "rundramatiq", "--processes", "1", "--threads", str(threads)],
            "worker-2": [*manage, "rundramatiq", "--processes", "1", "--threads", str(threads)],
        }
        self.env, self.logs = env, logs
        self.processes: dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> None:
        with open(self.logs / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen(
                self.commands[name], env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def start_all(self) -> None:
        for name in self.commands:
            self.start(name)

    def _signal(self, name: str, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.processes[name].pid, signum)

    def kill_and_restart(self, name: str) -> None:
        self._signal(name, signal.SIGKILL)
        self.processes[name].wait()
        self.start(name)

    def pause(self, name: str, seconds: float, stop: threading.Event) -> None:
        self._signal(name, signal.SIGSTOP)
        try:
            stop.wait(seconds)
        finally:
            self._signal(name, signal.SIGCONT)

    def exited(self) -> list[str]:
        return [f"{name} (exit {p.returncode})" for name, p in self.processes.items() if p.poll() is not None]

    def stop_all(self) -> None:
        for name in self.processes:
            self._signal(name, signal.SIGCONT)
            self._signal(name, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for name, process in self.processes.items():
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(name, signal.SIGKILL)
                process.wait()


def close_every_broker_connection(cluster=None, *, queue_prefix: str = "") -> int:
    """As RabbitMQ does when it drops every client: on every node of the rig's own cluster, or, on
    the configured broker, every connection of the deployment with `queue_prefix` (their name says
    it: outbox.core.brokers.connection_name), so that nothing else on a shared broker (another
    test run, another deployment) is touched. How many it closed (on a cluster: nodes told to)."""
    if cluster is not None:
        for i in range(cluster.size):
            if cluster.running(i):
                cluster.ctl(i, "close_all_connections", "chaos: every connection closed", check=False)
        return cluster.size
    if not queue_prefix:
        raise ValueError("name the queue prefix whose connections to close: the broker may be shared")
    # One rabbitmqctl for them all: each call starts an Erlang VM, about a second of CPU. On a machine
    # whose cores are all busy the CLI can fail to reach the node in its own time and exit 69
    # (EX_UNAVAILABLE, the node answering all along): it is asked again, for up to a minute.
    command = ["rabbitmqctl", "eval", _CLOSE_NAMED.replace("WANTED", f"prefix={queue_prefix}")]
    deadline = time.monotonic() + 60
    while True:
        closed = subprocess.run(command, capture_output=True, text=True, timeout=60)
        if closed.returncode != _CLI_UNAVAILABLE or time.monotonic() > deadline:
            break
        time.sleep(1)  # before the next VM: the last one found the node busy
    if closed.returncode:
        raise subprocess.CalledProcessError(closed.returncode, command, closed.stdout, closed.stderr)
    return int(closed.stdout.strip())


_CLI_UNAVAILABLE = 69  # rabbitmqctl could not reach the node (sysexits' EX_UNAVAILABLE)


# Closes every connection whose client named it with WANTED in its name; prints how many.
_CLOSE_NAMED = """
length([begin rabbit_networking:close_connection(Pid, "chaos: every connection closed"), Pid end
        || Info <- rabbit_networking:connection_info_all([pid, client_properties]),
           {pid, Pid} <- [lists:keyfind(pid, 1, Info)],
           {client_properties, Properties} <- [lists:keyfind(client_properties, 1, Info)],
           {_, longstr, Name} <- [lists:keyfind(<<"connection_name">>, 1, Properties)],
           binary:match(Name, <<"WANTED">>) =/= nomatch]).
"""


def break_broker_node(cluster, fault: Fault, seconds: float, stop: threading.Event) -> None:
    """Stop (SIGTERM) or kill (SIGKILL) one node of the cluster, then start it again after `seconds`."""
    node = int(fault.target.removeprefix("node-")) - 1
    if not cluster.running(node):
        return  # still down from an earlier fault
    if fault.kind == "stop_broker_node":
        cluster.stop_node(node)
    else:
        cluster.kill_node(node)
    stop.wait(seconds)
    cluster.start_node(node)


def fail_over_database(pair, seconds: float, stop: threading.Event) -> str:
    """Crash the primary (immediate stop), leave no server taking writes for `seconds`, promote the
    replica; what it took."""
    stopped = pair.stop_primary("immediate")
    stop.wait(seconds)
    promoted = pair.promote()
    return f"(primary stopped in {stopped:.2f} s, {seconds:.1f} s without one, promoted in {promoted:.2f} s)"


@dataclass(frozen=True)
class Arrival:
    """A webhook's first arrival: `order` numbers first arrivals as they came."""

    order: int
    path: str
    body: str


class WebhookReceiver:
    """A customer's receiver, on 127.0.0.1 in the rig's process: it verifies each POST's Standard
    Webhooks signature with its path's secret, keeps each `webhook-id`'s first arrival and drops
    (counts) the copies. Between `down` (monotonic times) it is down: it answers 503, and closes
    every third connection without answering."""

    def __init__(self):
        self.secrets: dict[str, str] = {}  # path -> the endpoint's secret
        self.arrivals: dict[str, Arrival] = {}  # webhook-id -> its first arrival
        self.bad_signatures: list[str] = []
        self.duplicates = self.refused = self.cut_off = 0
        self.down = (0.0, 0.0)
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> str:
        """Serve on a free port; its base URL."""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                status = receiver.accept(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                if status is None:
                    self.close_connection = True  # no answer at all
                    return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def accept(self, path: str, headers: dict[str, str], body: str, *, now: float | None = None) -> int | None:
        """The answer to one POST: None to close the connection without one."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if self.down[0] <= now < self.down[1]:
                if (self.refused + self.cut_off) % 3 == 2:
                    self.cut_off += 1
                    return None
                self.refused += 1
                return 503
            webhook_id = headers.get("webhook-id", "")
            try:
                Webhook(self.secrets.get(path, "whsec_" + "A" * 32)).verify(body, headers)
            except WebhookVerificationError as error:
                self.bad_signatures.append(f"{webhook_id or '(no webhook-id)'} to {path}: {error}")
                return 400
            if webhook_id in self.arrivals:
                self.duplicates += 1
            else:
                self.arrivals[webhook_id] = Arrival(order=len(self.arrivals), path=path, body=body)
            return 204


@dataclass
class WebhookWatch:
    """The rig's webhook endpoints and its receiver: `endpoint_id` is sent to at `path`; `silent`
    (endpoint id -> path) were disabled or deleted before the run, and must be sent nothing."""

    receiver: WebhookReceiver
    endpoint_id: str
    path: str
    event_types: list[str]
    silent: dict[str, str] = field(default_factory=dict)


class Recipient(threading.Thread):
    """The people at the drop-offs: of the deliveries awaiting a confirmation, it confirms every
    other one through the API with its task token and leaves the rest to time out."""

    def __init__(self, api: Api, stop: threading.Event):
        super().__init__(daemon=True)
        self.api, self.stop, self.done = api, stop, threading.Event()
        self.confirmed: set[str] = set()
        self.left: set[str] = set()

    def run(self) -> None:
        try:
            while not (self.stop.is_set() or self.done.wait(0.5)):
                try:
                    self._round()
                except DatabaseError:  # the database fails over: a connection of the old primary's
                    connection.close()
        finally:
            connection.close()

    def _round(self) -> None:
        awaiting = Delivery.objects.filter(status=Delivery.Status.AWAITING_CONFIRMATION)
        for delivery_id in map(str, awaiting.values_list("id", flat=True)):
            if delivery_id in self.confirmed or delivery_id in self.left:
                continue
            if int(delivery_id[-1], 16) % 2:
                self.left.add(delivery_id)
            elif self._confirm(delivery_id):
                self.confirmed.add(delivery_id)

    def _confirm(self, delivery_id: str) -> bool:
        try:
            _, issued = self.api.call("POST", f"/deliveries/{delivery_id}/confirmation-token")
            body = {
                "token": issued["confirmationToken"],
                "confirmationType": "FingerPrint",
                "dateTime": timezone.now().isoformat(),
            }
            status, _ = self.api.call("POST", f"/deliveries/{delivery_id}/confirmations", body)
        except (OSError, KeyError, TypeError):
            return False  # tried again on the next round
        return status == 200
