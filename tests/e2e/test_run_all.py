"""`./dev up` (run_all): web, relay and workers as processes that serve requests and stop together."""

import signal
import socket
import subprocess
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from tests.conftest import wait_until
from tests.deliveries.conftest import Customer
from tests.e2e.test_processes import MANAGE, env  # noqa: F401 (fixture)

pytestmark = pytest.mark.integration


def a_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str, token: str | None = None) -> int | None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except OSError:
        return None


def connections_to_this_database() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        return cursor.fetchone()[0]


def test_run_all_serves_many_requests_without_piling_up_connections_and_stops_on_ctrl_c(env):  # noqa: F811
    port, token = a_free_port(), Customer("alice").token
    system = subprocess.Popen(
        [*MANAGE, "run_all", "--addr", f"127.0.0.1:{port}"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}/api/deliveries"
        wait_until(lambda: answers(url, token) == 200, timeout=60, what="the web server to answer")
        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = list(pool.map(lambda _: answers(url, token), range(120)))
        assert statuses == [200] * 120
        if connection.vendor == "postgresql":
            # runserver answers each request on a thread of its own: with persistent connections
            # each thread would leave one open (PostgreSQL refuses clients past max_connections).
            assert connections_to_this_database() < 30
    finally:
        # Ctrl-C even when an assertion failed: run_all stops its children, which a kill would orphan.
        system.send_signal(signal.SIGINT)
        try:
            output, _ = system.communicate(timeout=60)
        finally:
            system.kill()
    assert system.returncode == 0, output
    assert "running web, relay-1, workers" in output
