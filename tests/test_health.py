"""/healthz and /readyz: readiness checks the real database and broker, says which
one failed and why, and answers even when a dependency hangs instead of hanging with it."""

import socket
import threading

import pytest
from django.test import Client

from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.django_db(transaction=True)]

rabbitmq_only = pytest.mark.rabbitmq


def test_healthz_says_the_process_is_alive():
    response = Client().get("/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "alive"})


def test_readyz_is_200_when_the_database_and_the_broker_answer():
    response = Client().get("/readyz")

    assert response.status_code == 200, response.json()
    assert response.json() == {"status": "ready", "checks": {"database": {"ok": True}, "broker": {"ok": True}}}


@rabbitmq_only
def test_readyz_is_503_naming_the_broker_when_nothing_listens_there(settings):
    settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{_closed_port()}/%2F"

    response = Client().get("/readyz")

    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"] == {"ok": True}
    assert checks["broker"]["ok"] is False and "Connection" in checks["broker"]["error"]


@rabbitmq_only
def test_readyz_answers_timeout_instead_of_hanging_on_a_broker_that_never_answers(settings):
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, then says nothing: a hung server
    accepted = []
    threading.Thread(target=lambda: accepted.append(silent.accept()), daemon=True).start()
    settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}/%2F"
    try:
        response = Client().get("/readyz")
    finally:
        silent.close()

    assert response.status_code == 503
    assert response.json()["checks"]["broker"]["error"].startswith("timeout")


def test_probes_are_not_redirected_to_https(settings):
    settings.SECURE_SSL_REDIRECT = True

    assert Client().get("/healthz").status_code == 200
    assert Client().get("/api/deliveries").status_code == 301


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@rabbitmq_only
def test_readyz_reuses_one_broker_connection_and_replaces_a_broken_one():
    from delivery_project.health import amqp_probe

    assert Client().get("/readyz").status_code == 200
    opened = amqp_probe.opened

    for _ in range(3):
        assert Client().get("/readyz").status_code == 200
    assert amqp_probe.opened == opened  # no new TCP and AMQP handshake per probe

    amqp_probe.connection._impl._transport._sock.close()  # dropped under it, as a broker restart would
    assert Client().get("/readyz").status_code == 200
    assert amqp_probe.opened == opened + 1


@rabbitmq_only
def test_readyz_gives_up_a_node_that_accepts_and_never_speaks_and_is_ready_through_the_next(settings):
    silent = socket.create_server(("127.0.0.1", 0))  # accepts, then says nothing: a hung node
    accepted = []
    threading.Thread(target=lambda: [accepted.append(silent.accept()) for _ in range(20)], daemon=True).start()
    settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}/%2F; {settings.BROKER_URL}"
    try:
        # The check gives a silent node 2 s (pika's own default held every probe for 15 s).
        wait_until(
            lambda: Client().get("/readyz").status_code == 200, timeout=8, what="/readyz through the node that answers"
        )
    finally:
        silent.close()


@rabbitmq_only
def test_readyz_reads_every_broker_address_and_is_ready_while_one_node_answers(settings):
    one_node = settings.BROKER_URL
    settings.BROKER_URL = f"amqp://guest:guest@127.0.0.1:{_closed_port()}/%2F; {one_node}"

    response = Client().get("/readyz")

    assert response.status_code == 200, response.json()
