import contextlib
import json
import signal
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.arguments import comma_separated, number, whole_number
from drones.services import seed_fleet
from harness import (
    bench,
    bench_floors,
    bench_processes,
    bench_sweep,
    bench_webhooks,
    handler_cpu,
    message_cost,
    statement_counts,
)
from harness.scratch import scratch_run

# The sweep at load: events a second (five times the system's end-to-end rate), behind a backlog.
SWEEP_LOAD, SWEEP_BACKLOG = 1_000, 20_000


class Command(BaseCommand):
    help = (
        "Measure the relay and publish() on PostgreSQL + RabbitMQ, each figure the median of several runs "
        "(min, max) beside its reference measured in the same run; print a table and write JSON."
    )
    requires_system_checks = []

    def add_arguments(self, parser):
        # Checked as they are parsed: zero runs, or zero relay processes, would fail only at the end
        # (a median of nothing, a rate over no time), after minutes of measuring.
        count, optional_count, positive = whole_number(at_least=1), whole_number(at_least=0), number(above=0)
        parser.add_argument("--events", type=count, default=10_000, help="Events a relay figure drains.")
        parser.add_argument("--runs", type=count, default=3, help="Runs of each figure (the median is reported).")
        parser.add_argument(
            "--relays", type=comma_separated(count), default="1,2,4", help="Relay process counts to measure."
        )
        parser.add_argument(
            "--latency-rates",
            type=comma_separated(positive),
            default="10,50,100,200",
            help="Offered loads (events a second, one per transaction) at which latency is measured.",
        )
        parser.add_argument("--latency-seconds", type=positive, default=30.0)
        parser.add_argument(
            "--api-workers", type=count, default=2, help="gunicorn worker processes for the API figure."
        )
        parser.add_argument("--api-threads", type=count, default=4, help="Threads per gunicorn worker (gthread).")
        parser.add_argument(
            "--api-clients", type=optional_count, default=16, help="Customers posting at once (0: skip the API)."
        )
        parser.add_argument("--api-seconds", type=positive, default=20.0)
        parser.add_argument(
            "--deliveries", type=optional_count, default=2000, help="Deliveries for the end-to-end figure (0: skip it)."
        )
        parser.add_argument("--drones", type=count, default=2000, help="Fleet for the end-to-end figure.")
        parser.add_argument(
            "--embedded-deliveries",
            type=optional_count,
            default=20,
            help="Deliveries for the embedded default's per-hop latency (0: skip it).",
        )
        parser.add_argument(
            "--handler-deliveries",
            type=optional_count,
            default=30,
            help="Deliveries whose handler executions are timed in one process, each run (0: skip it).",
        )
        parser.add_argument(
            "--worker-messages",
            type=optional_count,
            default=1000,
            help="Messages of one handler timed in one process and again through the workers, each run (0: skip it).",
        )
        parser.add_argument(
            "--webhook-messages",
            type=optional_count,
            default=1000,
            help="Webhook messages sent through webhooks.services.attempt, each run, beside as many bare POSTs; "
            "with --handler-deliveries, also what a webhook adds to a delivery's CPU (0: skip them).",
        )
        parser.add_argument("--embedded-rate", type=positive, default=2.0, help="Their requests a second.")
        parser.add_argument(
            "--history",
            type=optional_count,
            default=1_000_000,
            help="Settled outbox and inbox rows the scale figures are measured beside (0: skip them).",
        )
        parser.add_argument(
            "--sweep-seconds", type=positive, default=12.0, help="How long the sweep's lag is measured under load."
        )
        parser.add_argument("--results-dir", default=str(Path(settings.BASE_DIR) / "bench" / "results"))

    def handle(self, *, events, runs, relays, results_dir, latency_rates, latency_seconds, history, **options):
        api = {k: options[f"api_{k}"] for k in ("workers", "threads", "clients", "seconds")}
        if not urlsplit(settings.BROKER_URL).scheme.startswith("amqp"):
            raise CommandError("bench measures against RabbitMQ: set BROKER_URL=amqp://...")
        sys.stdout.reconfigure(line_buffering=True)
        # Stopped (Ctrl-C, or SIGTERM when run in the background, where SIGINT is ignored), it
        # still stops the processes it started and drops its database and queues.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit("bench stopped by SIGTERM"))
        figures = {}
        try:
            with scratch_run("bench") as scratch:
                settings.OUTBOX_QUEUE_PREFIX = scratch.queue_prefix
                machine = bench.machine()
                self.stdout.write(f"machine: {machine}")
                figures = self._measure_statements()
                webhooks = options["webhook_messages"]
                with bench_webhooks.receiver() if webhooks else contextlib.nullcontext() as webhook_url:
                    if options["handler_deliveries"]:
                        figures |= self._measure_handler_cpu(
                            runs=runs, deliveries=options["handler_deliveries"], webhook_url=webhook_url
                        )
                    if webhooks:
                        figures |= self._measure_webhook_sends(webhook_url, runs=runs, messages=webhooks)
                if options["worker_messages"]:
                    figures |= self._measure_message_cost(scratch, runs=runs, messages=options["worker_messages"])
                figures |= self._measure(
                    scratch,
                    events=events,
                    runs=runs,
                    relays=relays,
                    latency=(latency_rates, latency_seconds),
                    sweep_seconds=options["sweep_seconds"],
                )
                if api["clients"]:
                    figures.update(self._measure_api(scratch, runs=runs, **api))
                if options["deliveries"]:
                    figures.update(
                        self._measure_end_to_end(
                            scratch, runs=runs, deliveries=options["deliveries"], drones=options["drones"]
                        )
                    )
                if history:
                    figures.update(self._measure_scale(history=history, runs=max(runs, 5)))
                if options["embedded_deliveries"]:
                    figures.update(
                        self._measure_embedded(
                            runs=runs, deliveries=options["embedded_deliveries"], rate=options["embedded_rate"]
                        )
                    )
        except RuntimeError as error:
            raise CommandError(str(error)) from error
        self._report(
            figures,
            machine,
            results_dir,
            events=events,
            runs=runs,
            latency_rates=",".join(f"{rate:g}" for rate in latency_rates),  # as typed, "10,50,100,200"
            latency_s=latency_seconds,
            history=history,
            api=api,
            end_to_end={"deliveries": options["deliveries"], "drones": options["drones"]},
            embedded={"deliveries": options["embedded_deliveries"], "rate": options["embedded_rate"]},
            webhook_messages=options["webhook_messages"],
        )

    def _measure(
        self, scratch, *, events: int, runs: int, relays: list[int], latency, sweep_seconds: float
    ) -> dict[str, bench.Figure]:
        messages = 2 * events
        figures = {
            "raw_pipelined": bench.Figure("raw pika, pipelined confirms (reference)", "messages/s"),
            "dramatiq_enqueue": bench.Figure("Dramatiq enqueue, one confirm at a time (reference)", "messages/s"),
            **{
                f"relay_{n}": bench.Figure(f"relay, {n} process(es)", "messages/s", reference="raw_pipelined")
                for n in relays
            },
            "publish_bare": bench.Figure(
                "publish()'s statement from bare psycopg (reference)", "events/s", note="500 a transaction"
            ),
            "publish": bench.Figure(
                "publish(), 500 events a transaction",
                "events/s",
                reference="publish_bare",
                note="delivery.requested, ~800 B",
            ),
            "sweep": bench.Figure(
                "sweep, settling acknowledged copies",
                "messages/s",
                reference=f"relay_{relays[0]}",
                note="2 copies a row",
            ),
            "sweep_lag": bench.Figure(
                f"sweep's largest lag, {SWEEP_LOAD:,} events/s behind {SWEEP_BACKLOG:,} (2 s grace)", "s"
            ),
            **{
                f"{to}_p{q}_at_{rate:g}": bench.Figure(f"commit to {to} p{q} at {rate:g} events/s", "ms")
                for rate in latency[0]
                for to in ("handler", "confirmed")
                for q in (50, 99)
            },
        }
        for run in range(1, runs + 1):
            self.stdout.write(f"run {run}/{runs}")
            bench.empty_the_outbox_and_queues()
            figures["publish"].values.append(events / bench.publish_events(events))
            self._progress(figures["publish"])
            figures["publish_bare"].values.append(events / bench_floors.bare_psycopg_publish(events))
            self._progress(figures["publish_bare"])
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
            figures["sweep"].values.append(messages / bench_sweep.sweep_settling(events))
            self._progress(figures["sweep"])
            lag = bench_sweep.sweep_lag_at_load(rate=SWEEP_LOAD, seconds=sweep_seconds, backlog=SWEEP_BACKLOG)
            figures["sweep_lag"].values.append(lag)
            self._progress(figures["sweep_lag"])
            for rate in latency[0]:
                bench.empty_the_outbox_and_queues()
                latencies = bench.commit_to_handler_latency(rate=rate, seconds=latency[1], env=scratch.env())
                for to in ("handler", "confirmed"):
                    for q in (50, 99):
                        figure = figures[f"{to}_p{q}_at_{rate:g}"]
                        figure.values.append(bench.percentile(getattr(latencies, f"to_{to}"), q))
                        if to == "handler" and latencies.unhandled:
                            figure.note = f"a lower bound: {latencies.unhandled} events unhandled after 300 s"
                        self._progress(figure)
        return figures

    def _measure_api(self, scratch, *, runs: int, workers, threads, clients, seconds) -> dict[str, bench.Figure]:
        server = f"gunicorn {workers} workers x {threads} threads, {clients} clients"
        figures = {
            "api_floor": bench.Figure(f"GET /healthz, Django's floor (reference; {server})", "requests/s"),
            "healthz_cpu": bench.Figure("server CPU of one GET /healthz (reference; gunicorn, from /proc)", "ms"),
            "api_accepted": bench.Figure(
                f"POST /api/deliveryrequests accepted ({server})", "requests/s", reference="api_floor"
            ),
            "api_p50": bench.Figure("POST /api/deliveryrequests p50", "ms"),
            "api_p99": bench.Figure("POST /api/deliveryrequests p99", "ms"),
        }
        for _ in range(runs):
            floor, load = bench_processes.api_load(
                workers=workers, threads=threads, clients=clients, seconds=seconds, env=scratch.env()
            )
            figures["api_floor"].values.append(floor.accepted_per_second)
            figures["healthz_cpu"].values.append(floor.server_cpu_ms_per_answer)
            if load.refused or floor.refused:
                self.stdout.write(f"  /healthz answers other than 200 (status: count): {floor.refused}")
                self.stdout.write(f"  answers other than 202 (status: count): {load.refused}")
            figures["api_accepted"].values.append(load.accepted_per_second)
            figures["api_p50"].values.append(bench.percentile(load.milliseconds, 50))
            figures["api_p99"].values.append(bench.percentile(load.milliseconds, 99))
            for figure in figures.values():
                self._progress(figure)
        return figures

    def _measure_end_to_end(self, scratch, *, runs: int, deliveries: int, drones: int) -> dict[str, bench.Figure]:
        setup = f"{deliveries:,} deliveries, {drones:,} drones, instant flights"
        figures = {
            "commit_ceiling": bench.Figure(
                "one-row commits/s / handler executions per delivery (reference)", "deliveries/s"
            ),
            "end_to_end": bench.Figure(
                f"delivered per second, end to end ({setup})", "deliveries/s", reference="commit_ceiling"
            ),
            "handler_runs": bench.Figure("handler executions per delivery", "runs"),
            "copies_per_pack": bench.Figure("copies for one queue per relay claim (a pack)", "copies"),
            "transactions": bench.Figure("transactions committed per delivery, every process", "transactions"),
            # Judged in /healthz units when the API was measured in the same run.
            "cpu_per_delivery": bench.Figure("CPU per delivery, every process together", "ms", reference="healthz_cpu"),
            "worker_rss_growth": bench.Figure("worker processes' resident memory growth", "MB"),
        }
        for _ in range(runs):
            commits = bench_floors.one_row_commits()
            result = bench_processes.end_to_end(deliveries=deliveries, drones=drones, env=scratch.env())
            figures["end_to_end"].values.append(result.delivered_per_second)
            figures["handler_runs"].values.append(result.handler_runs / result.requested)
            figures["copies_per_pack"].values.append(result.copies_per_pack)
            figures["transactions"].values.append(result.transactions / result.requested)
            figures["commit_ceiling"].values.append(commits / figures["handler_runs"].values[-1])
            figures["commit_ceiling"].note = f"last run: {commits:,.0f} one-row commits/s"
            delivered = max(result.delivered, 1)
            figures["cpu_per_delivery"].values.append(1000 * sum(result.cpu.values()) / delivered)
            for kind, seconds in result.cpu.items():
                key = "cpu_" + kind.split()[0].lower()
                figures.setdefault(key, bench.Figure(f"  of which {kind}", "ms")).values.append(
                    1000 * seconds / delivered
                )
            figures["end_to_end"].note = f"last run: {result.delivered:,} of {result.requested:,} delivered"
            (handled_then, rss_then), (handled_now, rss_now) = result.worker_rss
            figures["worker_rss_growth"].values.append(rss_now - rss_then)
            figures["worker_rss_growth"].note = (
                f"last run: {rss_then:.0f} MB after {handled_then:,} handler runs, "
                f"{rss_now:.0f} MB after {handled_now:,}"
            )
            for figure in figures.values():
                self._progress(figure)
        return figures

    def _measure_statements(self) -> dict[str, bench.Figure]:
        """Statements of one delivery's happy path, driven synchronously (harness.statement_counts)."""
        seed_fleet(count=3, latitude=bench.BASE[0], longitude=bench.BASE[1])
        counted = statement_counts.one_delivery()
        self.statements = {f"{subscriber} {event_type}": n for (subscriber, event_type), n in counted.handlers.items()}
        self.stdout.write("statements per handler execution (happy path):")
        for (subscriber, event_type), statements in counted.handlers.items():
            runs = counted.runs[(subscriber, event_type)]
            self.stdout.write(
                f"  {subscriber:<14} {event_type:<26} {statements:>3}" + (f"  x {runs}" if runs > 1 else "")
            )
        figures = {
            "statements_request": bench.Figure("statements per accepted POST /api/deliveryrequests", "statements"),
            "statements_delivery": bench.Figure(
                f"statements per delivery, its {counted.executions} handler executions", "statements"
            ),
        }
        figures["statements_request"].values.append(len(counted.request))
        figures["statements_delivery"].values.append(counted.per_delivery)
        for figure in figures.values():
            self._progress(figure)
        return figures

    def _measure_handler_cpu(
        self, *, runs: int, deliveries: int, webhook_url: str | None = None
    ) -> dict[str, bench.Figure]:
        """A delivery's handler executions timed in one process (harness.handler_cpu), beside one
        in-process GET /healthz: the handler path alone, without the relay, the broker and Dramatiq.
        With `webhook_url`, the same again with an endpoint there wanting every status: the difference."""
        setup = f"in one process, median of {deliveries} deliveries"
        figures = {
            "healthz_in_process": bench.Figure("GET /healthz in process, CPU (reference)", "ms"),
            "handler_cpu_python": bench.Figure(
                f"a delivery's handler executions, this process's CPU ({setup})", "ms", reference="healthz_in_process"
            ),
            "handler_cpu_database": bench.Figure(
                f"a delivery's handler executions, its PostgreSQL backend's CPU ({setup})",
                "ms",
                reference="healthz_in_process",
            ),
            "handler_cpu_total": bench.Figure(
                f"a delivery's handler executions, both CPUs, no webhook ({setup})",
                "ms",
                reference="healthz_in_process",
            ),
        }
        if webhook_url:
            figures["webhook_delivery_cpu"] = bench.Figure(
                "added by one endpoint wanting every status, both CPUs", "ms", reference="handler_cpu_total"
            )
        for run in range(runs):
            figures["healthz_in_process"].values.append(handler_cpu.healthz_ms())
            # Alternated, neither side always second; one warm-up delivery for the webhook's own
            # paths (the first run's no-webhook side warmed the rest), to keep the test's run short.
            hooked = None
            if webhook_url and run % 2:
                hooked = handler_cpu.measure(deliveries=deliveries, warm_up=1, webhook_url=webhook_url)
            measured = handler_cpu.measure(deliveries=deliveries)
            if webhook_url and not run % 2:
                hooked = handler_cpu.measure(deliveries=deliveries, warm_up=1, webhook_url=webhook_url)
            figures["handler_cpu_python"].values.append(statistics.median(measured.python_ms))
            figures["handler_cpu_database"].values.append(statistics.median(measured.database_ms))
            figures["handler_cpu_total"].values.append(statistics.median(measured.total_ms))
            if hooked:
                added = {
                    side: statistics.median(getattr(hooked, side)) - statistics.median(getattr(measured, side))
                    for side in ("python_ms", "database_ms", "total_ms")
                }
                figures["webhook_delivery_cpu"].values.append(added["total_ms"])
                figures["webhook_delivery_cpu"].note = (
                    f"{statistics.median(hooked.webhook_sends):g} webhook sends a delivery; last run: "
                    f"{added['python_ms']:+.1f} ms this process, {added['database_ms']:+.1f} ms its backend"
                )
        self.handler_cpu = {f"{s} {t}": list(times) for (s, t), times in measured.by_handler.items()}
        self.stdout.write("CPU of one handler execution, in one process, last run (ms: Python, PostgreSQL):")
        for (subscriber, event_type), (python, database) in measured.by_handler.items():
            self.stdout.write(f"  {subscriber:<14} {event_type:<26} {python:>6.2f} {database:>6.2f}")
        if hooked:
            self.stdout.write("  with a webhook endpoint, the webhooks subscriber's:")
            for (subscriber, event_type), (python, database) in hooked.by_handler.items():
                if subscriber == "webhooks":
                    self.stdout.write(f"  {subscriber:<14} {event_type:<26} {python:>6.2f} {database:>6.2f}")
        for figure in figures.values():
            self._progress(figure)
        return figures

    def _measure_webhook_sends(self, url: str, *, runs: int, messages: int) -> dict[str, bench.Figure]:
        """Webhook messages attempted in this process (harness.bench_webhooks), beside bare POSTs of
        the same bodies to the same receiver, answering 200 at once."""
        setup = f"{messages:,} messages, one at a time, to a receiver on 127.0.0.1"
        figures = {
            "webhook_posts_bare": bench.Figure(
                "bare http.client POSTs, a connection each (reference)", "requests/s", note=setup
            ),
            "webhook_sends": bench.Figure(
                "webhook sends, webhooks.services.attempt in process",
                "sends/s",
                reference="webhook_posts_bare",
                note=setup,
            ),
        }
        for _ in range(runs):
            sends, bare = bench_webhooks.sends_per_second(url, messages=messages)
            figures["webhook_posts_bare"].values.append(bare)
            figures["webhook_sends"].values.append(sends)
            for figure in figures.values():
                self._progress(figure)
        return figures

    def _measure_message_cost(self, scratch, *, runs: int, messages: int) -> dict[str, bench.Figure]:
        """One handler's messages dispatched in this process, and as many through RabbitMQ and the
        workers (harness.message_cost): what a worker adds to every message, whatever the handler."""
        setup = f"packages' delivery.requested, {messages:,} messages each way"
        figures = {
            "message_in_process": bench.Figure(
                "a message dispatched in process, CPU with its backend's (reference)", "ms", note=setup
            ),
            "message_in_process_python": bench.Figure("  of which this process", "ms"),
            "message_in_process_database": bench.Figure("  of which its backend", "ms"),
            "message_through_workers": bench.Figure(
                "the same through RabbitMQ and 2 workers, all CPU", "ms", reference="message_in_process", note=setup
            ),
            "message_workers": bench.Figure("  of which the workers", "ms"),
            "message_database": bench.Figure("  of which PostgreSQL", "ms"),
            "message_broker": bench.Figure("  of which RabbitMQ", "ms"),
        }
        for _ in range(runs):
            cost = message_cost.measure(messages=messages, env=scratch.env())
            figures["message_in_process"].values.append(cost.in_process)
            figures["message_in_process_python"].values.append(cost.in_process_python)
            figures["message_in_process_database"].values.append(cost.in_process_database)
            figures["message_through_workers"].values.append(cost.through_workers)
            figures["message_workers"].values.append(cost.workers)
            figures["message_database"].values.append(cost.database)
            figures["message_broker"].values.append(cost.broker)
            for figure in figures.values():
                self._progress(figure)
        return figures

    def _measure_embedded(self, *, runs: int, deliveries: int, rate: float) -> dict[str, bench.Figure]:
        setup = f"{deliveries} deliveries at {rate:g}/s"
        figures = {
            f"embedded_hop_p{q}": bench.Figure(f"embedded default, publish to handler p{q} per hop ({setup})", "ms")
            for q in (50, 99)
        }
        for _ in range(runs):
            hops = bench_processes.embedded_hop_milliseconds(deliveries=deliveries, rate=rate)
            for q in (50, 99):
                figures[f"embedded_hop_p{q}"].values.append(bench.percentile(hops, q))
                figures[f"embedded_hop_p{q}"].note = f"last run: {len(hops)} hops"
                self._progress(figures[f"embedded_hop_p{q}"])
        return figures

    def _measure_scale(self, *, history: int, runs: int) -> dict[str, bench.Figure]:
        """Claim and handler time with an empty history and beside `history` settled rows, then pruning them."""
        label = f"{history:,} settled rows"
        figures = {
            "claim_empty": bench.Figure("claim 1,000 due rows, empty tables", "ms"),
            "claim_history": bench.Figure(f"claim 1,000 due rows beside {label}", "ms", reference="claim_empty"),
            "handler_empty": bench.Figure("handle delivery.requested (packages), empty tables", "ms"),
            "handler_history": bench.Figure(
                f"handle delivery.requested (packages) beside {label}", "ms", reference="handler_empty"
            ),
            "prune": bench.Figure(f"prune_messages on {2 * history:,} rows (outbox + inbox)", "rows/s"),
        }
        for case in ("empty", "history"):
            bench.empty_the_outbox_and_queues()
            if case == "history":
                self.stdout.write(f"writing {label} (outbox and inbox)...")
                bench.fill_history(history)
            figures[f"claim_{case}"].values.extend(bench.claim_milliseconds(batches=runs))
            self._progress(figures[f"claim_{case}"])
            for _ in range(runs):
                figures[f"handler_{case}"].values.append(statistics.mean(bench.handler_milliseconds(count=40)))
            self._progress(figures[f"handler_{case}"])
        self.stdout.write("pruning them...")
        deleted, seconds = bench.prune_history()
        figures["prune"].values.append(deleted / seconds)
        figures["prune"].note = f"{deleted:,} rows deleted in {seconds:.1f} s, batches of 5,000"
        self._progress(figures["prune"])
        return figures

    def _progress(self, figure: bench.Figure) -> None:
        self.stdout.write(f"  {figure.name}: {figure.values[-1]:,.1f} {figure.unit}")

    def _report(self, figures: dict[str, bench.Figure], machine: dict, results_dir: str, **conditions) -> None:
        self.stdout.write("")
        self.stdout.write(f"{'figure':<52} {'median':>10} {'min':>10} {'max':>10}  unit        vs reference")
        for figure in figures.values():
            ratio = ""
            if figure.reference not in figures:  # not measured in this run (--api-clients 0, say)
                figure.reference = None
            if figure.reference:
                reference = figures[figure.reference]
                ratio = f"{figure.median / reference.median:.2f} x {figure.reference}"
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
            "statements_per_handler": getattr(self, "statements", {}),
            "handler_cpu_ms": getattr(self, "handler_cpu", {}),  # one execution, median: [this process, PostgreSQL]
            "figures": {k: f.as_dict() for k, f in figures.items()},
        }
        path.write_text(json.dumps(result, indent=2))
        self.stdout.write(f"written: {path}")
        if bench.plot_latency(result["figures"], path.with_suffix(".png")):
            self.stdout.write(f"latency plot: {path.with_suffix('.png')}")
