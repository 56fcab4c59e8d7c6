"""Liveness and readiness, for load balancers and orchestrators.

`/healthz` says the process answers. `/readyz` says whether it can do its work: the database
and the broker each answer a trivial request. Each check runs in a thread of its own and is
given READY_TIMEOUT_SECONDS, so a dependency that hangs (a paused server, a dropped packet)
makes the answer 503 "timeout" within a second instead of hanging the probe with it.
"""

import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as Timeout

import dramatiq
import pika
from django.conf import settings
from django.db import connections
from django.http import JsonResponse
from dramatiq.brokers.rabbitmq import RabbitmqBroker

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


def _broker() -> None:
    broker = dramatiq.get_broker()
    if isinstance(broker, RabbitmqBroker):
        parameters = pika.URLParameters(settings.BROKER_URL)
        parameters.socket_timeout = parameters.blocked_connection_timeout = 2
        parameters.connection_attempts, parameters.retry_delay = 1, 0
        pika.BlockingConnection(parameters).close()
    else:
        broker.client.ping()


CHECKS = {"database": _database, "broker": _broker}


def healthz(request) -> JsonResponse:
    return JsonResponse({"status": "alive"})


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
    ready = all(result["ok"] for result in results.values())
    return JsonResponse({"status": "ready" if ready else "not ready", "checks": results}, status=200 if ready else 503)
