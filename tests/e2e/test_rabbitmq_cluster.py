"""The choreography on a 3-node RabbitMQ cluster (issue 21): quorum queues, every node in
BROKER_URL, and deliveries still made while the node leading the queues is stopped and while
another is killed with SIGKILL. The cluster is the tests' own (harness/rabbitmq_cluster.py)."""

import subprocess

import pytest
from django.conf import settings

from deliveries.models import Delivery
from drones.services import seed_fleet
from harness.rabbitmq_cluster import quorum_queue
from tests.e2e.fault_ledger import delivered_once_each, median_and_max
from tests.factories import BASE, Customer, delivery_request
from tests.processes import MANAGE
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.rabbitmq, pytest.mark.slow]
BOUND_SECONDS = 60  # request to delivered, for every delivery, faults included


def delivered_in(count: int, since_count: int) -> None:
    wait_until(
        lambda: Delivery.objects.filter(status="delivered").count() == since_count + count,
        timeout=120,
        what=f"{count} more deliveries delivered",
    )


def test_deliveries_go_on_while_the_queues_leader_is_stopped_and_another_node_is_killed(
    env, rabbitmq_cluster, tmp_path
):
    cluster = rabbitmq_cluster
    prefix = f"{settings.OUTBOX_QUEUE_PREFIX}cluster-"
    on_the_cluster = {
        **env,
        "BROKER_URL": " ".join(f"{url}?heartbeat=5" for url in cluster.urls),
        "RABBITMQ_QUEUE_TYPE": "quorum",
        "OUTBOX_QUEUE_PREFIX": prefix,
    }
    seed_fleet(count=20, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")
    logs = {name: (tmp_path / f"{name}.log").open("w") for name in ("workers", "relay")}
    processes = [
        subprocess.Popen(
            [*MANAGE, "rundramatiq", "--processes", "1", "--threads", "4"],
            env=on_the_cluster,
            stdout=logs["workers"],
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [*MANAGE, "relay_outbox", "--progress-every", "0"],
            env=on_the_cluster,
            stdout=logs["relay"],
            stderr=subprocess.STDOUT,
        ),
    ]

    def request(n: int) -> None:
        for _ in range(n):
            assert alice.request(delivery_request()).status_code == 202

    try:
        request(10)  # no fault: the reference
        delivered_in(10, 0)
        queue = wait_until(
            lambda: (q := quorum_queue(cluster, 0, f"{prefix}deliveries")) and len(q.get("online", ())) == 3 and q,
            timeout=30,
            what="the deliveries queue on three members",
        )
        assert queue["type"] == "quorum"
        leader = cluster.nodes.index(queue["leader"])

        cluster.stop_node(leader)  # the node leading the deliveries queue, gracefully
        request(10)
        delivered_in(10, 10)
        cluster.start_node(leader)

        killed = (leader + 1) % cluster.size
        cluster.kill_node(killed)  # another node, without warning
        request(10)
        delivered_in(10, 20)
        cluster.start_node(killed)
        cluster.wait_until_clustered(3)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(30)
        for log in logs.values():
            log.close()

    took = delivered_once_each(30)
    phases = {"no fault": took[:10], "leader stopped": took[10:20], "node killed": took[20:]}
    print(f"\n[cluster] request -> delivered, s (median / max): {median_and_max(phases)}")
    assert max(took) <= BOUND_SECONDS
