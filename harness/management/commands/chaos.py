import contextlib
import io
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit
from uuid import uuid4

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError, connection

from common.arguments import number, port, whole_number
from deliveries.customers import create_customer
from delivery_project import database_url
from harness.chaos import (
    CLUSTER_KINDS,
    FAILOVER,
    FAILOVER_OUTAGE_SECONDS,
    WEBHOOK_EVENT_TYPES,
    Fault,
    Recipient,
    System,
    WebhookReceiver,
    WebhookWatch,
    break_broker_node,
    chaos_env,
    close_every_broker_connection,
    fail_over_database,
    plan_faults,
)
from harness.ledger import Ledger
from harness.postgres_servers import PostgresPrimaryWithReplica
from harness.rabbitmq_cluster import RabbitmqCluster
from harness.scratch import scratch_run
from harness.simulation import Api, random_request, stamped
from webhooks import services as webhooks
from webhooks.models import Endpoint

BASE = (47.6205, -122.3493)


class Command(BaseCommand):
    help = (
        "Run the whole system on PostgreSQL (+ RabbitMQ) as real processes (web, two relays, two workers), "
        "submit delivery requests over HTTP while killing, pausing and disconnecting processes at seeded "
        "moments, then check the ledger: nothing lost, nothing doubled, nothing stuck. Exits 1 on a violation."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        # Checked as they are parsed, before a database is made and processes start: a run with no
        # deliveries, no time or no drones would check nothing, or fail minutes later.
        count, seconds = whole_number(at_least=1), number(above=0, at_most=86_400)
        parser.add_argument("--deliveries", type=count, default=200)
        parser.add_argument("--seed", type=int, default=None, help="Faults and requests follow it (default: random).")
        parser.add_argument(
            "--duration", type=seconds, default=60.0, help="Seconds over which requests and faults spread."
        )
        parser.add_argument("--faults-per-kind", type=whole_number(at_least=0), default=2)
        parser.add_argument(
            "--pause-seconds", type=seconds, default=15.0, help="How long a paused process stays stopped."
        )
        parser.add_argument("--drones", type=count, default=20)
        parser.add_argument(
            "--speedup", type=number(above=0), default=100.0, help="Simulated flights run this much faster."
        )
        parser.add_argument("--threads", type=count, default=4, help="Threads per worker process.")
        parser.add_argument("--settle-timeout", type=seconds, default=300.0, help="Longest wait for quiet at the end.")
        parser.add_argument("--port", type=port, default=8765)
        parser.add_argument("--keep", action="store_true", help="Keep the run's database and logs for inspection.")
        parser.add_argument(
            "--rabbitmq-cluster",
            type=whole_number(at_least=3),
            default=None,
            metavar="NODES",
            help="Run on a RabbitMQ cluster of this many nodes of the rig's own (quorum queues), and stop "
            "and kill its nodes too (stop_broker_node, kill_broker_node).",
        )
        parser.add_argument(
            "--database-replica",
            action="store_true",
            help="Run the run's database on a PostgreSQL primary with a synchronous replica of the rig's own "
            "(the multi-host URL), and once crash the primary and promote the replica (failover_database).",
        )

    def handle(self, **options):
        if connection.vendor != "postgresql":
            raise CommandError("the chaos rig runs on PostgreSQL: set DATABASE_URL=postgres://...")
        sys.stdout.reconfigure(line_buffering=True)  # progress shows as it happens, even in a pipe or a file
        seed = options["seed"] if options["seed"] is not None else random.SystemRandom().randrange(1_000_000)
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        with contextlib.ExitStack() as servers:
            self.pair = None
            if options["database_replica"]:
                self.stdout.write("starting a PostgreSQL primary with a synchronous replica")
                self.pair = servers.enter_context(PostgresPrimaryWithReplica(synchronous=True))
                _use_the_pair(self.pair)
            violations = self._in_a_scratch_run(stop, seed, options)
        if violations:
            raise CommandError(f"{len(violations)} violation(s) (seed {seed})")

    def _in_a_scratch_run(self, stop: threading.Event, seed: int, options: dict) -> list[str]:
        # On the pair, the run's database goes with the rig's directory; its old primary, which the
        # scratch run's admin connection is to, is gone by the end.
        with scratch_run("chaos", keep=options["keep"] or self.pair is not None) as scratch:
            logs = Path(tempfile.mkdtemp(prefix=f"chaos-{scratch.run}-"))
            self.stdout.write(
                f"chaos run {scratch.run}: seed {seed}, {options['deliveries']} deliveries, logs in {logs}"
            )
            call_command("seed_fleet", options["drones"], latitude=BASE[0], longitude=BASE[1], stdout=io.StringIO())
            _, token = create_customer(name="chaos")
            self.cluster, self.queue_prefix = None, scratch.queue_prefix
            if options["rabbitmq_cluster"]:
                nodes = options["rabbitmq_cluster"]
                self.stdout.write(f"starting a {nodes}-node RabbitMQ cluster in {logs}")
                self.cluster = RabbitmqCluster(logs / "rabbitmq", size=nodes, die_with_thread=False)
                self.cluster.start()
            env = chaos_env(
                run_env=scratch.env(),
                speedup=options["speedup"],
                broker_urls=self.cluster.urls if self.cluster else None,
            )
            if self.pair is not None:
                env.pop("OUTBOX_LISTEN_DATABASE_URL", None)  # the configured server's: the relays LISTEN on the pair
            system = System(env=env, addr=f"127.0.0.1:{options['port']}", logs=logs, threads=options["threads"])
            self.receiver = WebhookReceiver()
            try:
                self.receiver_url = self.receiver.start()
                system.start_all()
                api = Api(token=token, url=f"http://127.0.0.1:{options['port']}")
                self._wait_for_web(api, stop)
                violations = self._run(api, system, stop=stop, **{**options, "seed": seed})
            finally:
                system.stop_all()
                self.receiver.stop()
                if self.cluster is not None:
                    self.cluster.stop()
                if not options["keep"]:
                    shutil.rmtree(logs, ignore_errors=True)
        return violations

    def _run(self, api: Api, system: System, *, seed: int, stop: threading.Event, **options) -> list[str]:
        rng = random.Random(seed)
        faults = plan_faults(
            rng,
            duration=options["duration"],
            per_kind=options["faults_per_kind"],
            broker_is_rabbitmq=self.cluster is not None or urlsplit(settings.BROKER_URL).scheme.startswith("amqp"),
            cluster_nodes=self.cluster.size if self.cluster else 0,
            database_replica=self.pair is not None,
        )
        requests = [
            random_request(rng, latitude=BASE[0], longitude=BASE[1], radius_km=3, confirmation_share=0.25)
            for _ in range(options["deliveries"])
        ]
        # The receiver is down for a while from the seed: from 15-30 % of the submission, for 20-30 % of it.
        down_from, down_for = (
            rng.uniform(0.15, 0.3) * options["duration"],
            rng.uniform(0.2, 0.3) * options["duration"],
        )
        watch = self._register_webhooks(api)
        started = time.monotonic()
        self.receiver.down = (started + down_from, started + down_from + down_for)
        self.stdout.write(f"webhook receiver down from t+{down_from:.1f}s to t+{down_from + down_for:.1f}s")
        injected: list[str] = []
        injector = threading.Thread(
            target=self._inject, args=(faults, system, started, stop, options["pause_seconds"], injected), daemon=True
        )
        injector.start()
        recipient = Recipient(api, stop)
        recipient.start()
        accepted = self._submit(api, requests, started=started, duration=options["duration"], stop=stop)
        injector.join()
        self.stdout.write(f"submitted: {len(accepted)} accepted (202) in {time.monotonic() - started:.1f} s")

        ledger = Ledger(accepted=accepted, webhooks=watch)
        deadline = time.monotonic() + options["settle_timeout"]
        last = ""
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                unsettled = ledger.unsettled()
            except DatabaseError as error:  # a connection to the failed primary, once for each pooled
                connection.close()
                unsettled = [f"the database: {error}".strip()]
            if not unsettled:
                break
            if "; ".join(unsettled) != last:
                last = "; ".join(unsettled)
                self.stdout.write(f"t+{time.monotonic() - started:6.1f}s settling: {last}")
            stop.wait(1)
        quiet_after = time.monotonic() - started
        recipient.done.set()
        recipient.join(10)
        ledger.check()
        ledger.figures.update(confirmed=len(recipient.confirmed), left_to_time_out=len(recipient.left))
        exited = system.exited()
        ledger.violations.extend(f"process died by itself: {name}" for name in exited)

        self.stdout.write(f"faults injected ({len(injected)}):")
        for line in injected:
            self.stdout.write(f"  {line}")
        self.stdout.write(f"quiet after {quiet_after:.1f} s")
        for name, value in ledger.figures.items():
            self.stdout.write(f"  {name}: {value}")
        if ledger.violations:
            self.stdout.write(self.style.ERROR(f"verdict: {len(ledger.violations)} violation(s)"))
            for violation in ledger.violations:
                self.stdout.write(f"  {violation}")
        else:
            self.stdout.write(self.style.SUCCESS(f"verdict: violations: 0 (seed {seed})"))
        return ledger.violations

    def _inject(self, faults: list[Fault], system: System, started: float, stop, pause: float, injected: list[str]):
        for fault in faults:
            if stop.wait(max(0.0, started + fault.at - time.monotonic())):
                return
            at, note = time.monotonic() - started, ""
            if fault.kind == FAILOVER:
                note = fail_over_database(self.pair, min(pause, FAILOVER_OUTAGE_SECONDS), stop)
            elif fault.kind in CLUSTER_KINDS:
                break_broker_node(self.cluster, fault, pause, stop)
            elif fault.kind.startswith("kill"):
                system.kill_and_restart(fault.target)
            elif fault.kind.startswith("pause"):
                system.pause(fault.target, pause, stop)
            else:
                close_every_broker_connection(self.cluster, queue_prefix=self.queue_prefix)
            injected.append(" ".join(filter(None, [f"t+{at:6.1f}s", fault.kind, fault.target, note])))
            self.stdout.write(f"  fault {injected[-1]}")

    def _submit(self, api: Api, requests: list[dict], *, started: float, duration: float, stop) -> list[str]:
        """POST each request at its moment; a 503 or a dropped connection is sent again with the
        same Idempotency-Key, as a careful client would."""
        accepted, lock = [], threading.Lock()

        def send(i: int, body: dict) -> None:
            if stop.wait(max(0.0, started + i * duration / len(requests) - time.monotonic())):
                return  # interrupted: send no more
            key = str(uuid4())
            for _ in range(20):
                try:
                    status, answer = api.call(
                        "POST", "/deliveryrequests", stamped(body), headers={"Idempotency-Key": key}
                    )
                except OSError:
                    status, answer = None, {}
                if status == 202:
                    with lock:
                        accepted.append(answer["deliveryId"])
                    return
                if status not in (None, 503):
                    raise CommandError(f"request {i} answered {status}: {answer}")
                stop.wait(1)
            raise CommandError(f"request {i} was never accepted")

        threads = [threading.Thread(target=send, args=(i, body)) for i, body in enumerate(requests)]
        # Bounded concurrency: at most 16 requests in flight.
        for batch in range(0, len(threads), 16):
            for thread in threads[batch : batch + 16]:
                thread.start()
            for thread in threads[batch : batch + 16]:
                thread.join()
        return accepted

    def _register_webhooks(self, api: Api) -> WebhookWatch:
        """Through the API, for the customer the rig submits as: the endpoint the ledger follows, one
        disabled (by the webhooks context's own service, as when it keeps failing) and one deleted;
        each on a path of its own on the rig's receiver, its secret given to it."""

        def register(path: str) -> str:
            body = {"url": self.receiver_url + path, "eventTypes": WEBHOOK_EVENT_TYPES, "description": "chaos"}
            status, answer = api.call("POST", "/webhookendpoints", body)
            if status != 201:
                raise CommandError(f"registering a webhook endpoint answered {status}: {answer}")
            self.receiver.secrets[path] = answer["secret"]
            return answer["id"]

        live, disabled, deleted = register("/hooks"), register("/disabled"), register("/deleted")
        webhooks.disable(endpoint=Endpoint.objects.get(pk=disabled), reason="chaos: disabled before the run")
        if api.call("GET", f"/webhookendpoints/{disabled}")[1].get("enabled") is not False:
            raise CommandError(f"webhook endpoint {disabled} was not disabled")
        if (status := api.call("DELETE", f"/webhookendpoints/{deleted}")[0]) != 204:
            raise CommandError(f"deleting a webhook endpoint answered {status}")
        return WebhookWatch(
            receiver=self.receiver,
            endpoint_id=live,
            path="/hooks",
            event_types=WEBHOOK_EVENT_TYPES,
            silent={disabled: "/disabled", deleted: "/deleted"},
        )

    def _wait_for_web(self, api: Api, stop) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not stop.is_set():
            try:
                if api.call("GET", "/deliveries")[0] == 200:
                    return
            except OSError:
                pass
            stop.wait(0.2)
        raise CommandError("the web process did not answer within 60 s")


def _use_the_pair(pair: PostgresPrimaryWithReplica) -> None:
    """Point this process at the pair, through its multi-host URL (target_session_attrs=read-write),
    and make that the URL the scratch run hands its processes. Before any connection is made."""
    connection.close()
    connection.close_pool()  # none yet, or one of the configured server's
    url = pair.url("postgres")
    entry = database_url.parse(url)
    db = connection.settings_dict
    db.update(HOST=entry["HOST"], PORT=entry["PORT"], USER=entry["USER"], PASSWORD=entry["PASSWORD"])
    db["OPTIONS"] = {**db["OPTIONS"], **entry["OPTIONS"]}
    settings.DATABASE_URL = url
