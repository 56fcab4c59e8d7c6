"""Liveness and readiness, for load balancers and orchestrators.

`/healthz` says the process answers. `/readyz` says whether it can do its work: the database
and the broker each answer a trivial request. Each check runs in a thread of its own and is
given READY_TIMEOUT_SECONDS, so a dependency that hangs (a paused server, a dropped packet)
makes the answer 503 "timeout" within a second instead of hanging the probe with it. The broker
check reuses one AMQP connection per process (opening a channel is the round trip), so a probe
every second costs no TCP and AMQP handshake; a connection found broken is replaced at once.
"""

import contextlib
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Timeout

import dramatiq
import pika
from django.conf import settings
from django.db import connections
from django.http import JsonResponse
from dramatiq.brokers.rabbitmq import RabbitmqBroker

from delivery_project.monitoring import monitoring_only
from delivery_project.postgresql.base import POOLER_HINT, pooler_suspected
from outbox.ops import amqp_parameters, broker_urls

READY_TIMEOUT_SECONDS = 0.8
# Threads of checks that hang stay busy until their own timeouts end; more threads keep later
# probes answering meanwhile.
_checks = ThreadPoolExecutor(max_workers=8, thread_name_prefix="readiness")


def _database() -> None:
    connection = connections["default"]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    finally:
        connection.close()  # this thread's own connection, back to the pool


class _AmqpProbe:
    """One BlockingConnection for the checks of this process (pika's are not thread-safe: a lock)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.url, self.connection = None, None
        self.opened = 0  # connections opened, for the tests

    def check(self, url: str) -> None:
        if not self.lock.acquire(timeout=READY_TIMEOUT_SECONDS):
            raise TimeoutError("the previous broker check has not ended")
        try:
            for attempt in (1, 2):
                reused = self.connection is not None and self.url == url and self.connection.is_open
                try:
                    if not reused:
                        self._open(url)
                    self.connection.channel().close()
                    return
                except Exception:
                    self._drop()
                    if not reused or attempt == 2:
                        raise  # a fresh connection failed: the broker does not answer
        finally:
            self.lock.release()

    def _open(self, url: str) -> None:
        self._drop()
        nodes = amqp_parameters(broker_urls(url))
        for parameters in nodes:
            # stack_timeout bounds the whole handshake: a node that accepts TCP and then says nothing
            # is given up after 2 s (pika's default: 15 s) and the next one is tried.
            parameters.socket_timeout = parameters.blocked_connection_timeout = parameters.stack_timeout = 2
            parameters.connection_attempts, parameters.retry_delay = 1, 0
        # In an order of this process's own, as the broker's: one silent node does not hold every
        # web process's probe on the same address.
        nodes = random.sample(nodes, len(nodes))
        self.url, self.connection = url, pika.BlockingConnection(nodes)  # the first node that answers
        self.opened += 1

    def _drop(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None and connection.is_open:
            with contextlib.suppress(Exception):  # it is being thrown away
                connection.close()


amqp_probe = _AmqpProbe()


def _broker() -> None:
    broker = dramatiq.get_broker()
    if isinstance(broker, RabbitmqBroker):
        amqp_probe.check(settings.BROKER_URL)
    else:
        broker.client.ping()


CHECKS = {"database": _database, "broker": _broker}


def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "alive"})


@monitoring_only
def readyz(request) -> JsonResponse:
    started = time.monotonic()
    pending = {name: _checks.submit(check) for name, check in CHECKS.items()}
    results = {}
    for name, future in pending.items():
        left = max(0.0, READY_TIMEOUT_SECONDS - (time.monotonic() - started))
        try:
            future.result(timeout=left)
            results[name] = {"ok": True}
        except Timeout:
            results[name] = {"ok": False, "error": f"timeout: no answer within {READY_TIMEOUT_SECONDS} s"}
        except Exception as error:  # noqa: BLE001 - whatever it is, the probe reports it
            results[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"[:300]}
    if pooler_suspected:  # the database answers, but some of its statements fail: say what to set
        results["database"]["warning"] = f"{POOLER_HINT} (seen: {pooler_suspected[0]})"[:500]
    ready = all(result["ok"] for result in results.values())
    return JsonResponse({"status": "ready" if ready else "not ready", "checks": results}, status=200 if ready else 503)
