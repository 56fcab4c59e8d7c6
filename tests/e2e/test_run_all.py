"""`./dev up` (run_all): web, relay and workers as processes that serve requests and stop together."""

import signal
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from django.db import connection

from outbox.models import InboxMessage
from tests.e2e.test_embedded import descendants, kill
from tests.factories import Customer
from tests.processes import (
    MANAGE,  # noqa: F401 (fixture)
    a_free_port,
    answers,
    post_delivery_request,
)
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def connections_to_this_database() -> int:
    """Other sessions on the test database (this sampler's own not counted)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


class ConnectionSampler(threading.Thread):
    """Counts the database's connections every 50 ms while a burst runs; `peak` is the most seen."""

    def __init__(self):
        super().__init__(daemon=True)
        self.stop, self.peak, self.samples = threading.Event(), 0, 0

    def run(self):
        try:
            while not self.stop.wait(0.05):
                self.peak, self.samples = max(self.peak, connections_to_this_database()), self.samples + 1
        finally:
            connection.close()


POOL, WORKER_PROCESSES, THREADS = 4, 2, 8


def test_run_all_under_a_burst_keeps_connections_within_the_pools_and_stops_on_ctrl_c(env, tmp_path):
    port, token = a_free_port(), Customer("alice").token
    log = (tmp_path / "run_all.log").open("w")
    system = subprocess.Popen(
        [
            *MANAGE,
            "run_all",
            "--addr",
            f"127.0.0.1:{port}",
            "--processes",
            str(WORKER_PROCESSES),
            "--threads",
            str(THREADS),
        ],
        env={**env, "DJANGO_DB_POOL_MAX_SIZE": str(POOL)},
        # A file, not a pipe read only at the end: every handled message logs a line, and once a
        # pipe's buffer is full every child blocks on its next line (the web on its access log).
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    sampler = ConnectionSampler()
    try:
        url = f"http://127.0.0.1:{port}/api/deliveries"
        wait_until(lambda: answers(url, token) == 200, timeout=60, what="the web server to answer")
        if connection.vendor == "postgresql":  # pg_stat_activity: SQLite has no connections to count
            sampler.start()
        with ThreadPoolExecutor(max_workers=16) as pool:
            created = list(pool.map(lambda _: post_delivery_request(port, token), range(160)))
            # As long as a POST may take: on SQLite a reader can wait behind the workers' writes.
            listed = list(pool.map(lambda _: answers(url, token, timeout=30), range(160)))
        assert created == [202] * 160
        assert listed == [200] * 160
        # Every delivery request sets the choreography going in the workers' 16 threads meanwhile.
        wait_until(lambda: delivery_requests_handled() == 160, timeout=60, what="the workers to handle all 160")
        # The web's /metrics sums the counters of every child (multiprocess mode): the relay's
        # sends and the worker processes' handling, which happened in processes other than the web.
        relayed, handled = wait_until(
            lambda: counted(port, 160), timeout=30, what="/metrics to count the relay's and workers' work"
        )
        assert relayed >= 160 and handled >= 160
    finally:
        sampler.stop.set()
        # Ctrl-C even when an assertion failed: run_all stops its children, which a kill would orphan.
        system.send_signal(signal.SIGINT)
        try:
            system.wait(timeout=60)
        finally:
            system.kill()
            log.close()
    output = (tmp_path / "run_all.log").read_text()
    assert system.returncode == 0, output
    assert "running web, relay-1, workers" in output
    if connection.vendor == "postgresql":
        sampler.join(5)
        # web + relay + 2 worker processes, each with its own pool, + the relay's LISTEN connection
        # + this test's own; without pools: a connection per worker thread and per request thread.
        budget = (1 + 1 + WORKER_PROCESSES) * POOL + 1 + 1
        assert sampler.samples > 10
        assert 0 < sampler.peak <= budget, f"{sampler.peak} connections at the peak, budget {budget}"


def delivery_requests_handled() -> int:
    return InboxMessage.objects.filter(subscriber="packages", type="delivery.requested").count()


def counted(port: int, at_least: int) -> tuple[float, float] | None:
    """delivery.requested relayed, and handled by the drones context, as the web's /metrics sums them."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    relayed = handled = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "outbox_relayed_events_total" and labels.get("event_type") == "delivery.requested":
                relayed += sample.value
            if (
                sample.name == "outbox_handled_messages_total"
                and labels.get("subscriber") == "drones"
                and labels.get("event_type") == "delivery.requested"
                and labels.get("outcome") == "processed"
            ):
                handled += sample.value
    return (relayed, handled) if relayed >= at_least and handled >= at_least else None


@pytest.mark.embedded
def test_ctrl_c_says_at_once_that_it_is_stopping_then_stops_every_child_and_says_stopped(embedded_env, tmp_path):
    log_file, port = tmp_path / "run_all.log", a_free_port()
    with log_file.open("w") as log:
        system = subprocess.Popen(
            [*MANAGE, "run_all", "--addr", f"127.0.0.1:{port}"], env=embedded_env, stdout=log, stderr=subprocess.STDOUT
        )
    lines = lambda: log_file.read_text().splitlines()  # noqa: E731
    try:
        banner = wait_until(
            lambda: next((line for line in lines() if line.startswith("running ")), None),
            timeout=120,
            what="run_all's banner",
        )
        # No superuser yet in a fresh database: the banner says how to make one beside the admin's link.
        assert (
            f"http://127.0.0.1:{port}/admin/ (no superuser yet: .venv/bin/python manage.py createsuperuser)" in banner
        )
        children = descendants(system.pid)
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/admin/login/") == 200, timeout=60, what="the web")

        system.send_signal(signal.SIGINT)
        stopping = wait_until(
            lambda: next((line for line in lines() if line.startswith("stopping ")), None),
            timeout=5,
            what="a line saying it is stopping, at once",
        )
        assert "web" in stopping and "workers" in stopping and "delivered again" in stopping
        system.wait(timeout=60)
    finally:
        if system.poll() is None:
            for pid in descendants(system.pid):
                kill(pid)
            system.kill()
    assert (system.returncode, lines()[-1]) == (0, "stopped"), log_file.read_text()
    assert children and not [pid for pid in children if Path(f"/proc/{pid}").exists()], "a child outlived run_all"


def test_a_busy_address_is_refused_in_one_line_naming_it_and_addr_before_anything_starts(env):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = subprocess.run(
            [*MANAGE, "run_all", "--addr", f"127.0.0.1:{port}"], env=env, capture_output=True, text=True, timeout=60
        )

    assert ran.returncode == 1 and ran.stdout == "", ran.stdout  # not migrated, nothing started
    assert len(ran.stderr.splitlines()) == 1 and f"127.0.0.1:{port}" in ran.stderr and "--addr" in ran.stderr
