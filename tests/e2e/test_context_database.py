"""A context on a database of its own, by settings alone: `drones` moved onto a second PostgreSQL
server (the test's own, harness/postgres_servers.py) with CONTEXT_DATABASE_URLS and nothing else.
Web, a relay for each database and the workers run as processes; deliveries are requested over the
API and delivered. Each database then holds its own contexts' state and their events, in its own
outbox, inbox and dead letters; the story of a delivery read through the API spans both, in causal
order; and the sweep of each outbox finds every recipient's acknowledgement on the other."""

import json
import subprocess
import urllib.request
import uuid

import pytest
from django.db import connection

from harness.postgres_servers import PostgresServer
from tests.factories import BASE, delivery_request
from tests.processes import MANAGE, a_free_port, launched, manage, post, started, web_server_up
from tests.servers import POSTGRES_RIG
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, *POSTGRES_RIG]
DATABASE = "drones_of_a_run"
DELIVERIES = 4
EVENTS_BY_TYPE = "SELECT type, count(*) FROM outbox_outboxmessage WHERE target_subscriber = '' GROUP BY type"
INBOX_BY_SUBSCRIBER = "SELECT subscriber, count(*) FROM outbox_inboxmessage GROUP BY subscriber"


def _on_default(sql: str, params=()) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _on_server(server: PostgresServer, sql: str, params=()) -> list[tuple]:
    with server.connect(dbname=DATABASE) as conn:
        return conn.execute(sql, params).fetchall()


def _timeline(port: int, token: str, delivery_id: str) -> list[dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/deliveries/{delivery_id}/timeline", headers={"Authorization": f"Bearer {token}"}
    )

    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def test_drones_on_a_database_of_their_own_deliver_and_each_database_keeps_its_contexts_events(env, tmp_path):
    with PostgresServer() as server:
        server.create_database(DATABASE)
        two = {**env, "CONTEXT_DATABASE_URLS": f"drones={server.url(DATABASE)}"}
        manage(two, "migrate", "--noinput")
        manage(two, "migrate", "--noinput", "--database", "drones")
        manage(two, "seed_fleet", "3", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
        token = manage(two, "create_customer", "alice").splitlines()[-1]
        port = a_free_port()
        url = f"http://127.0.0.1:{port}/api/deliveryrequests"
        processes = {
            "web": launched([*MANAGE, "runserver", f"127.0.0.1:{port}", "--noreload"], two, log=tmp_path / "web.log"),
            "relay": started(two, "relay_outbox", "--progress-every", "0", log=tmp_path / "relay.log"),
            "relay-drones": started(
                two, "relay_outbox", "--database", "drones", "--progress-every", "0", log=tmp_path / "relay-drones.log"
            ),
            "workers": started(two, "rundramatiq", "--processes", "1", "--threads", "4", log=tmp_path / "workers.log"),
        }
        try:
            wait_until(lambda: web_server_up(url), timeout=60, what="the web server to answer")
            accepted = []
            for _ in range(DELIVERIES):
                status, _, answer = post(url, token, delivery_request(), str(uuid.uuid4()))
                assert status == 202, answer
                accepted.append(answer["deliveryId"])

            def delivered() -> bool:
                rows = _on_default("SELECT count(*) FROM deliveries_delivery WHERE status = 'delivered'")
                return rows[0][0] == DELIVERIES

            wait_until(delivered, timeout=90, what="every delivery to be delivered")
            wait_until(
                lambda: _on_server(server, "SELECT count(*) FROM drones_drone WHERE status = 'available'")[0][0] == 3,
                what="every drone to be released",
            )
            story = _timeline(port, token, accepted[0])
            died = {name: p.poll() for name, p in processes.items() if p.poll() is not None}
            assert not died, f"processes died: {died}"
        finally:
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)

        # The drones' state is on their server, and none of it on the project's database.
        assert _on_server(server, "SELECT count(*) FROM drones_drone")[0][0] == 3
        assert _on_server(server, "SELECT count(*) FROM drones_assignment")[0][0] == DELIVERIES
        assert _on_default("SELECT count(*) FROM drones_drone")[0][0] == 0
        assert _on_default("SELECT count(*) FROM drones_assignment")[0][0] == 0
        # Each context's events in the outbox beside its state: drone.* there, delivery.* here.
        there = dict(
            _on_server(
                server, "SELECT type, count(*) FROM outbox_outboxmessage WHERE target_subscriber = '' GROUP BY type"
            )
        )
        here = dict(
            _on_default("SELECT type, count(*) FROM outbox_outboxmessage WHERE target_subscriber = '' GROUP BY type")
        )
        assert there.get("drone.scheduled") == DELIVERIES and there.get("drone.released") == DELIVERIES
        assert all(t.startswith("drone.") for t in there), there
        assert here.get("delivery.requested") == DELIVERIES and not any(t.startswith("drone.") for t in here)
        # Each subscriber's inbox beside its own tables: the drones' on their server, the others' here.
        inbox_there = dict(
            _on_server(server, "SELECT subscriber, count(*) FROM outbox_inboxmessage GROUP BY subscriber")
        )
        inbox_here = dict(_on_default("SELECT subscriber, count(*) FROM outbox_inboxmessage GROUP BY subscriber"))
        assert set(inbox_there) == {"drones"}, inbox_there
        assert inbox_here.get("deliveries", 0) > 0 and "drones" not in inbox_here
        assert _on_server(server, "SELECT count(*) FROM outbox_deadletter")[0][0] == 0
        assert _on_default("SELECT count(*) FROM outbox_deadletter")[0][0] == 0

        # The story of a delivery, read through the API, holds both databases' events, each after its cause.
        types = [event["type"] for event in story]
        assert types[0] == "delivery.requested", types
        assert {"drone.scheduled", "drone.released", "delivery.dispatched", "delivery.completed"} <= set(types)
        seen = set()
        for event in story:
            assert event["causationId"] is None or event["causationId"] in seen, f"{event['type']} before its cause"
            seen.add(event["messageId"])

        # The sweep of each outbox finds the acknowledgements on the other database: nothing to send again.
        swept = {**two, "OUTBOX_SWEEP_GRACE_SECONDS": "0"}
        for database in ("default", "drones"):
            said = manage(swept, "sweep_unacknowledged", "--database", database)
            assert ", 0 copies sent again, 0 dead-lettered" in said, f"{database}: {said}"
            assert "looked at 0 " not in said, f"{database}: {said}"
