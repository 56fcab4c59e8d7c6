"""Relay throughput, measured (not asserted): `./dev test -m benchmark -s`.

Publishes N probe events (2 subscribers each) and times relays draining them to the
configured broker with publisher confirms on. The figures go to docs/benchmarks.md.
"""

import os
import threading
import time

import pytest
from django.db import connection
from outbox_tests.relaying import in_thread, publish_many

from outbox.models import OutboxMessage
from outbox.relaying.relay import Relay

pytestmark = pytest.mark.benchmark
EVENTS = int(os.environ.get("BENCH_EVENTS", "10000"))


@pytest.mark.parametrize("relays", [1, 2, 4])
def test_relay_throughput(broker, transactional_db, relays):
    publish_many(EVENTS)
    instances = [Relay(broker=broker) for _ in range(relays)]
    start = threading.Barrier(relays + 1)

    def drain(relay):
        start.wait()
        relay.drain()

    threads = [in_thread(drain, r) for r in instances]
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began

    assert OutboxMessage.objects.filter(published_at__isnull=True).count() == 0
    copies = EVENTS * 2
    print(
        f"\n[bench] {connection.vendor} + {type(broker).__name__}: {relays} relay(s) relayed {EVENTS} events "
        f"({copies} messages, 2 subscribers) in {elapsed:.2f} s = {EVENTS / elapsed:.0f} events/s, "
        f"{copies / elapsed:.0f} messages/s"
    )
