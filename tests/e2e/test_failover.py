"""A failover under a running system: the primary of a synchronous pair crashes, nothing takes writes
for a few seconds, the replica is promoted. Web, relay and workers reach the pair through the
multi-host URL (target_session_attrs=read-write) and find the new primary by themselves; every
request refused meanwhile gets a JSON 503 soon, and its retry with the same Idempotency-Key is
accepted once, and delivered. The pair is the test's own (harness/postgres_servers.py); each
process logs to tmp_path. `figures` (the printed line) holds what the failover cost."""

import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime

import pytest

from harness.postgres_servers import PostgresPrimaryWithReplica
from tests.factories import BASE, delivery_request
from tests.processes import MANAGE, a_free_port, launched, manage, post, started, web_server_up
from tests.servers import POSTGRES_RIG
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    *POSTGRES_RIG,
]
DATABASE = "failover"
RATE = 4  # new deliveries a second, each posted until accepted
NO_PRIMARY_SECONDS = 3  # the primary down, the replica not yet promoted
BOUND_503_SECONDS = 5  # a request refused while there is no primary is refused within this
POOL_TIMEOUT_SECONDS = (
    2  # DJANGO_DB_POOL_TIMEOUT, as test_database_restart's: how long a request waits for a connection
)
DELIVERED_SECONDS = 60  # after the last post, for every accepted delivery to be delivered
WEB = {  # the development server the other fault tests run, and production's gunicorn (2 x 4 threads, as the Procfile)
    "runserver": lambda port: [*MANAGE, "runserver", f"127.0.0.1:{port}", "--noreload"],
    "gunicorn": lambda port: (
        [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--bind", f"127.0.0.1:{port}"]
        + ["--workers", "2", "--threads", "4"]
    ),
}


class Clients:
    """New deliveries at RATE a second, each from a thread of its own that posts it with one
    Idempotency-Key until a 202, a 503 waited out between tries. Every answer is recorded with when
    it was sent, how long it took and whether a 503 came as the API's JSON error."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token
        self.accepted: dict[str, float] = {}  # deliveryId -> when its 202 came (monotonic)
        self.refused: list[tuple[float, float, bool]] = []  # 503s: (sent, seconds to it, a JSON error)
        self.other: list[tuple[int, object]] = []  # anything else: a failure of the test
        self.answered: list[tuple[float, float]] = []  # every answer, 202 or 503: (sent, seconds to it)
        self.stop, self.threads, self.lock = threading.Event(), [], threading.Lock()
        self.pacer = threading.Thread(target=self._pace, daemon=True)

    def start(self) -> None:
        self.pacer.start()

    def _pace(self) -> None:
        while not self.stop.wait(1 / RATE):
            self.threads.append(threading.Thread(target=self._client, daemon=True))
            self.threads[-1].start()

    def _client(self) -> None:
        key, body, deadline = str(uuid.uuid4()), delivery_request(), time.monotonic() + 60
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                status, headers, answer = post(self.url, self.token, body, key, timeout=30)
            except OSError as error:  # no HTTP answer at all
                status, answer = None, repr(error)
            took = time.monotonic() - sent
            with self.lock:
                self.answered.append((sent, took))
                if status == 202:
                    self.accepted[answer["deliveryId"]] = time.monotonic()
                    return
                if status == 503:
                    is_json = isinstance(answer, dict) and answer.get("detail", "").startswith(
                        "the database is unavailable"
                    )
                    self.refused.append((sent, took, is_json and headers.get("Retry-After") == "5"))
                else:
                    self.other.append((status, answer))
                    return
            threading.Event().wait(1 / RATE)  # a client's pause before its retry, not a wait on the system
        with self.lock:
            self.other.append((None, f"{key}: not accepted within 60 s"))

    def finish(self) -> None:
        self.stop.set()
        self.pacer.join(5)
        for thread in self.threads:
            thread.join(70)
        assert not any(thread.is_alive() for thread in self.threads), "a client never got an answer"


def ledger(pair: PostgresPrimaryWithReplica) -> dict:
    """What the promoted server holds: deliveries by status, completions and requests per delivery, dead letters."""
    with pair.connect("replica", DATABASE) as conn:
        statuses = dict(conn.execute("SELECT id::text, status FROM deliveries_delivery").fetchall())
        took = conn.execute("SELECT extract(epoch FROM max(updated_at - created_at)) FROM deliveries_delivery")
        took = took.fetchone()[0]
        counts = conn.execute(
            "SELECT type, count(*), count(DISTINCT correlation_id) FROM outbox_outboxmessage"
            " WHERE type IN ('delivery.requested', 'delivery.completed') AND target_subscriber = '' GROUP BY type"
        ).fetchall()
        dead = conn.execute("SELECT count(*) FROM outbox_deadletter").fetchone()[0]
        absorbed = conn.execute("SELECT coalesce(sum(duplicates), 0) FROM outbox_inboxmessage").fetchone()[0]
    counts = {t: (n, d) for t, n, d in counts}
    return {"statuses": statuses, "counts": counts, "dead": dead, "absorbed": absorbed, "took": took}


def first_published_after(pair: PostgresPrimaryWithReplica, when: datetime) -> datetime | None:
    with pair.connect("replica", DATABASE) as conn:
        return conn.execute(
            "SELECT min(published_at) FROM outbox_outboxmessage WHERE published_at >= %s", [when]
        ).fetchone()[0]


def beating(pair: PostgresPrimaryWithReplica) -> set[str]:
    with pair.connect("primary", DATABASE) as conn:
        return {kind for (kind,) in conn.execute("SELECT DISTINCT kind FROM outbox_heartbeat").fetchall()}


@pytest.mark.parametrize("web", list(WEB))
def test_a_failover_to_the_synchronous_replica_loses_nothing_and_refuses_soon_meanwhile(env, tmp_path, web):
    with PostgresPrimaryWithReplica(synchronous=True) as pair:
        pair.create_database(DATABASE)
        on_pair = {**env, "DATABASE_URL": pair.url(DATABASE), "DJANGO_DB_POOL_TIMEOUT": str(POOL_TIMEOUT_SECONDS)}
        on_pair.pop("OUTBOX_LISTEN_DATABASE_URL", None)  # the pair's own server is the relay's to LISTEN on
        manage(on_pair, "migrate", "--noinput")
        manage(on_pair, "seed_fleet", "20", "--latitude", str(BASE[0]), "--longitude", str(BASE[1]))
        token = manage(on_pair, "create_customer", "alice").splitlines()[-1]
        port = a_free_port()
        url = f"http://127.0.0.1:{port}/api/deliveryrequests"
        processes = {
            "web": launched(WEB[web](port), on_pair, log=tmp_path / "web.log"),
            "relay": started(on_pair, "relay_outbox", "--progress-every", "0", log=tmp_path / "relay.log"),
            "workers": started(
                on_pair, "rundramatiq", "--processes", "1", "--threads", "4", log=tmp_path / "workers.log"
            ),
        }
        clients = Clients(url, token)
        try:
            wait_until(lambda: web_server_up(url), timeout=60, what="the web server to answer")
            wait_until(lambda: beating(pair) == {"relay", "worker"}, timeout=60, what="the relay and workers to beat")
            clients.start()
            wait_until(
                lambda: len(clients.accepted) >= 2 * RATE, timeout=30, what="deliveries accepted before the crash"
            )

            stop_seconds = pair.stop_primary("immediate")
            no_primary_since = time.monotonic()
            clients.stop.wait(NO_PRIMARY_SECONDS)  # the outage lasts this long: its length is the test's to choose
            assert pair.which_is_primary() is None
            promote_began = time.monotonic()
            promote_seconds = pair.promote()
            promoted, promoted_at = time.monotonic(), datetime.now(UTC)
            assert pair.which_is_primary() == "replica"
            wait_until(
                lambda: any(at > promoted for at in clients.accepted.values()),
                timeout=30,
                what="a delivery accepted by the promoted server",
            )
            clients.stop.wait(2)  # deliveries go on a while after the failover
            clients.finish()
            assert not clients.other, f"answers other than 202 or 503: {clients.other[:5]}"

            def all_terminal() -> bool:
                statuses = ledger(pair)["statuses"]
                return all(statuses.get(d) in ("delivered", "failed", "cancelled") for d in clients.accepted)

            wait_until(all_terminal, timeout=DELIVERED_SECONDS, what="every accepted delivery to end")
            relay_resumed = wait_until(
                lambda: first_published_after(pair, promoted_at), timeout=30, what="the relay to send again"
            )
            died = {name: p.poll() for name, p in processes.items() if p.poll() is not None}
            assert not died, f"processes died with the primary: {died}"
        finally:
            clients.stop.set()
            for process in processes.values():
                process.terminate()
            for process in processes.values():
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(10)

        held, accepted = ledger(pair), set(clients.accepted)
    assert set(held["statuses"]) == accepted, "a delivery was lost, or one no 202 announced"
    assert set(held["statuses"].values()) == {"delivered"}
    n = len(accepted)
    assert held["counts"]["delivery.requested"] == (n, n), "a retried request was applied twice"
    assert held["counts"]["delivery.completed"] == (n, n), "a delivery was completed twice"
    assert held["dead"] == 0
    assert all(is_json for _, _, is_json in clients.refused), "a 503 without the API's JSON error"
    during = [took for sent, took, _ in clients.refused if no_primary_since <= sent < promote_began]
    answers = [took for sent, took in clients.answered if no_primary_since <= sent < promote_began]
    assert during, "no request was refused while there was no primary"
    figures = {
        "stop_primary_s": stop_seconds,
        "promote_s": promote_seconds,
        "first_202_after_promote_s": min(at - promoted for at in clients.accepted.values() if at > promoted),
        "relay_first_send_after_promote_s": (relay_resumed - promoted_at).total_seconds(),
        "time_to_503_median_s": statistics.median(during),
        "time_to_503_max_s": max(during),
        "answer_max_without_primary_s": max(answers),  # a 202 too: one that waited for the promotion
        "refused_without_primary": len(during),
        "refused_in_all": len(clients.refused),
        "accepted": n,
        # A row the relay had claimed when the primary crashed waits out its lease (30 s) on the promoted server.
        "request_to_delivered_max_s": float(held["took"]),
        "duplicates_absorbed": held["absorbed"],
    }
    print(f"\n[failover, {web}] " + json.dumps({k: round(v, 3) for k, v in figures.items()}))
    assert max(during) <= BOUND_503_SECONDS, f"a 503 took {max(during):.1f} s while there was no primary"
