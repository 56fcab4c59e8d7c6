import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from delivery_project import bench
from delivery_project.scratch import scratch_run


class Command(BaseCommand):
    help = (
        "Measure the relay and publish() on PostgreSQL + RabbitMQ, each figure the median of several runs "
        "(min, max) beside its reference measured in the same run; print a table and write JSON."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--events", type=int, default=10_000, help="Events a relay figure drains.")
        parser.add_argument("--runs", type=int, default=3, help="Runs of each figure (the median is reported).")
        parser.add_argument("--relays", default="1,2,4", help="Relay process counts to measure.")
        parser.add_argument("--latency-rate", type=float, default=50.0, help="Events a second for the latency figure.")
        parser.add_argument("--latency-seconds", type=float, default=30.0)
        parser.add_argument("--results-dir", default=str(Path(settings.BASE_DIR) / "bench" / "results"))

    def handle(self, *, events, runs, relays, results_dir, latency_rate, latency_seconds, **options):
        if not urlsplit(settings.BROKER_URL).scheme.startswith("amqp"):
            raise CommandError("bench measures against RabbitMQ: set BROKER_URL=amqp://...")
        sys.stdout.reconfigure(line_buffering=True)
        figures = {}
        try:
            with scratch_run("bench") as scratch:
                settings.OUTBOX_QUEUE_PREFIX = scratch.queue_prefix
                machine = bench.machine()
                self.stdout.write(f"machine: {machine}")
                figures = self._measure(
                    scratch,
                    events=events,
                    runs=runs,
                    relays=[int(r) for r in relays.split(",")],
                    latency=(latency_rate, latency_seconds),
                )
        except RuntimeError as error:
            raise CommandError(str(error)) from error
        self._report(
            figures,
            machine,
            results_dir,
            events=events,
            runs=runs,
            latency_rate=latency_rate,
            latency_s=latency_seconds,
        )

    def _measure(self, scratch, *, events: int, runs: int, relays: list[int], latency) -> dict[str, bench.Figure]:
        messages = 2 * events
        figures = {
            "raw_pipelined": bench.Figure("raw pika, pipelined confirms (reference)", "messages/s"),
            "dramatiq_enqueue": bench.Figure("Dramatiq enqueue, one confirm at a time (reference)", "messages/s"),
            **{
                f"relay_{n}": bench.Figure(f"relay, {n} process(es)", "messages/s", reference="raw_pipelined")
                for n in relays
            },
            "publish": bench.Figure(
                "publish(), 500 events a transaction", "events/s", note="delivery.requested, ~800 B"
            ),
            "latency_p50": bench.Figure(f"commit to handler p50 at {latency[0]:.0f} events/s", "ms"),
            "latency_p99": bench.Figure(f"commit to handler p99 at {latency[0]:.0f} events/s", "ms"),
        }
        for run in range(1, runs + 1):
            self.stdout.write(f"run {run}/{runs}")
            bench.empty_the_outbox_and_queues()
            figures["publish"].values.append(events / bench.publish_events(events))
            self._progress(figures["publish"])
            copies = bench.relayed_messages()
            figures["raw_pipelined"].values.append(len(copies) / bench.raw_pipelined_publish(copies))
            self._progress(figures["raw_pipelined"])
            sample = min(2_000, messages)
            figures["dramatiq_enqueue"].values.append(sample / bench.dramatiq_enqueue(sample))
            self._progress(figures["dramatiq_enqueue"])
            for n in relays:
                bench.empty_the_outbox_and_queues()
                bench.publish_events(events)
                seconds = bench.drain_with_relay_processes(n, database_url=scratch.database_url)
                figures[f"relay_{n}"].values.append(messages / seconds)
                self._progress(figures[f"relay_{n}"])
            bench.empty_the_outbox_and_queues()
            latencies = bench.commit_to_handler_latency(rate=latency[0], seconds=latency[1], env=scratch.env())
            for q in (50, 99):
                figures[f"latency_p{q}"].values.append(bench.percentile(latencies, q))
                self._progress(figures[f"latency_p{q}"])
        return figures

    def _progress(self, figure: bench.Figure) -> None:
        self.stdout.write(f"  {figure.name}: {figure.values[-1]:,.1f} {figure.unit}")

    def _report(self, figures: dict[str, bench.Figure], machine: dict, results_dir: str, **conditions) -> None:
        self.stdout.write("")
        self.stdout.write(f"{'figure':<52} {'median':>10} {'min':>10} {'max':>10}  unit        vs reference")
        for figure in figures.values():
            ratio = ""
            if figure.reference:
                reference = figures[figure.reference]
                ratio = f"{figure.median / reference.median:.2f} x {reference.name.split(',')[0]}"
            self.stdout.write(
                f"{figure.name:<52} {figure.median:>10,.1f} {min(figure.values):>10,.1f} "
                f"{max(figure.values):>10,.1f}  {figure.unit:<11} {ratio}"
            )
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        path = Path(results_dir) / f"bench-{stamp}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "when": stamp,
            "machine": machine,
            "conditions": conditions,
            "figures": {k: f.as_dict() for k, f in figures.items()},
        }
        path.write_text(json.dumps(result, indent=2))
        self.stdout.write(f"written: {path}")
