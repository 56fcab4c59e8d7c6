"""The 3-node RabbitMQ cluster rig (harness/rabbitmq_cluster.py) does what the cluster tests rely on.

One cluster for the whole session (the `rabbitmq_cluster` fixture in tests/conftest.py, started
once: ~15-25 s on this machine), shared with the cluster tests; each test leaves its three nodes
running again. A node stopped under a quorum queue's leader, and the choreography through it, are
in tests/e2e/test_rabbitmq_cluster.py.
"""

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pika
import pika.exceptions
import pytest

from harness.rabbitmq_cluster import RABBITMQ_BIN
from harness.rig_processes import epmd_names, port_open, processes_in_group
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.rabbitmq,
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
