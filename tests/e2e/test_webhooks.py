"""Webhooks end to end: web, relay and workers as processes on PostgreSQL and RabbitMQ, a receiver
the test runs on 127.0.0.1. Every status change arrives signed, in order, each retry the same message;
a receiver that never answers costs timeouts, holds at most the webhooks' share of the workers'
threads (WEBHOOKS_CONCURRENCY), and the deliveries go on being delivered."""

import json
import socket
import threading
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook

from deliveries.models import Delivery
from drones.services import seed_fleet
from outbox.models import OutboxMessage
from tests.e2e.test_context_database import System
from tests.factories import BASE, Customer
from tests.processes import post
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.rabbitmq, pytest.mark.slow]

RECEIVING = {"WEBHOOKS_ALLOW_HTTP": "1", "WEBHOOKS_ALLOW_PRIVATE_NETWORKS": "127.0.0.0/8"}


class FailingOnce:
    """Answers 500 to the first POST of each webhook-id, 200 to the next; keeps every POST, in arrival order."""

    def __init__(self):
        self.received: list[dict] = []
        lock, received = threading.Lock(), self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                headers = {k.lower(): v for k, v in self.headers.items()}
                with lock:
                    status = 200 if any(r["headers"]["webhook-id"] == headers["webhook-id"] for r in received) else 500
                    received.append({"headers": headers, "body": body, "status": status})
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Silent:
    """Accepts every connection and never answers; `most_at_once` is the most it held together.
    `release()` closes those held, and from then on each new one at once, until `hold()`."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hooks"
        self.held: list[socket.socket] = []
        self.most_at_once, self.accepted, self.releasing = 0, 0, False
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                if self.releasing:
                    conn.close()
                    continue
                self.held = [c for c in self.held if _open(c)] + [conn]
                self.most_at_once = max(self.most_at_once, len(self.held))

    def release(self):
        with self.lock:
            self.releasing = True
            for conn in self.held:
                conn.close()
            self.held = []

    def hold(self):
        with self.lock:
            self.releasing = False

    def close(self):
        self.release()
        self.listener.close()


def _open(conn: socket.socket) -> bool:
    """Whether the sender is still waiting on it (it has not closed its end: its timeout)."""
    try:
        conn.setblocking(False)
        while chunk := conn.recv(65536):  # the request it sent; b"" once the sender closed
            del chunk
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False


def _register(system: System, token: str, url: str) -> dict:
    status, _, endpoint = post(
        f"http://127.0.0.1:{system.port}/api/webhookendpoints", token, {"url": url}, str(uuid.uuid4())
    )
    assert status == 201, endpoint
    return endpoint


def _get(system: System, token: str, path: str) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{system.port}{path}", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def _delivered(ids: list[str]) -> bool:
    return Delivery.objects.filter(pk__in=ids, status="delivered").count() == len(ids)


def _statuses_changed(delivery_id: str) -> list[str]:
    events = OutboxMessage.objects.filter(
        type="delivery.status_changed", target_subscriber="", correlation_id=delivery_id
    ).order_by("sequence")
    return [event.payload["status"] for event in events]


def test_every_status_change_arrives_signed_in_order_and_each_retry_is_the_same_message(env, tmp_path):
    seed_fleet(count=3, latitude=BASE[0], longitude=BASE[1])
    token = Customer("alice").token
    receiver = FailingOnce()
    children = {**env, **RECEIVING, "WEBHOOKS_BACKOFF_SECONDS": "1"}
    try:
        with System(children, tmp_path) as system:
            system.start()
            secret = _register(system, token, receiver.url)["secret"]
            accepted = system.request(token, 3)
            wait_until(lambda: _delivered(accepted), timeout=60, what="every delivery to be delivered")

            def told_delivered() -> set[str]:
                bodies = [json.loads(r["body"]) for r in list(receiver.received) if r["status"] == 200]
                return {b["data"]["deliveryId"] for b in bodies if b["type"] == "delivery.delivered"}

            wait_until(lambda: told_delivered() == set(accepted), timeout=60, what="each delivered, told")
            system.stop()
    finally:
        receiver.close()

    for delivery_id in accepted:
        posts = [r for r in receiver.received if json.loads(r["body"])["data"]["deliveryId"] == delivery_id]
        for r in posts:
            Webhook(secret).verify(r["body"], r["headers"])  # raises on a bad signature
        firsts, retries = posts[0::2], posts[1::2]
        # Each message failed once, then its retry came before the next message: the same id and body.
        assert [r["status"] for r in posts] == [500, 200] * len(firsts), [r["status"] for r in posts]
        assert [(r["headers"]["webhook-id"], r["body"]) for r in firsts] == [
            (r["headers"]["webhook-id"], r["body"]) for r in retries
        ]
        told = [json.loads(r["body"])["data"]["status"] for r in firsts]
        assert told == _statuses_changed(delivery_id), delivery_id
        assert told[0] == "requested" and told[-1] == "delivered"
        assert [json.loads(r["body"])["type"] for r in firsts] == [f"delivery.{s}" for s in told]
    ids = [r["headers"]["webhook-id"] for r in receiver.received if r["status"] == 200]
    assert len(ids) == len(set(ids))


def test_a_receiver_that_never_answers_holds_only_the_webhooks_share_of_threads_and_costs_timeouts(env, tmp_path):
    seed_fleet(count=6, latitude=BASE[0], longitude=BASE[1])
    token = Customer("alice").token
    receiver = Silent()
    # Its sends wait for longer than the test: any thread they take is taken for good. Each message
    # in a broker message of its own (no packs), so that each may take a thread of its own.
    holding = {
        **env,
        **RECEIVING,
        "WEBHOOKS_BACKOFF_SECONDS": "1,1,1",
        "WEBHOOKS_TIMEOUT_SECONDS": "300",
        "WEBHOOKS_CONCURRENCY": "2",  # counted in the run's Redis (OUTBOX_LIMITS_REDIS_URL)
        "OUTBOX_RELAY_PACK_SIZE": "1",
    }
    try:
        with System(holding, tmp_path) as system:
            system.start()
            endpoint = _register(system, token, receiver.url)
            # More deliveries than the workers' four threads, each with a message owed the receiver.
            accepted = system.request(token, 6)
            wait_until(lambda: _delivered(accepted), timeout=60, what="every delivery delivered, the receiver silent")
            # The limit the deployment set (WEBHOOKS_CONCURRENCY=2): two sends at once, never more.
            assert receiver.most_at_once == 2, receiver.most_at_once

            receiver.release()
            system.stop("workers")
            receiver.hold()
            system.env = {**holding, "WEBHOOKS_TIMEOUT_SECONDS": "1"}
            system.start("workers")
            more = system.request(token, 2)
            wait_until(lambda: _delivered(more), timeout=60, what="the deliveries delivered, sends timing out")

            def timed_out() -> list[dict]:
                attempts = _get(system, token, f"/api/webhookendpoints/{endpoint['id']}/attempts")["items"]
                return [a for a in attempts if a["error"] and a["error"].startswith("timeout:")]

            timeouts = wait_until(lambda: len(timed_out()) >= 2 and timed_out(), timeout=30, what="timeouts recorded")
            receiver.release()
            system.stop()
    finally:
        receiver.close()
    assert all(a["statusCode"] is None and "within 1 s" in a["error"] for a in timeouts), timeouts
