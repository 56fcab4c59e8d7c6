"""The 3-node RabbitMQ cluster rig (tests/rabbitmq_cluster.py) does what the cluster tests rely on.

One cluster for the whole session (the `rabbitmq_cluster` fixture in tests/conftest.py, started
once: ~15-25 s on this machine), shared with the cluster tests; each test leaves its three nodes
running again.
"""

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pika
import pika.exceptions
import pytest

from tests.rabbitmq_cluster import RABBITMQ_BIN, epmd_names, port_open, processes_in_group, quorum_queue
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not (RABBITMQ_BIN / "rabbitmq-server").exists(), reason=f"no RabbitMQ in {RABBITMQ_BIN}"),
]

SYSTEM_EPMD_PORT = 4369


def connect(url: str) -> pika.BlockingConnection:
    return pika.BlockingConnection(pika.URLParameters(url + "?connection_attempts=1&socket_timeout=5"))


def test_three_nodes_form_one_cluster_and_each_answers_amqp(rabbitmq_cluster):
    cluster = rabbitmq_cluster
    with ThreadPoolExecutor(cluster.size) as pool:  # one rabbitmqctl call a node, at once
        statuses = list(pool.map(cluster.cluster_status, range(cluster.size)))
    for node, status in zip(cluster.nodes, statuses, strict=True):
        assert sorted(status["running_nodes"]) == sorted(cluster.nodes), f"as {node} sees it"
        assert sorted(status["disk_nodes"]) == sorted(cluster.nodes), f"as {node} sees it"

    for url in cluster.urls:
        connection = connect(url)
        try:
            channel = connection.channel()
            queue = channel.queue_declare("", exclusive=True).method.queue
            channel.basic_publish("", queue, b"ping")
            body = wait_until(lambda ch=channel, q=queue: ch.basic_get(q, auto_ack=True)[2], what="the ping back")
            assert body == b"ping"
        finally:
            connection.close()

    # The rig's nodes register with the rig's epmd only; the system's epmd (if any) never sees them.
    assert set(epmd_names(cluster.epmd_port)) == {node.split("@")[0] for node in cluster.nodes}
    system = epmd_names(SYSTEM_EPMD_PORT) or {}
    assert not set(system) & {node.split("@")[0] for node in cluster.nodes}
    assert cluster.epmd_port != SYSTEM_EPMD_PORT and 5672 not in cluster.amqp_ports


def test_a_quorum_queue_survives_the_stop_of_its_leader_and_the_node_comes_back(rabbitmq_cluster):
    cluster = rabbitmq_cluster
    name = f"rig-quorum-{uuid.uuid4().hex[:8]}"
    bodies = {f"message {n}".encode() for n in range(50)}

    connection = connect(cluster.urls[0])
    try:
        channel = connection.channel()
        channel.confirm_delivery()  # basic_publish raises unless the broker confirms (a quorum commit)
        channel.queue_declare(name, durable=True, arguments={"x-queue-type": "quorum"})
        for body in sorted(bodies):
            channel.basic_publish(
                "", name, body, pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent), mandatory=True
            )
    finally:
        connection.close()

    def all_members_online(via: int) -> dict | None:
        queue = quorum_queue(cluster, via, name)
        return queue if len(queue.get("online", ())) == 3 else None

    queue = wait_until(lambda: all_members_online(0), timeout=30, what="the quorum queue's three members online")
    assert queue["type"] == "quorum" and sorted(queue["members"]) == sorted(cluster.nodes)
    leader = cluster.nodes.index(queue["leader"])
    other = (leader + 1) % cluster.size

    cluster.stop_node(leader)
    assert not port_open(cluster.amqp_ports[leader])
    assert cluster.wait_until_clustered(2, via=other) == sorted(set(cluster.nodes) - {cluster.nodes[leader]})

    def leader_among_online_members() -> str | None:
        queue = quorum_queue(cluster, other, name)
        return queue["leader"] if queue and queue["leader"] in queue["online"] else None

    new_leader = wait_until(leader_among_online_members, timeout=30, what="a new leader among the remaining members")
    assert new_leader != cluster.nodes[leader]

    received: set[bytes] = set()

    def drained_through_other_node() -> bool:
        try:
            connection = connect(cluster.urls[other])
        except pika.exceptions.AMQPError:
            return False
        try:
            channel = connection.channel()
            while (message := channel.basic_get(name))[0] is not None:
                method, _, body = message
                received.add(body)
                channel.basic_ack(method.delivery_tag)
            return received == bodies
        except pika.exceptions.AMQPError:
            return False
        finally:
            if connection.is_open:
                connection.close()

    wait_until(drained_through_other_node, timeout=30, what="the messages consumed through another node")
    assert received == bodies

    taken = cluster.start_node(leader)
    assert cluster.wait_until_clustered(3, via=leader) == sorted(cluster.nodes)
    wait_until(lambda: all_members_online(leader), timeout=30, what="the three members online again")
    print(f"\nstop_node({leader}) took {cluster.timings[f'stop_node({leader})']:.1f} s, start_node {taken:.1f} s")

    connection = connect(cluster.urls[leader])
    try:
        channel = connection.channel()
        assert channel.queue_declare(name, passive=True).method.message_count == 0
        channel.queue_delete(name)
    finally:
        connection.close()


def test_a_killed_node_closes_its_port_and_rejoins_when_started(rabbitmq_cluster):
    cluster = rabbitmq_cluster
    victim = cluster.size - 1
    group = cluster.pid(victim)
    commands = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in processes_in_group(group)}
    assert {"rabbitmq-server", "beam.smp"} <= commands, commands

    cluster.kill_node(victim)
    assert not port_open(cluster.amqp_ports[victim])
    assert not port_open(cluster.dist_ports[victim])
    assert processes_in_group(group) == [], "a process of the killed node survived"
    assert cluster.nodes[victim] not in cluster.wait_until_clustered(2, via=0)

    taken = cluster.start_node(victim)
    assert cluster.wait_until_clustered(3, via=0) == sorted(cluster.nodes)
    connect(cluster.urls[victim]).close()
    print(f"\nkill_node({victim}) took {cluster.timings[f'kill_node({victim})']:.2f} s, start_node {taken:.1f} s")
