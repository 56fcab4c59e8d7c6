"""Relays and workers on two hosts. Each host is a network namespace of its own and
reaches PostgreSQL and the 3-node RabbitMQ cluster only over its veth link (tests/network_hosts.py).
Host 1 is cut off while it is busy, then plugged back in. The test checks four things: host 2's
workers get the messages host 1 held unacknowledged; host 2's relay sends the rows whose leases
host 1 held, once those leases have run out; nothing is lost or applied twice; host 1 rejoins by
itself. The web tier is the test process. Each process logs to tmp_path (h1-relay.log, ...), and
timeline.log records when each step happened."""

import threading
import time
from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from deliveries.models import Delivery
from drones.services import seed_fleet
from outbox.models import Heartbeat, InboxMessage, OutboxMessage
from tests.e2e.fault_ledger import delivered_once_each, median_and_max
from tests.factories import BASE, Customer, delivery_request
from tests.network_hosts import NetworkHosts, can_make_hosts
from tests.processes import MANAGE
from tests.waiting import wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.postgres,  # the hosts reach the test's database and broker through forwarders on TCP
    pytest.mark.rabbitmq,
    pytest.mark.skipif(not can_make_hosts(), reason="needs root and iproute2 for network namespaces (ip netns)"),
]
LEASE_SECONDS = 10  # the relays' lease (30 s by default): rows host 1 claimed are sent again this long after
HELD_FOR = 1.5  # a row leased and unsent this long is host 1's: host 2's relay marks its rows within milliseconds
BOUND_SECONDS = 45  # request to delivered, for every delivery, the cut included


def delivered_in(count: int, since_count: int) -> None:
    wait_until(
        lambda: Delivery.objects.filter(status="delivered").count() == since_count + count,
        timeout=90,
        what=f"{count} more deliveries delivered",
    )


def beats(host) -> dict[str, Heartbeat]:
    """The heartbeats of the host's relay and workers: their process names carry its hostname."""
    return {beat.process: beat for beat in Heartbeat.objects.filter(process__contains=f"@{host.hostname}:")}


def relay_beat(host) -> Heartbeat | None:
    return next((beat for beat in beats(host).values() if beat.kind == "relay"), None)


def handled(host_beats: dict[str, Heartbeat]) -> int:
    """Messages the host's worker processes have handled, as their heartbeats last said."""
    return sum(beat.handled for beat in host_beats.values() if beat.kind == "worker")


def peer_address(peer_host) -> str:
    """rabbitmqctl's JSON gives an IPv4 peer as a list of four numbers."""
    return ".".join(map(str, peer_host)) if isinstance(peer_host, list) else str(peer_host)


def on_the_broker(cluster, hosts, host) -> tuple[int, int]:
    """(consumers, unacknowledged messages) on the channels of the host's connections, as the
    cluster sees them. The host's forwarders connect from an address of its own."""
    answers = {}

    def ask(command, *columns):
        answers[command] = cluster.ctl_json(0, command, *columns)

    threads = [
        threading.Thread(target=ask, args=("list_connections", "pid", "peer_host")),
        threading.Thread(target=ask, args=("list_channels", "connection", "consumer_count", "messages_unacknowledged")),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    mine = {c["pid"] for c in answers["list_connections"] if peer_address(c["peer_host"]) == hosts.tag(host)}
    channels = [c for c in answers["list_channels"] if c["connection"] in mine]
    return sum(c["consumer_count"] for c in channels), sum(c["messages_unacknowledged"] for c in channels)


def rows_held_by_host_1() -> dict[int, object]:
    """Unpublished rows leased at least HELD_FOR seconds ago and still leased, with their lease's end."""
    claimed_before = timezone.now() + timedelta(seconds=LEASE_SECONDS - HELD_FOR)
    rows = OutboxMessage.objects.filter(
        published_at__isnull=True, claimed_until__gt=timezone.now(), claimed_until__lte=claimed_before
    )
    return dict(rows.values_list("id", "claimed_until"))


def test_a_host_cut_off_while_busy_is_taken_over_by_the_other_and_rejoins_by_itself(env, rabbitmq_cluster, tmp_path):
    cluster = rabbitmq_cluster
    common = {
        **env,
        "BROKER_URL": " ".join(f"{url}?heartbeat=5" for url in cluster.urls),
        "RABBITMQ_QUEUE_TYPE": "quorum",
        "OUTBOX_QUEUE_PREFIX": f"{settings.OUTBOX_QUEUE_PREFIX}hosts-",
        "OUTBOX_RELAY_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    common.pop("OUTBOX_LIMITS_REDIS_URL", None)  # no limits are configured, and the hosts could not reach it
    database_port = urlsplit(common["DATABASE_URL"]).port or 5432
    seed_fleet(count=20, latitude=BASE[0], longitude=BASE[1])
    alice = Customer("alice")
    timeline = tmp_path / "timeline.log"

    def mark(event: str) -> float:
        with timeline.open("a") as log:
            log.write(f"{timezone.now():%H:%M:%S.%f} {event}\n")
        return time.monotonic()

    def request(n: int) -> None:
        for _ in range(n):
            assert alice.request(delivery_request()).status_code == 202

    with NetworkHosts(2, ports=[database_port], tagged_ports=cluster.amqp_ports) as hosts:
        h1, h2 = hosts
        for host in hosts:
            on_host = {
                **common,
                "DATABASE_URL": host.reach(common["DATABASE_URL"]),
                "BROKER_URL": host.reach(common["BROKER_URL"]),
            }
            relay = [*MANAGE, "relay_outbox", "--progress-every", "0"]
            workers = [*MANAGE, "rundramatiq", "--processes", "1", "--threads", "2"]
            host.popen(relay, env=on_host, log=tmp_path / f"h{host.index}-relay.log")
            host.popen(workers, env=on_host, log=tmp_path / f"h{host.index}-workers.log")
        for host in hosts:
            wait_until(
                lambda host=host: {beat.kind for beat in beats(host).values()} == {"relay", "worker"},
                timeout=60,
                what=f"the relay and workers of {host.hostname} to beat",
            )
            assert relay_beat(host).process.endswith(f":{host.processes[0].pid}")  # ip netns exec ... execs the relay

        # Phase 1, no fault: the reference.
        mark("phase 1: 10 requests")
        request(10)
        delivered_in(10, 0)
        # A sample, not a wait, missed them once in CI: a loaded machine had a worker reconnecting.
        consumers = wait_until(
            lambda: on_the_broker(cluster, hosts, h1)[0],
            timeout=30,
            what="host 1's workers to consume through its own link",
        )
        host_2_before = beats(h2)

        # Phase 2: host 1 is cut off while its relay has copies in flight. First the broker's bytes to
        # host 1 stop while its own still get through: its relay claims rows, publishes them and waits
        # for confirms that do not come. Once it holds rows, its link goes down. Its workers, fed
        # nothing meanwhile, are idle by then: a worker cut off inside a transaction keeps its locks
        # on the server, which this test leaves out (docs/deployment.md, "Cut off inside a transaction").
        hosts.hold_replies(h1, cluster.amqp_ports)
        mark("phase 2: the broker's replies to host 1 held; 10 requests")
        request(10)
        wait_until(rows_held_by_host_1, timeout=7, what="host 1's relay to hold leased rows")
        hosts.cut(h1)
        cut_at = mark("host 1 cut off (link down)")
        cut_at_time = timezone.now()
        # Read at once: the broker's counts below take rabbitmqctl seconds on a loaded machine, and
        # a lease read after them had run out once in CI (8.5 s after the rows were seen held).
        held = rows_held_by_host_1()  # host 1's, all claimed before the cut
        _, unacknowledged = on_the_broker(cluster, hosts, h1)
        assert unacknowledged > 0, "the broker had handed host 1's workers no message it was waiting to hear back about"
        assert not h1.can_connect(database_port, timeout=0.5), "host 1 still reaches the database"
        assert held, "host 1's relay held no leased rows when it was cut off"
        mark(f"host 1 holds {unacknowledged} unacknowledged messages and {len(held)} leased rows")

        delivered_in(10, 10)  # by host 2 alone: host 1 reaches nothing
        mark("phase 2 delivered")
        published = dict(OutboxMessage.objects.filter(id__in=held).values_list("id", "published_at"))
        assert all(published[row] is not None and published[row] >= held[row] for row in held), (
            "a row host 1 held was sent again before its lease ran out"
        )
        for process, beat in beats(h1).items():
            assert beat.last_seen <= cut_at_time, f"{process} wrote to the database while cut off"
        host_2_after = beats(h2)
        relay_2 = relay_beat(h2).process
        assert host_2_after[relay_2].relayed > host_2_before[relay_2].relayed, "host 2's relay sent nothing"
        assert handled(host_2_after) > handled(host_2_before), "host 2's workers handled nothing"

        # Phase 3: host 1 plugged back in. It rejoins by itself: its relay and workers beat again, its
        # workers consume again, and it then does its share of the work.
        hosts.restore(h1)
        restored_at = mark("host 1 restored (link up)")
        cut_for = restored_at - cut_at
        restored_at_time = timezone.now()
        wait_until(
            lambda: all(beat.last_seen > restored_at_time for beat in beats(h1).values()),
            timeout=60,
            what="host 1's relay and workers to beat again",
        )
        beating_in = mark("host 1's relay and workers beat again") - restored_at
        wait_until(
            lambda: on_the_broker(cluster, hosts, h1)[0] >= consumers,
            timeout=60,
            what=f"host 1's {consumers} consumers back on the broker",
        )
        consuming_in = mark("host 1's consumers are back") - restored_at
        host_1_back = beats(h1)
        relay_1 = relay_beat(h1).process
        mark("phase 3: 10 requests")
        request(10)
        delivered_in(10, 20)
        mark("phase 3 delivered")
        wait_until(
            lambda: handled(beats(h1)) > handled(host_1_back), timeout=15, what="host 1's workers to handle messages"
        )
        wait_until(
            lambda: beats(h1)[relay_1].relayed > host_1_back[relay_1].relayed,
            timeout=15,
            what="host 1's relay to send rows",
        )

    assert not hosts.leftovers(), "a namespace or veth outlived the test"
    took = delivered_once_each(30)
    phases = {"no fault": took[:10], "host 1 cut off": took[10:20], "host 1 back": took[20:]}
    duplicates = InboxMessage.objects.aggregate(n=Sum("duplicates"))["n"] or 0
    print(
        f"\n[hosts] request -> delivered, s (median / max): {median_and_max(phases)}. "
        f"Host 1 cut off for {cut_for:.1f} s, holding {len(held)} leased rows and {unacknowledged} unacknowledged "
        f"messages; after the link came back it beat again in {beating_in:.1f} s and consumed again in "
        f"{consuming_in:.1f} s; {duplicates} duplicate copies absorbed by the inboxes"
    )
    assert max(took) <= BOUND_SECONDS
