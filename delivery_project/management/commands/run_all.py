import argparse
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.core.management.commands.runserver import naiveip_re
from django.db import connection, connections

from common.arguments import port, whole_number
from outbox.ops import describe_broker as describe
from outbox.ops import kernel_databases


def listening_address(text: str) -> str:
    """HOST:PORT or PORT as runserver takes them, checked before anything starts: a web process that
    cannot listen would otherwise be noticed only after migrate and every other child had started."""
    found = naiveip_re.match(text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT, e.g. 127.0.0.1:8000")
    try:
        port(found["port"])
    except argparse.ArgumentTypeError as error:
        raise argparse.ArgumentTypeError(f"the port {error}") from None
    return text


class Command(BaseCommand):
    help = (
        "Run the whole system in one terminal: migrate, then the web server, the outbox relay and the "
        "Dramatiq workers as separate processes (the same commands production runs). Ctrl-C stops all."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--addr", type=listening_address, default="127.0.0.1:8000", help="Where the web server listens."
        )
        parser.add_argument("--relays", type=whole_number(at_least=1), default=1, help="Relay processes.")
        parser.add_argument("--processes", type=whole_number(at_least=1), default=1, help="Worker processes.")
        parser.add_argument("--threads", type=whole_number(at_least=1), default=4, help="Threads per worker process.")

    def handle(self, *, addr, relays, processes, threads, verbosity, **options):
        db = settings.DATABASES["default"]
        self.stdout.write(f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}")
        self.stdout.write(f"broker:   {describe(settings.BROKER_URL)}")
        for database in settings.DATABASES:  # a context on a database of its own, and its kernel's tables there
            call_command("migrate", database=database, interactive=False, verbosity=0)
        if not settings.DEBUG:  # runserver serves static files itself only in development
            call_command("collectstatic", interactive=False, verbosity=0)
        # This supervisor needs no connection while its children run: not even an idle pooled one.
        connections.close_all()
        if hasattr(connection, "close_pool") and connection.pool:
            connection.close_pool()
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        commands = {
            "web": [*manage, "runserver", addr, "--noreload"],
            **{f"relay-{i + 1}": [*manage, "relay_outbox"] for i in range(relays)},
            **{  # one relay (or several) for each database a context was put on: its outbox, its LISTEN
                f"relay-{database}-{i + 1}": [*manage, "relay_outbox", "--database", database]
                for database in kernel_databases()[1:]
                for i in range(relays)
            },
            "workers": [*manage, "rundramatiq", "--processes", str(processes), "--threads", str(threads)],
        }
        # Every child writes its metrics to one fresh directory, so the web's /metrics sums them all.
        shared = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": self._fresh_metrics_directory()}
        # runserver handles each request on a thread of its own: a persistent connection would outlive it.
        env = {name: shared for name in commands} | {"web": {**shared, "DJANGO_CONN_MAX_AGE": "0"}}
        if not urlsplit(settings.BROKER_URL).scheme.startswith("amqp"):
            # Dramatiq's Redis consumer polls an empty queue with a backoff that grows to the
            # worker timeout (1 s): every hop of a quiet system would wait for it. RabbitMQ pushes.
            env["workers"] = {"dramatiq_worker_timeout": "100", **shared}
        # Own sessions: a terminal's Ctrl-C reaches only this command, which stops each child once.
        children = {
            name: subprocess.Popen(cmd, start_new_session=True, env=env.get(name)) for name, cmd in commands.items()
        }
        self.stdout.write(
            self.style.SUCCESS(f"running {', '.join(children)} — http://{addr}/admin/ ; Ctrl-C stops everything")
        )
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        exited = None
        while not stop.wait(0.5):
            exited = next((name for name, child in children.items() if child.poll() is not None), None)
            if exited:
                self.stderr.write(f"{exited} exited with {children[exited].returncode}; stopping the rest")
                break
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for name, child in children.items():
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.stderr.write(f"{name} did not stop in 20 s; killing it")
                child.kill()
        if exited:
            sys.exit(1)

    @staticmethod
    def _fresh_metrics_directory() -> str:
        """The operator's PROMETHEUS_MULTIPROC_DIR as it is; else var/metrics, emptied, since the
        counters of an earlier run would add up."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            return os.environ["PROMETHEUS_MULTIPROC_DIR"]
        directory = Path(settings.VAR_DIR) / "metrics"
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        return str(directory)
