"""The relay process. It reports through logging, not stdout, like every long-running process of
the deployable: its lines share the format (LOG_FORMAT=json) and the stream of the others."""

import logging
import signal
import threading
import time

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS
from django.db.models import Min

from outbox.core.working_database import serving
from outbox.management.arguments import kernel_database, number, port, whole_number
from outbox.models import OutboxMessage
from outbox.observability.metrics import serve_metrics
from outbox.relaying.relay import BrokerUnavailable, Relay

logger = logging.getLogger("outbox.relaying.relay")


class Command(BaseCommand):
    help = (
        "Relay committed outbox rows to the broker, one message per subscriber queue. "
        "Several relays may run at once. SIGTERM/SIGINT finish the current batch and exit."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="Relay what is due now, then exit.")
        parser.add_argument(
            "--batch-size", type=whole_number(at_least=1), help="Rows claimed per batch (OUTBOX_RELAY_BATCH_SIZE)."
        )
        parser.add_argument(
            "--progress-every",
            type=number(at_least=0),
            default=10.0,
            help="At most one progress line this often, in seconds, and none while idle (0: none).",
        )
        kernel_database(parser, what="outbox this relay serves, with its sweep and retention")
        parser.add_argument(
            "--metrics-port",
            type=port,
            help="Serve Prometheus metrics on this port (a relay on a host without a web process).",
        )

    def handle(self, *, database, **options):
        with serving(database):  # its claims, wake-up, lease, sweep, retention and heartbeats: this database's
            self._relay(database=database, **options)

    def _relay(self, *, once, batch_size, progress_every, verbosity, database, metrics_port=None, **options):
        if metrics_port:
            serve_metrics(metrics_port)
            logger.info("metrics on http://0.0.0.0:%d/metrics", metrics_port)
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        relay = Relay(batch_size=batch_size)
        started = time.monotonic()
        last_report = [started, 0]

        def report(relay: Relay, force: bool = False) -> None:
            now = time.monotonic()
            due = force or (progress_every and now - last_report[0] >= progress_every)
            if verbosity == 0 or not due:
                return
            if relay.relayed == last_report[1] and not force:
                last_report[0] = now  # an idle relay is quiet
                return
            rate = (relay.relayed - last_report[1]) / max(now - last_report[0], 1e-9)
            pending = OutboxMessage.objects.filter(published_at__isnull=True)
            oldest = pending.aggregate(at=Min("available_at"))["at"]
            logger.info(
                "relayed %d events (%.0f/s), %d pending%s",
                relay.relayed,
                rate,
                pending.count(),
                f", oldest due {oldest:%H:%M:%S}" if oldest else "",
            )
            last_report[:] = [now, relay.relayed]

        if verbosity:
            logger.info(
                "relay started%s%s",
                "" if database == DEFAULT_DB_ALIAS else f" for the database {database}",
                " (--once)" if once else "; Ctrl-C or SIGTERM stops it",
            )
        try:
            relay.run(stop=stop, once=once, on_progress=report)
        except BrokerUnavailable as error:
            raise CommandError(f"broker unreachable, {relay.relayed} events relayed before: {error}") from error
        report(relay, force=True)
        if verbosity:
            logger.info("relay stopped after %.1f s", time.monotonic() - started)
