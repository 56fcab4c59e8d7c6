"""Heartbeats: the relay and every worker process say they are alive and what they
did; the messaging overview shows them, and a silent one stands out."""

from datetime import timedelta

import pytest
from django.core.management import CommandError
from django.utils import timezone
from outbox_tests.clocks import a_clock_off_by

from drones.services import seed_fleet
from outbox.management.commands.move_context import refuse_beside_running_processes
from outbox.models import Heartbeat
from outbox.relaying.heartbeats import alive, beat, seen_within_a_day
from tests.factories import BASE, Customer
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def test_relay_and_worker_beat_and_the_overview_shows_them_and_a_silent_one(system, admin_client):
    seed_fleet(count=1, latitude=BASE[0], longitude=BASE[1])
    Customer("alice").request()

    def both_beat_with_work_done():
        relay = Heartbeat.objects.filter(kind="relay", relayed__gt=0).first()
        worker = Heartbeat.objects.filter(kind="worker", handled__gt=0).first()
        return relay and worker and (relay, worker)

    relay, worker = wait_until(both_beat_with_work_done, timeout=30, what="a relay and a worker heartbeat with work")
    page = admin_client.get("/admin/outbox/outboxmessage/overview/").content.decode()
    assert relay.process in page and worker.process in page and "silent for" not in page

    Heartbeat.objects.filter(pk=relay.pk).update(last_seen=timezone.now() - timedelta(minutes=5))
    Heartbeat.objects.filter(pk=worker.pk).update(last_seen=timezone.now() - timedelta(days=2))
    page = admin_client.get("/admin/outbox/outboxmessage/overview/").content.decode()

    assert "silent for 300 s" in page or "silent for 301 s" in page  # five minutes: flagged
    assert worker.process not in page  # gone for a day: no longer listed


def test_two_workers_in_one_process_each_stop_their_own_heartbeat(broker, transactional_db):
    import threading

    import dramatiq

    def beating() -> int:
        return sum(thread.name == "heartbeat" and thread.is_alive() for thread in threading.enumerate())

    before = beating()
    workers = [dramatiq.Worker(broker, worker_threads=1, worker_timeout=100) for _ in range(2)]
    for worker in workers:
        worker.start()
    assert beating() == before + 2

    for worker in workers:
        worker.stop(timeout=10_000)

    wait_until(lambda: beating() == before, timeout=10, what="both heartbeat threads to end")


def test_a_worker_heartbeat_gives_its_connection_back_between_beats(transactional_db):
    """A pooled connection held by the heartbeat thread for good left the handlers' threads, which
    DJANGO_DB_POOL_MAX_SIZE is sized for, one short."""
    import threading

    from django.db import connection

    from outbox.relaying.heartbeats import WorkerHeartbeat

    class OneBeat(threading.Event):
        """The heartbeat's stop: it looks at the thread's connection between two beats, then stops it."""

        def wait(self, timeout=None):
            self.holding = connection.connection is not None  # runs in the heartbeat thread
            self.set()
            return True

    stop = OneBeat()
    beating = threading.Thread(target=WorkerHeartbeat()._beat, args=(stop,))
    beating.start()
    beating.join(10)

    assert not beating.is_alive() and stop.holding is False


def a_beat_from_a_host_whose_clock_is_off_by(monkeypatch, seconds: float, *, process: str) -> None:
    a_clock_off_by(monkeypatch, seconds)
    beat(process=process, kind="worker", started_at=timezone.now())
    monkeypatch.undo()  # the reader's host: a right clock


@pytest.mark.postgres
def test_a_worker_whose_clock_is_a_minute_behind_is_running_to_move_context_and_the_overview(db, monkeypatch):
    """Its beat is stamped on the database's clock: just written, it is recent, wherever the
    worker's host's clock is. A minute behind (120 beats), it would read as silent while it runs,
    and the move would go on beside it."""
    a_beat_from_a_host_whose_clock_is_off_by(monkeypatch, -60, process="worker@behind:7")

    with pytest.raises(CommandError, match=r"still running: worker@behind:7 \(seen \d+ s ago, in default\)"):
        refuse_beside_running_processes(["default"])
    [seen] = [s for s in seen_within_a_day()[0] if s["process"] == "worker@behind:7"]
    assert seen["silent"] is False


@pytest.mark.postgres
def test_a_worker_whose_clock_is_a_minute_ahead_is_taken_for_gone_three_beats_after_its_last(db, monkeypatch):
    """Stamped with its host's time, its last beat would keep it alive a minute after it stopped."""
    a_beat_from_a_host_whose_clock_is_off_by(monkeypatch, 60, process="worker@ahead:7")
    assert [process for process, _ in alive("default")] == ["worker@ahead:7"]

    wait_until(lambda: not alive("default"), timeout=15, what="the stopped worker's heartbeat to go silent")
    refuse_beside_running_processes(["default"])
    [seen] = [s for s in seen_within_a_day()[0] if s["process"] == "worker@ahead:7"]
    assert seen["silent"] is True
