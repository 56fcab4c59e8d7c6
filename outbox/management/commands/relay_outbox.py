import signal
import threading
import time

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Min

from outbox.command_arguments import number, port, whole_number
from outbox.metrics import serve_metrics
from outbox.models import OutboxMessage
from outbox.relay import BrokerUnavailable, Relay


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
            "--progress-every", type=number(at_least=0), default=10.0, help="Seconds between progress lines (0: none)."
        )
        parser.add_argument(
            "--metrics-port",
            type=port,
            help="Serve Prometheus metrics on this port (a relay on a host without a web process).",
        )

    def handle(self, *, once, batch_size, progress_every, verbosity, metrics_port=None, **options):
        if metrics_port:
            serve_metrics(metrics_port)
            self.stdout.write(f"metrics on http://0.0.0.0:{metrics_port}/metrics")
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        relay = Relay(batch_size=batch_size)
        started = time.monotonic()
        last_report = [started, 0]

        def report(relay: Relay, force: bool = False) -> None:
            now = time.monotonic()
            if verbosity == 0 or not (force or (progress_every and now - last_report[0] >= progress_every)):
                return
            rate = (relay.relayed - last_report[1]) / max(now - last_report[0], 1e-9)
            pending = OutboxMessage.objects.filter(published_at__isnull=True)
            oldest = pending.aggregate(at=Min("available_at"))["at"]
            self.stdout.write(
                f"relayed {relay.relayed} events ({rate:.0f}/s), {pending.count()} pending"
                + (f", oldest due {oldest:%H:%M:%S}" if oldest else "")
            )
            last_report[:] = [now, relay.relayed]

        if verbosity:
            self.stdout.write("relay started" + (" (--once)" if once else "; Ctrl-C or SIGTERM stops it"))
        try:
            relay.run(stop=stop, once=once, on_progress=report)
        except BrokerUnavailable as error:
            raise CommandError(f"broker unreachable, {relay.relayed} events relayed before: {error}") from error
        report(relay, force=True)
        if verbosity:
            self.stdout.write(f"relay stopped after {time.monotonic() - started:.1f} s")
