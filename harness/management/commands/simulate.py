import argparse
import random
import threading
import time
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import urlsplit
from uuid import uuid4

import dramatiq
from django.core.management.base import BaseCommand, CommandError
from django.db import connection

try:  # the workshop's own dependencies, in the dev extra: a production install (`pip install .`) lacks them
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
except ImportError as missing:
    WITHOUT = (missing.name or "rich").split(".")[0]  # handle() says what to install
else:
    WITHOUT = None

from common.arguments import number, whole_number
from deliveries.customers import create_customer
from drones.models import Drone
from drones.services import seed_fleet
from harness import simulation
from outbox.management.pipes import QuietWhenStdoutCloses
from outbox.relaying.relay import Relay


def base_url(text: str) -> str:
    """http:// or https:// and a host: `127.0.0.1:8000` alone would reach urllib as an unknown scheme."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http:// or https:// URL, e.g. http://127.0.0.1:8000")
    return text


PIPED_PROGRESS_SECONDS = 10.0


class Command(QuietWhenStdoutCloses, BaseCommand):
    help = (
        "Submit N delivery requests through the customer API, wait until every delivery is terminal, and print "
        "counts per status and p50/p95 time from request to a drone and to delivered. With --url it talks to a "
        "running server (start one with ./dev up); without, it runs the API, a relay and a worker in this process. "
        "--plot FILE.png draws the deliveries waiting, in flight and delivered over time."
    )

    def add_arguments(self, parser):
        count = whole_number(at_least=1)
        parser.add_argument("--deliveries", type=count, default=100)
        parser.add_argument("--url", type=base_url, help="Base URL of a running server, e.g. http://127.0.0.1:8000")
        parser.add_argument("--drones", type=count, default=20, help="Fleet to seed if there is none.")
        parser.add_argument(
            "--rate", type=number(at_least=0), default=0, help="Requests per second (0: as fast as possible)."
        )
        parser.add_argument("--concurrency", type=count, default=8, help="Requests in flight at once.")
        parser.add_argument(
            "--timeout", type=number(above=0, at_most=86_400), default=600, help="Seconds to wait for terminal states."
        )
        parser.add_argument("--seed", type=int, default=7, help="Random seed for the generated requests.")
        parser.add_argument("--plot", help="Write a PNG of deliveries per status over time to this file.")

    def handle(self, *, deliveries, url, drones, rate, concurrency, timeout, seed, plot, verbosity, **options):
        # What could only fail at the end, or leave a customer behind, is checked before anything is made.
        missing = [name for name in (WITHOUT, "matplotlib" if plot and not find_spec("matplotlib") else None) if name]
        if missing:
            raise CommandError(
                f"simulate is a workshop tool and needs {' and '.join(missing)}: install the dev extra "
                "(pip install '.[dev]', or -e '.[dev]' from a checkout)"
            )
        if plot and not Path(plot).resolve().parent.is_dir():
            raise CommandError(f"--plot {plot}: there is no directory {Path(plot).resolve().parent}")
        if url:
            try:
                simulation.check_server(url)
            except simulation.ServerUnusable as error:
                raise CommandError(str(error)) from error
        base = (47.6205, -122.3493)
        if not Drone.objects.exists():
            seed_fleet(count=drones, latitude=base[0], longitude=base[1])
        _, token = create_customer(name=f"simulator-{uuid4().hex[:8]}")
        api = simulation.Api(token=token, url=url)
        stop = threading.Event()
        background = [] if url else self._run_relay_and_worker(stop)
        rng = random.Random(seed)
        requests = [
            simulation.random_request(rng, latitude=base[0], longitude=base[1], radius_km=3) for _ in range(deliveries)
        ]
        began, history = time.monotonic(), []
        try:
            with self._progress(verbosity) as progress:
                ids = simulation.submit(
                    api,
                    requests,
                    concurrency=concurrency,
                    rate=rate,
                    progress=self._bar(progress, "submitted", deliveries, began),
                )
                finished = simulation.wait_until_terminal(
                    api,
                    count=len(ids),
                    timeout=timeout,
                    progress=self._bar(progress, "terminal", deliveries, began),
                    history=history,
                    began=began,
                )
        except OSError as error:  # the server went away
            raise CommandError(f"lost {url or 'the API'}: {simulation.cause_of(error)}") from error
        except RuntimeError as error:  # a request answered an error: its page, on one line
            raise CommandError(" ".join(str(error).split())) from error
        finally:
            stop.set()
            for stopper in background:
                stopper()
        self.stdout.write("\n".join(simulation.summary(finished)))
        self.stdout.write(f"elapsed {time.monotonic() - began:.1f} s")
        if plot:
            fleet = Drone.objects.count()
            simulation.plot(history, plot, title=f"simulate --deliveries {deliveries}, {fleet} drones")
            self.stdout.write(f"plot written to {plot}")
        unfinished = sum(d["status"] not in simulation.TERMINAL for d in finished)
        if unfinished:
            raise CommandError(f"{unfinished} deliveries were not terminal after {timeout:.0f} s")

    def _run_relay_and_worker(self, stop: threading.Event) -> list:
        worker = dramatiq.Worker(dramatiq.get_broker(), worker_threads=4, worker_timeout=100)
        worker.start()

        def relay():
            try:
                Relay().run(stop=stop)
            finally:
                connection.close()

        thread = threading.Thread(target=relay, daemon=True)
        thread.start()
        return [lambda: thread.join(10), lambda: worker.stop(timeout=10_000)]

    def _progress(self, verbosity: int) -> "Progress":
        """Bars redrawn in place on a terminal; into a pipe or a log none (`_bar` writes plain lines there)."""
        console = Console(file=self.stdout._out, quiet=not verbosity)
        columns = [TextColumn("{task.description:<9}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()]
        return Progress(*columns, console=console, disable=not console.is_terminal)

    def _bar(self, progress: "Progress", label: str, total: int, began: float):
        """The bar's update; into a pipe or a log, instead, a plain line every PIPED_PROGRESS_SECONDS and
        one when all are done, so a run minutes long says where it is."""
        task, last = progress.add_task(label, total=total), [time.monotonic()]
        plain = not progress.console.is_terminal and not progress.console.quiet

        def update(done: int) -> None:
            progress.update(task, completed=done)
            now = time.monotonic()
            if plain and (now - last[0] >= PIPED_PROGRESS_SECONDS or done == total):
                last[0] = now
                self.stdout.write(f"{label}: {done:,} of {total:,} after {now - began:.0f} s")

        return update
