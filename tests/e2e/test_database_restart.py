"""PostgreSQL restarts under a running system: web, relay and workers as the processes production runs."""

import subprocess
import uuid
from pathlib import Path

import pytest
from django.db import connection

from deliveries.models import Delivery
from drones.services import seed_fleet
from tests.factories import BASE, Customer, delivery_request
from tests.processes import a_free_port, post, started, web_server_up
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


def postgresql(action: str) -> None:
    """Stop or start this machine's PostgreSQL cluster (as .ci/run starts it)."""
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[-1]
    fast = ["-m", "fast"] if action == "stop" else []
    subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", action, *fast], check=True)


def postgresql_answers() -> bool:
    return subprocess.run(["pg_isready", "-h", "127.0.0.1", "-p", "5432"], capture_output=True).returncode == 0


def test_a_database_restart_answers_503_meanwhile_and_everything_reconnects_by_itself(env):
    seed_fleet(count=3, latitude=BASE[0], longitude=BASE[1])
    token, port = Customer("alice").token, a_free_port()
    url = f"http://127.0.0.1:{port}/api/deliveryrequests"
    env = {**env, "DJANGO_DB_POOL_TIMEOUT": "2"}  # how long a request waits for a connection
    processes = [
        started(env, "runserver", f"127.0.0.1:{port}", "--noreload"),
        started(env, "relay_outbox"),
        started(env, "rundramatiq", "--processes", "1", "--threads", "2"),
    ]
    accepted = []

    def request_deliveries(n: int) -> None:
        for _ in range(n):
            status, _, body = post(url, token, delivery_request(), str(uuid.uuid4()))
            assert status == 202, body
            accepted.append(body["deliveryId"])

    def all_delivered() -> bool:
        return Delivery.objects.filter(status="delivered").count() == len(accepted)

    try:
        wait_until(lambda: web_server_up(url), timeout=60, what="the web server to answer")
        request_deliveries(3)
        wait_until(all_delivered, timeout=60, what="the first deliveries to complete")

        postgresql("stop")
        try:
            key = str(uuid.uuid4())
            status, headers, body = post(url, token, delivery_request(), key)
            assert status == 503, body
            assert body["detail"].startswith("the database is unavailable")
            assert body["errors"] == [{"field": "database", "message": "unreachable or busy"}]
            assert headers["Retry-After"] == "5"
        finally:
            postgresql("start")
            wait_until(postgresql_answers, timeout=60, what="PostgreSQL to answer again")
            connection.close()  # this process's connection died with the server

        status, _, body = post(url, token, delivery_request(), key)  # the client's retry of the refused request
        assert status == 202, body
        accepted.append(body["deliveryId"])
        request_deliveries(3)
        wait_until(all_delivered, timeout=90, what="the relay and workers to reconnect and complete every delivery")
        assert sorted(str(d) for d in Delivery.objects.values_list("id", flat=True)) == sorted(accepted)
        assert [p.poll() for p in processes] == [None, None, None], "a process died with the database"
    finally:
        if not postgresql_answers():
            postgresql("start")
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
