"""The bench stopped while its relay processes wait to start draining leaves none of them running."""

import multiprocessing
import types

import pytest
from django.db import connection

from harness import bench

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.rabbitmq]


@pytest.mark.django_db(transaction=True)
def test_a_bench_stopped_once_its_relays_are_up_stops_them(monkeypatch):
    """Ctrl-C (or SIGTERM, which the bench turns into an exit) right after the relays said they were
    ready: they wait for a start signal that never comes, and the bench waited for them for ever."""

    def stopped():
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "time", types.SimpleNamespace(perf_counter=stopped))  # the clock starts: stopped
    database = connection.settings_dict
    url = f"postgres://{database['USER']}@{database['HOST']}:{database['PORT']}/{database['NAME']}"
    before = set(multiprocessing.active_children())
    try:
        with pytest.raises(KeyboardInterrupt):
            bench.drain_with_relay_processes(1, database_url=url)
        left = set(multiprocessing.active_children()) - before
        assert left == set(), f"relay processes still running: {left}"
    finally:
        for child in set(multiprocessing.active_children()) - before:  # without the fix: not left behind
            child.kill()
            child.join(10)
