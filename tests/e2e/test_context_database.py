"""A context on a database of its own, by settings alone: `drones` moved onto a second PostgreSQL
server (the test's own, harness/postgres_servers.py) with CONTEXT_DATABASE_URLS and nothing else.
Web, a relay for each database and the workers run as processes; deliveries are requested over the
API and delivered. Each database then holds its own contexts' state and their events, in its own
outbox, inbox and dead letters; the story of a delivery read through the API spans both, in causal
order; and the sweep of each outbox finds every recipient's acknowledgement on the other."""

import contextlib
import http.cookiejar
import json
import os
import re
import signal
import subprocess
import threading
import urllib.request
import uuid
from urllib.parse import urlencode

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.urls import reverse
from django.utils import timezone

from harness.postgres_servers import PostgresServer
from outbox.models import Heartbeat
from outbox.relaying import heartbeats
from tests.factories import BASE, delivery_request
from tests.processes import MANAGE, a_free_port, launched, manage, post, web_server_up
from tests.servers import POSTGRES_RIG
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow, *POSTGRES_RIG]
DATABASE = "drones_of_a_run"
DELIVERIES = 4
AVAILABLE = "SELECT count(*) FROM drones_drone WHERE status = 'available'"
UNRELAYED = "SELECT count(*) FROM outbox_outboxmessage WHERE published_at IS NULL AND available_at <= now()"
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


def _signed_in_operator(port: int) -> urllib.request.OpenerDirector:
    """A browser of an operator signed in to the admin."""
    User.objects.create_superuser("operator", "operator@example.com", "a long operator password")
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    login = f"http://127.0.0.1:{port}/admin/login/"
    fields = {
        "username": "operator",
        "password": "a long operator password",
        "csrfmiddlewaretoken": _csrf(opener.open(login, timeout=10).read().decode()),
        "next": "/admin/",
    }
    opener.open(urllib.request.Request(login, data=urlencode(fields).encode(), headers={"Referer": login}), timeout=10)
    return opener


def _csrf(form: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form).group(1)


def _page(operator, port: int, path: str, fields: dict | None = None) -> tuple[str, str]:
    """The admin's page at `path` (a form posted to it, with `fields`): where it ended, and what it says."""
    url = f"http://127.0.0.1:{port}{path}"
    data = urlencode(fields).encode() if fields is not None else None
    with operator.open(urllib.request.Request(url, data=data, headers={"Referer": url}), timeout=10) as answer:
        return answer.url.removeprefix(f"http://127.0.0.1:{port}"), answer.read().decode()


# A letter the drones' handler left of a delivery's request, as dispatch records it, in the drones'
# database (where their inbox is): the operator's to find and replay from the admin.
DRONES_LETTER = """
from outbox.core.working_database import working_in
from outbox.core.dead_letters import Reason, record_dead_letter
from outbox.models import OutboxMessage
event = OutboxMessage.objects.using("default").get(
    type="delivery.requested", correlation_id="{correlation_id}", target_subscriber=""
)
with working_in("drones"):
    print(record_dead_letter(subscriber="drones", body=event.envelope(), reason=Reason.HANDLER_ERROR).pk)
"""


def _operator_replays_the_drones_letter(port: int, operator, letter_id: int) -> None:
    """The admin's pages of the kernel's tables read the database the operator chooses: the
    drones' letter is listed, opened and replayed there, and nowhere on `default`'s pages."""
    changelist = reverse("admin:outbox_deadletter_changelist")
    _, here = _page(operator, port, changelist)
    assert 'id="changelist-filter"' in here and "?database=drones" in here, "no choice of database"
    assert "to drones" not in here
    _, there = _page(operator, port, f"{changelist}?database=drones")
    assert f"to drones · #{letter_id}" in there, there
    change = reverse("admin:outbox_deadletter_change", args=[letter_id])
    landed, letter = _page(operator, port, f"{change}?_changelist_filters=database%3Ddrones")
    assert landed.startswith(change) and "handler_error" in letter, landed
    landed, _ = _page(operator, port, change)  # on default there is no such letter: the admin says so
    assert not landed.startswith(change), landed
    _, overview = _page(operator, port, f"{reverse('admin:outbox_overview')}?database=drones")
    assert "<strong>drones</strong>" in overview and "<td>drones</td><td>handler_error</td>" in overview
    _, groups = _page(operator, port, f"{reverse('admin:outbox_deadletter_groups')}?database=drones")
    assert f"{change}?database=drones" in groups, "the group's sample letter not linked in its database"

    fields = {"csrfmiddlewaretoken": _csrf(there), "action": "replay", "index": "0"}
    _page(operator, port, f"{changelist}?database=drones", {**fields, "_selected_action": str(letter_id)})


class System:
    """Web, a relay for each database with an outbox, and the workers, as processes with `env`."""

    def __init__(self, env: dict, logs, *, relays_for: tuple[str, ...] = ("default",)):
        self.env, self.logs, self.port = env, logs, a_free_port()
        logs.mkdir(exist_ok=True)
        self.url = f"http://127.0.0.1:{self.port}/api/deliveryrequests"
        self.processes: dict[str, subprocess.Popen] = {}
        self.relays_for = relays_for

    def start(self, *names: str) -> None:
        commands = {
            "web": [*MANAGE, "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            "workers": [*MANAGE, "rundramatiq", "--processes", "1", "--threads", "4"],
            **{
                f"relay-{db}": [*MANAGE, "relay_outbox", "--database", db, "--progress-every", "0"]
                for db in self.relays_for
            },
        }
        for name in names or commands:
            self.processes[name] = launched(commands[name], self.env, log=self.logs / f"{name}.log", group=True)
        if "web" in (names or commands):
            wait_until(lambda: web_server_up(self.url), timeout=60, what="the web server to answer")

    def request(self, token: str, count: int) -> list[str]:
        accepted = []
        for _ in range(count):
            status, _, answer = post(self.url, token, delivery_request(), str(uuid.uuid4()))
            assert status == 202, answer
            accepted.append(answer["deliveryId"])
        return accepted

    def stop(self, *names: str) -> None:
        stopping = [self.processes.pop(name) for name in (names or list(self.processes))]
        for process in stopping:
            assert process.poll() is None, f"a process died by itself: {process.args}"
            process.terminate()
        for process in stopping:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for process in self.processes.values():  # the group: a worker process outlives its main killed alone
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def _delivered() -> int:
    return _on_default("SELECT count(*) FROM deliveries_delivery WHERE status = 'delivered'")[0][0]


def _drones_available(server) -> int:
    return _count(_on_server(server, AVAILABLE))


def test_drones_on_a_database_of_their_own_deliver_and_each_database_keeps_its_contexts_events(env, tmp_path):
    with PostgresServer() as server:
        server.create_database(DATABASE)
        two = {**env, "CONTEXT_DATABASE_URLS": f"drones={server.url(DATABASE)}"}
        manage(two, "migrate", "--noinput")
        said = manage(two, "migrate", "--noinput", "--database", "drones")
        # Only the drones' schema and the kernel's on their database, and grants for their role alone.
        assert "moved public." not in said and "new tables into their schemas: drones " in said, said
        prefix = settings.OUTBOX_CONTEXT_ROLE_PREFIX
        assert f"granted {prefix}drones" in said and f"granted {prefix}deliveries" not in said, said
        schemas = "SELECT nspname FROM pg_namespace WHERE nspname IN ('deliveries', 'drones', 'outbox')"
        assert sorted(row[0] for row in _on_server(server, schemas)) == ["drones", "outbox"]
        manage(two, "seed_fleet", "3", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
        token = manage(two, "create_customer", "alice").splitlines()[-1]
        with System(two, tmp_path, relays_for=("default", "drones")) as system:
            system.start()
            accepted = system.request(token, DELIVERIES)
            wait_until(lambda: _delivered() == DELIVERIES, timeout=90, what="every delivery to be delivered")
            wait_until(lambda: _drones_available(server) == 3, what="every drone to be released")
            story = _timeline(system.port, token, accepted[0])
            operator = _signed_in_operator(system.port)
            _, console = _page(operator, system.port, reverse("admin:outbox_timeline", args=[accepted[0]]))
            letter_id = int(manage(two, "shell", "-c", DRONES_LETTER.format(correlation_id=accepted[0])).split()[-1])
            _operator_replays_the_drones_letter(system.port, operator, letter_id)
            # Replayed where it was: its copy in the outbox of its event, relayed to the drones,
            # whose inbox drops it (they had handled it) and closes the letter as processed; the
            # operator's deed in the audit log.
            message_id = story[0]["messageId"]
            copy = "SELECT count(*) FROM outbox_outboxmessage WHERE message_id = %s AND target_subscriber = 'drones'"
            assert _count(_on_default(copy, [message_id])) == 1
            dropped = "SELECT duplicates FROM outbox_inboxmessage WHERE message_id = %s AND subscriber = 'drones'"
            wait_until(lambda: _on_server(server, dropped, [message_id]) == [(1,)], what="the replay, dropped")
            letter = "SELECT status, replays FROM outbox_deadletter WHERE id = %s"
            wait_until(lambda: _on_server(server, letter, [letter_id]) == [("processed", 1)], what="the letter closed")
            assert LogEntry.objects.filter(
                object_id=f"{letter_id}@drones", change_message__startswith="replayed"
            ).exists()
            with urllib.request.urlopen(f"http://127.0.0.1:{system.port}/metrics", timeout=10) as answer:
                metrics = answer.read().decode()
            system.stop()

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
        assert _on_server(server, "SELECT count(*) FROM outbox_deadletter WHERE status = 'open'")[0][0] == 0
        assert _on_default("SELECT count(*) FROM outbox_deadletter")[0][0] == 0
        # /metrics reads every outbox (a query of one on the other's database would fail the page).
        assert "\noutbox_due_rows 0.0\n" in metrics, metrics

        # The story of a delivery, read through the API, holds both databases' events, each after its cause.
        types = [event["type"] for event in story]
        assert types[0] == "delivery.requested", types
        assert {"drone.scheduled", "drone.released", "delivery.dispatched", "delivery.completed"} <= set(types)
        # The console's story of it (the admin's timeline page) too, drawn from both databases.
        drawn = [console.find(f"<small>{event['messageId']}</small>") for event in story]
        assert -1 not in drawn and drawn == sorted(drawn), "an event missing from the console, or out of order"
        seen = set()
        for event in story:
            assert event["causationId"] is None or event["causationId"] in seen, f"{event['type']} before its cause"
            seen.add(event["messageId"])

        # Retention on each database keeps what the other needs: the deliveries' cursors on the
        # drones' streams, whose events are in the other outbox (deleted, a late event would apply).
        cursors = "SELECT count(*) FROM outbox_streamcursor WHERE stream LIKE 'assignment:%%'"
        streams = "SELECT count(*) FROM outbox_stream WHERE name LIKE 'assignment:%%'"
        kept, numbered = _count(_on_default(cursors)), _count(_on_server(server, streams))
        assert kept >= DELIVERIES and numbered >= DELIVERIES
        # And a stream idle everywhere (its events pruned long ago) loses its cursor and its counter.
        _on_default(
            "INSERT INTO outbox_streamcursor (subscriber, stream, last_sequence, gaps, stale) "
            "VALUES ('deliveries', 'assignment-gone', 5, 0, 0) RETURNING id"
        )
        _on_server(
            server, "INSERT INTO outbox_stream (name, last_sequence) VALUES ('assignment-gone', 5) RETURNING name"
        )
        for database in ("default", "drones"):
            manage(two, "prune_messages", "--database", database)
        assert (_count(_on_default(cursors)), _count(_on_server(server, streams))) == (kept, numbered)
        assert _count(_on_default("SELECT count(*) FROM outbox_streamcursor WHERE stream = 'assignment-gone'")) == 0
        assert _count(_on_server(server, "SELECT count(*) FROM outbox_stream WHERE name = 'assignment-gone'")) == 0

        # With the drones' server away, the sweep of the other outbox goes on: what the drones owe
        # is neither settled nor sent again until their database answers.
        swept = {**two, "OUTBOX_SWEEP_GRACE_SECONDS": "0", "DJANGO_DB_POOL_TIMEOUT": "1"}
        server.stop_primary("fast")
        try:
            said = manage(swept, "sweep_unacknowledged", "--database", "default")
            assert ", 0 copies sent again, 0 dead-lettered" in said, said
        finally:
            server.start_primary()

        # The sweep of each outbox finds the acknowledgements on the other database: nothing to send again.
        for database in ("default", "drones"):
            said = manage(swept, "sweep_unacknowledged", "--database", database)
            assert ", 0 copies sent again, 0 dead-lettered" in said, f"{database}: {said}"
            assert "looked at 0 " not in said, f"{database}: {said}"


@contextlib.contextmanager
def _a_worker_beating_elsewhere():
    """A worker's heartbeat, written every beat (tests.settings: half a second) as a live worker's
    is, until the block ends; then gone, as a worker stopped takes it with it."""
    stop, started = threading.Event(), timezone.now()

    def beat() -> None:
        try:
            while not stop.is_set():
                Heartbeat.objects.update_or_create(
                    process="worker@elsewhere:7",
                    defaults={"kind": "worker", "started_at": started, "last_seen": timezone.now()},
                )
                stop.wait(heartbeats.interval())
        finally:
            connection.close()

    beating = threading.Thread(target=beat, daemon=True)
    beating.start()
    wait_until(Heartbeat.objects.filter(process="worker@elsewhere:7").exists, what="the first beat")
    try:
        yield
    finally:
        stop.set()
        beating.join(10)
        Heartbeat.objects.filter(process="worker@elsewhere:7").delete()


def _move_drones(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([*MANAGE, "move_context", "drones"], env=env, capture_output=True, text=True, timeout=120)


def _count(rows: list[tuple]) -> int:
    return rows[0][0]


def test_drones_move_onto_a_server_of_their_own_losing_nothing_in_flight(env, tmp_path):
    """On one database first: deliveries delivered (the deliveries context has followed the drones'
    streams), then some left in the broker unhandled (the workers stopped) and some in the outbox
    unrelayed (the relay stopped too). Then, everything stopped: `migrate --database drones` and
    `move_context drones`, and the system started again with the drones on their server. Every
    delivery is delivered once, each drone's stream numbered on from where it was."""
    with PostgresServer() as server:
        server.create_database(DATABASE)
        one, two = env, {**env, "CONTEXT_DATABASE_URLS": f"drones={server.url(DATABASE)}"}
        manage(one, "seed_fleet", "3", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
        token = manage(one, "create_customer", "alice").splitlines()[-1]
        with System(one, tmp_path / "one") as system:
            system.start()
            system.request(token, 3)
            wait_until(lambda: _delivered() == 3, timeout=90, what="the first deliveries to be delivered")
            wait_until(lambda: _count(_on_default(AVAILABLE)) == 3, what="every drone to be released")
            system.stop("workers")
            system.request(token, 2)  # relayed, and left in the broker
            wait_until(lambda: _count(_on_default(UNRELAYED)) == 0, what="the relay to send them")
            system.stop("relay-default")
            system.request(token, 2)  # left in the outbox
            assert _count(_on_default(UNRELAYED)) > 0
            system.stop()
        streams_before = dict(_on_default("SELECT name, last_sequence FROM outbox_stream WHERE name LIKE 'drone:%%'"))

        manage(two, "migrate", "--noinput", "--database", "drones")
        # A worker still running (on another host: its heartbeat is all there is of it) would write
        # to the old database after the move: it refuses, naming it.
        with _a_worker_beating_elsewhere():
            refused = _move_drones(two)
        assert refused.returncode != 0 and "still running: worker@elsewhere:7 (seen" in refused.stderr, refused
        with transaction.atomic(), connection.cursor() as cursor:  # a process still writing to the drones' tables
            cursor.execute("UPDATE drones_drone SET name = name")
            refused = _move_drones(two)
        assert refused.returncode != 0 and "something is still writing to default" in refused.stderr, refused
        assert _count(_on_server(server, "SELECT count(*) FROM drones_drone")) == 0  # and nothing was copied
        said = manage(two, "move_context", "drones")
        assert "checked: every row is on drones" in said and "drones_drone 3" in said, said
        assert _count(_on_default("SELECT count(*) FROM drones_drone")) == 0
        again = manage(two, "move_context", "drones")  # run again: nothing left to move, and nothing lost
        assert "deleted from default: nothing" in again, again
        assert dict(_on_server(server, "SELECT name, last_sequence FROM outbox_stream WHERE name LIKE 'drone:%%'")) == (
            streams_before
        )

        with System(two, tmp_path / "two", relays_for=("default", "drones")) as system:
            system.start()
            wait_until(lambda: _delivered() == 7, timeout=120, what="every delivery to be delivered after the move")
            wait_until(lambda: _drones_available(server) == 3, what="every drone to be released")
            system.stop()

        scheduled = _on_server(
            server,
            "SELECT count(*), count(DISTINCT correlation_id) FROM outbox_outboxmessage "
            "WHERE type = 'drone.scheduled' AND target_subscriber = ''",
        )
        assert scheduled == [(7, 7)], "a delivery was given a drone twice, or none"
        assert _count(_on_default("SELECT count(*) FROM outbox_outboxmessage WHERE source = 'drones'")) == 0
        assert _count(_on_default("SELECT count(*) FROM outbox_inboxmessage WHERE subscriber = 'drones'")) == 0
        assert _count(_on_server(server, "SELECT count(*) FROM outbox_inboxmessage WHERE subscriber = 'drones'")) > 0
        assert _count(_on_server(server, "SELECT count(*) FROM outbox_deadletter")) == 0
        assert _count(_on_default("SELECT count(*) FROM outbox_deadletter")) == 0
        # Each drone's stream went on from its number on the old database, none numbered again from 1.
        after = dict(_on_server(server, "SELECT name, last_sequence FROM outbox_stream WHERE name LIKE 'drone:%%'"))
        assert all(after[name] >= number for name, number in streams_before.items()), (streams_before, after)
        assert any(after[name] > number for name, number in streams_before.items()), "no drone flew again"
