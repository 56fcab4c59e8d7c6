"""The choreography on a 3-node RabbitMQ cluster: quorum queues, every node in
BROKER_URL, and deliveries still made while the node leading the queues is stopped and while
another is killed with SIGKILL. The cluster is the tests' own (harness/rabbitmq_cluster.py)."""

import contextlib
import subprocess
import threading
import time

import pytest
from django.conf import settings
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.relaying import effects_per_message

from deliveries.models import Delivery
from drones.services import seed_fleet
from harness.rabbitmq_cluster import quorum_queue
from outbox.models import DeadLetter
from tests.e2e.fault_ledger import delivered_once_each, median_and_max
from tests.factories import BASE, Customer, delivery_request
from tests.processes import MANAGE
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.rabbitmq, pytest.mark.slow]
BOUND_SECONDS = 60  # request to delivered, for every delivery, faults included


def cluster_env(env: dict, cluster, prefix: str, **more: str) -> dict:
    """The processes' environment on the rig's cluster: every node in BROKER_URL, quorum queues."""
    return {
        **env,
        "BROKER_URL": " ".join(f"{url}?heartbeat=5" for url in cluster.urls),
        "RABBITMQ_QUEUE_TYPE": "quorum",
        "OUTBOX_QUEUE_PREFIX": prefix,
        **more,
    }


@contextlib.contextmanager
def processes(tmp_path):
    """start(name, env, *command): manage.py <command>, logging to tmp_path/<name>.log; each is
    terminated, and waited for, at the end."""
    started, logs = [], []

    def start(name: str, env: dict, *command: str) -> None:
        logs.append((tmp_path / f"{name}.log").open("w"))
        started.append(subprocess.Popen([*MANAGE, *command], env=env, stdout=logs[-1], stderr=subprocess.STDOUT))

    try:
        yield start
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(30)
        for log in logs:
            log.close()


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
    on_the_cluster = cluster_env(env, cluster, prefix := f"{settings.OUTBOX_QUEUE_PREFIX}cluster-")
    seed_fleet(count=20, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")

    def request(n: int) -> None:
        for _ in range(n):
            assert alice.request(delivery_request()).status_code == 202

    with processes(tmp_path) as start:
        start("workers", on_the_cluster, "rundramatiq", "--processes", "1", "--threads", "4")
        start("relay", on_the_cluster, "relay_outbox", "--progress-every", "0")
        request(10)  # no fault: the reference
        delivered_in(10, 0)
        queue = wait_until(
            lambda: (q := quorum_queue(cluster, 0, f"{prefix}deliveries")) and len(q.get("online", ())) == 3 and q,
            timeout=90,
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

    took = delivered_once_each(30)
    phases = {"no fault": took[:10], "leader stopped": took[10:20], "node killed": took[20:]}
    print(f"\n[cluster] request -> delivered, s (median / max): {median_and_max(phases)}")
    assert max(took) <= BOUND_SECONDS


def test_rows_in_flight_through_a_quorum_leaders_loss_all_arrive(env, rabbitmq_cluster, tmp_path):
    """After a nack (a quorum queue losing its leader) the relay went on sending on the
    channel that nacked, which kept nacking that queue's copies for as long as anything was in
    flight on it, and a streaming relay under load always has something in flight: its rows used up
    their attempts and were set aside as `unsendable`. Here the relay talks to the nodes that
    survive, pings are published at about 100 a second for 10 s after the leader of probe_a's queue
    is killed, and a row is set aside after 3 attempts (2 + 4 s of nacks)."""
    cluster = rabbitmq_cluster
    prefix = f"{settings.OUTBOX_QUEUE_PREFIX}leader-"
    on_the_cluster = cluster_env(env, cluster, prefix, OUTBOX_RELAY_MAX_SEND_ATTEMPTS="3")
    published, pace = [], threading.Event()

    def publish_for(seconds: float) -> None:
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            published.append(ping(n=len(published)))
            pace.wait(0.01)  # about 100 rows a second: the relay streams, never idle

    with processes(tmp_path) as start:
        start("workers", on_the_cluster, "rundramatiq", "--processes", "1", "--threads", "4")
        queue = wait_until(
            lambda: (q := quorum_queue(cluster, 0, f"{prefix}probe_a")) and len(q.get("online", ())) == 3 and q,
            timeout=90,
            what="probe_a's queue on three members (the workers declare it)",
        )
        leader = cluster.nodes.index(queue["leader"])
        survivors = " ".join(f"{url}?heartbeat=5" for i, url in enumerate(cluster.urls) if i != leader)
        # Its channel outlives the leader.
        start("relay", {**on_the_cluster, "BROKER_URL": survivors}, "relay_outbox", "--progress-every", "0")
        publish_for(2)
        cluster.kill_node(leader)  # with copies in flight to it
        publish_for(10)
        cluster.start_node(leader)
        wait_until(
            lambda: Effect.objects.count() == 2 * len(published),
            timeout=180,
            what="every row handled by both subscribers",
        )
        cluster.wait_until_clustered(3)

    assert not DeadLetter.objects.exists(), list(DeadLetter.objects.values_list("subscriber", "reason", "error"))
    assert effects_per_message() == {1: 2 * len(published)}
    nacked = (tmp_path / "relay.log").read_text().count("the broker refused a copy")
    print(f"\n[cluster] {len(published)} rows, {nacked} refusals logged by the relay through the leader's loss")
