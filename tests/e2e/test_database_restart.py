"""PostgreSQL restarts under a running system: web, relay and workers as the processes production runs.

The server restarted is the test's own (harness/postgres_servers.py), never the machine's, which
other test processes and runs go on using meanwhile."""

import subprocess
import threading
import time
import uuid

import pytest

from harness.postgres_servers import PostgresServer
from tests.factories import BASE, delivery_request
from tests.processes import a_free_port, manage, post, started, web_server_up
from tests.servers import POSTGRES_RIG
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    *POSTGRES_RIG,
]
DATABASE = "restarted"


def sent_until_accepted(url: str, token: str, request: dict, key: str, timeout: float = 60) -> dict:
    """What a client does with a 503: send the request again, with the same Idempotency-Key, once
    its Retry-After has passed (the web's pool may still be waiting to reconnect); the 202's body."""
    deadline = time.monotonic() + timeout
    while True:
        status, headers, body = post(url, token, request, key)
        if status == 202:
            return body
        assert status == 503 and time.monotonic() < deadline, (status, body)
        threading.Event().wait(float(headers["Retry-After"]))


def test_a_database_restart_answers_503_meanwhile_and_everything_reconnects_by_itself(env, tmp_path):
    with PostgresServer() as server:
        server.create_database(DATABASE)
        # How long a request waits for a connection; the relays LISTEN on this server too.
        on_server = {**env, "DATABASE_URL": server.url(DATABASE), "DJANGO_DB_POOL_TIMEOUT": "2"}
        on_server.pop("OUTBOX_LISTEN_DATABASE_URL", None)
        manage(on_server, "migrate", "--noinput")
        manage(on_server, "seed_fleet", "3", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
        token = manage(on_server, "create_customer", "alice").splitlines()[-1]
        port = a_free_port()
        url = f"http://127.0.0.1:{port}/api/deliveryrequests"
        processes = [
            started(on_server, "runserver", f"127.0.0.1:{port}", "--noreload", log=tmp_path / "web.log"),
            started(on_server, "relay_outbox", log=tmp_path / "relay.log"),
            started(on_server, "rundramatiq", "--processes", "1", "--threads", "2", log=tmp_path / "workers.log"),
        ]
        accepted = []

        def request_deliveries(n: int) -> None:
            for _ in range(n):
                status, _, body = post(url, token, delivery_request(), str(uuid.uuid4()))
                assert status == 202, body
                accepted.append(body["deliveryId"])

        def delivered() -> list[str]:
            with server.connect(dbname=DATABASE) as conn:
                rows = conn.execute("SELECT id FROM deliveries_delivery WHERE status = 'delivered'").fetchall()
            return sorted(str(row[0]) for row in rows)

        try:
            wait_until(lambda: web_server_up(url), timeout=60, what="the web server to answer")
            request_deliveries(3)
            wait_until(lambda: len(delivered()) == 3, timeout=60, what="the first deliveries to complete")

            server.stop_primary("fast")
            try:
                key, request = str(uuid.uuid4()), delivery_request()
                status, headers, body = post(url, token, request, key)
                assert status == 503, body
                assert body["detail"].startswith("the database is unavailable")
                assert body["errors"] == [{"field": "database", "message": "unreachable or busy"}]
                assert headers["Retry-After"] == "5"
            finally:
                server.start_primary()  # waits until it answers

            accepted.append(sent_until_accepted(url, token, request, key)["deliveryId"])
            request_deliveries(3)
            wait_until(
                lambda: delivered() == sorted(accepted),
                timeout=90,
                what="the relay and workers to reconnect and complete every delivery",
            )
            assert [p.poll() for p in processes] == [None, None, None], "a process died with the database"
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
