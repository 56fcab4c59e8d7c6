"""The relay's LISTEN: on a connection of its own, and it says so when NOTIFYs stop reaching it."""

import logging
import socket
import threading

import pytest
from django.conf import settings
from django.db import connection
from outbox_tests.sessions import connection_params
from outbox_tests.waiting import wait_until
from prometheus_client import REGISTRY

from outbox.core import wake_up

pytestmark = [pytest.mark.integration, pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _unheard() -> float | None:
    return REGISTRY.get_sample_value("outbox_relay_notify_unheard")


def _listen_params(**changes) -> dict:
    """Where the relay listens: direct to the server (OUTBOX_LISTEN_CONNECTION under test-pgbouncer)."""
    if settings.OUTBOX_LISTEN_CONNECTION:
        return {**settings.OUTBOX_LISTEN_CONNECTION, **changes}
    return {**connection_params(), **changes}


def _listening(application_name: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE application_name = %s", [application_name])
        return [query for (query,) in cursor.fetchall()]


def test_a_listen_that_hears_no_notify_is_reported_and_recovers(settings, monkeypatch, caplog):
    # LISTEN in another database of the same server hears nothing of this one's NOTIFYs: deaf the
    # way a LISTEN through PgBouncer's transaction pool is (tests/e2e/test_pgbouncer.py shows that one).
    direct = settings.OUTBOX_LISTEN_CONNECTION  # None, or under ./dev test-pgbouncer the URL around it
    settings.OUTBOX_LISTEN_CONNECTION = _listen_params(dbname="postgres", application_name="deaf-listen")
    settings.OUTBOX_LISTEN_CHECK_SECONDS = 0.5
    monkeypatch.setattr(wake_up.ListenForNotify, "PROBE_DEADLINE_SECONDS", 0.5)
    caplog.set_level(logging.WARNING, logger="outbox.core.wake_up")
    waiter = wake_up.ListenForNotify(threading.Event())
    try:
        assert _listening("deaf-listen") == [f"LISTEN {wake_up.NOTIFY_CHANNEL}"]  # its own connection
        wait_until(lambda: waiter(0.2) or "relay wake-ups lost" in caplog.text, timeout=10, what="the warning")
        assert "OUTBOX_LISTEN_CONNECTION" in caplog.text
        assert _unheard() == 1

        settings.OUTBOX_LISTEN_CONNECTION = direct  # the operator points it right; it listens anew
        waiter.conn.close()
        wait_until(lambda: waiter(0.2) or _unheard() == 0, timeout=10, what="the probe to be heard")
        assert "relay wake-ups work again" in caplog.text
    finally:
        waiter.close()


def test_a_listen_that_hears_says_nothing_and_still_wakes_on_each_row(settings, caplog):
    settings.OUTBOX_LISTEN_CONNECTION = _listen_params(application_name="good-listen")
    settings.OUTBOX_LISTEN_CHECK_SECONDS = 0.1
    caplog.set_level(logging.WARNING, logger="outbox.core.wake_up")
    wake_up.NOTIFY_UNHEARD.set(0)  # the gauge is the process's: a deaf relay of an earlier test may have set it
    waiter = wake_up.ListenForNotify(threading.Event())
    try:
        for _ in range(10):  # its probes, heard and not taken for rows
            waiter(0.2)
        assert not waiter.unheard
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, '')", [wake_up.NOTIFY_CHANNEL])  # what a committed row sends
        woke = threading.Event()
        waiting = threading.Thread(target=lambda: (waiter(30), woke.set()))
        waiting.start()
        waiting.join(10)
        assert woke.is_set(), "a NOTIFY did not wake it"
        assert "wake-ups lost" not in caplog.text and _unheard() in (None, 0)
    finally:
        waiter.close()


def test_a_relay_started_while_the_database_is_away_listens_once_it_answers(settings, caplog):
    """A LISTEN that failed as the relay started left it polling for good."""
    with socket.socket() as probe:  # a port nobody listens on: the database, away
        probe.bind(("127.0.0.1", 0))
        away = probe.getsockname()[1]
    good = _listen_params(application_name="late-listen")
    settings.OUTBOX_LISTEN_CONNECTION = {**good, "host": "127.0.0.1", "port": away}
    caplog.set_level(logging.WARNING, logger="outbox.core.wake_up")
    waiter = wake_up.waiter(threading.Event())
    try:
        assert isinstance(waiter, wake_up.ListenForNotify), "it gave up listening for good"
        waiter(0.1)  # polls meanwhile
        assert "polling meanwhile" in caplog.text

        settings.OUTBOX_LISTEN_CONNECTION = good  # the database is back
        waiter(0.1)
        assert _listening("late-listen") == [f"LISTEN {wake_up.NOTIFY_CHANNEL}"]
    finally:
        waiter.close()


def test_an_unheard_probe_listens_again_on_a_new_connection_by_itself(settings, monkeypatch, caplog):
    """The warning was all; the deaf connection stayed, and only a restart listened anew."""
    good = _listen_params(application_name="deaf-then-heard")
    settings.OUTBOX_LISTEN_CONNECTION = {**good, "dbname": "postgres"}  # deaf: another database's NOTIFYs
    settings.OUTBOX_LISTEN_CHECK_SECONDS = 0.5
    monkeypatch.setattr(wake_up.ListenForNotify, "PROBE_DEADLINE_SECONDS", 0.5)
    caplog.set_level(logging.WARNING, logger="outbox.core.wake_up")
    waiter = wake_up.ListenForNotify(threading.Event())
    try:
        wait_until(lambda: waiter(0.2) or "relay wake-ups lost" in caplog.text, timeout=10, what="the warning")
        settings.OUTBOX_LISTEN_CONNECTION = good
        # No one closes its connection this time: the unheard probe made it listen anew.
        wait_until(
            lambda: waiter(0.2) or "relay wake-ups work again" in caplog.text, timeout=10, what="the probe heard"
        )
    finally:
        waiter.close()
