import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import dramatiq
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.management.commands.runserver import naiveip_re
from django.db import connection, connections

from common.arguments import port, whole_number
from outbox.ops import describe_broker as describe
from outbox.ops import kernel_databases

# How long the workers may finish the messages in hand after SIGTERM, before they are killed.
GRACE_SECONDS = 10


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
        _refuse_a_busy_address(addr)
        db = settings.DATABASES["default"]
        self.stdout.write(f"database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}")
        self.stdout.write(f"broker:   {describe(settings.BROKER_URL)}")
        for database in settings.DATABASES:  # a context on a database of its own, and its kernel's tables there
            call_command("migrate", database=database, interactive=False, verbosity=0)
        if not settings.DEBUG:  # runserver serves static files itself only in development
            call_command("collectstatic", interactive=False, verbosity=0)
        nobody_to_log_in = not get_user_model().objects.filter(is_superuser=True).exists()
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
        admin = f"http://{_browsable(addr)}/admin/"
        if nobody_to_log_in:
            admin += " (no superuser yet: .venv/bin/python manage.py createsuperuser)"
        self.stdout.write(self.style.SUCCESS(f"running {', '.join(children)} — {admin} ; Ctrl-C stops everything"))
        stop, hurry = threading.Event(), threading.Event()

        def on_signal(*_):
            (hurry if stop.is_set() else stop).set()  # a second Ctrl-C: no more waiting

        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, on_signal)
        exited = None
        while not stop.wait(0.5):
            exited = next((name for name, child in children.items() if child.poll() is not None), None)
            if exited:
                self.stderr.write(f"{exited} exited with {children[exited].returncode}; stopping the rest")
                break
        self.stdout.write(
            f"stopping {', '.join(children)}: waiting up to {GRACE_SECONDS} s for the workers' messages in hand "
            "(one cut short is delivered again, and its handler's inbox makes that harmless); Ctrl-C again to stop now",
        )
        self.stdout.flush()
        self._stop(children, hurry)
        dramatiq.get_broker().close()  # the embedded broker's server stops with its last process: this one
        self.stdout.write("stopped")
        if exited:
            sys.exit(1)

    def _stop(self, children: dict[str, subprocess.Popen], hurry: threading.Event) -> None:
        """SIGTERM to each child; what is still running after GRACE_SECONDS (or a second Ctrl-C) is killed,
        with its whole process group: Dramatiq's worker processes outlive their main process killed alone."""
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + GRACE_SECONDS
        while any(child.poll() is None for child in children.values()):
            if hurry.wait(0.1) or time.monotonic() > deadline:
                break
        for name, child in children.items():
            if child.poll() is None:
                self.stderr.write(f"{name} did not stop{' in time' if not hurry.is_set() else ''}; killing it")
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait()

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


def _bound(addr: str) -> tuple[int, str, int]:
    """(address family, host, port) where runserver would listen for `addr` (a bare port: 127.0.0.1)."""
    found = naiveip_re.match(addr)
    host = found["addr"] or "127.0.0.1"
    if found["ipv6"]:
        return socket.AF_INET6, host.strip("[]"), int(found["port"])
    return socket.AF_INET, host, int(found["port"])


def _browsable(addr: str) -> str:
    family, host, port = _bound(addr)
    return f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"


def _refuse_a_busy_address(addr: str) -> None:
    """Something listening where the web would: refused before anything starts, not once every child has."""
    family, host, port = _bound(addr)
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As runserver does: a closed connection's TIME_WAIT is no bar.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise CommandError(
                f"cannot listen on {_browsable(addr)} ({error.strerror}): "
                f"is ./dev up running already? Stop it, or give another address with --addr HOST:PORT"
            ) from None
