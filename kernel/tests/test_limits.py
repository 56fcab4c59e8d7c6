"""Event-storm guards: a per-subscriber concurrency limit and rate limit, with Dramatiq's rate limiters."""

import os

import dramatiq
import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from dramatiq.middleware import TimeLimit
from outbox_tests.probe import handlers
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping
from outbox_tests.servers import skip_unless_given
from outbox_tests.waiting import wait_until

from outbox.handling import limits
from outbox.models import DeadLetter
from outbox.relaying.relay import Relay

pytestmark = pytest.mark.integration


@pytest.fixture
def limits_redis(settings):
    """The Redis the limiters count in: OUTBOX_LIMITS_REDIS_URL (CI sets it) or the broker's own."""
    settings.OUTBOX_LIMITS_REDIS_URL = os.environ.get("OUTBOX_LIMITS_REDIS_URL", "")
    if not isinstance(getattr(dramatiq.get_broker(), "client", None), redis.Redis):
        skip_unless_given("redis")
    return settings


def test_a_concurrency_limit_holds_across_every_worker_thread(worker, broker, limits_redis):
    limits_redis.OUTBOX_SUBSCRIBER_LIMITS = {"probe_a": {"concurrency": 1}}
    handlers.running_high_water[0] = 0
    for n in range(8):
        ping(n=n, fail={"probe_a": "slow"})

    Relay(broker=broker).drain()

    wait_until(
        lambda: Effect.objects.filter(subscriber="probe_a").count() == 8,
        timeout=60,
        what="all 8 to be handled one at a time",
    )
    assert handlers.running_high_water[0] == 1  # 8 worker threads, yet never two at once
    assert not DeadLetter.objects.exists()  # waiting for a slot spends no retry


def test_a_rate_limit_starts_no_more_than_its_share_per_second(worker, broker, limits_redis):
    limits_redis.OUTBOX_SUBSCRIBER_LIMITS = {"probe_a": {"per_second": 3}}
    for n in range(9):
        ping(n=n)

    Relay(broker=broker).drain()

    wait_until(lambda: Effect.objects.filter(subscriber="probe_a").count() == 9, timeout=60, what="all 9 to be handled")
    started = sorted(handled_at("probe_a"))
    # Nine at three a second need three one-second windows: the first and last start are over
    # a second apart (unlimited, eight threads start them within milliseconds).
    assert started[-1] - started[0] > 1.0, started
    assert not DeadLetter.objects.exists()


def handled_at(subscriber: str) -> list[float]:
    from outbox.models import InboxMessage

    return [row.processed_at.timestamp() for row in InboxMessage.objects.filter(subscriber=subscriber)]


def test_limits_without_a_redis_to_count_in_fail_at_start_up(settings, monkeypatch):
    settings.OUTBOX_SUBSCRIBER_LIMITS = {"probe_a": {"concurrency": 2}}
    settings.OUTBOX_LIMITS_REDIS_URL = ""
    monkeypatch.setattr(dramatiq, "get_broker", lambda: object())  # a broker that is not Redis

    with pytest.raises(ImproperlyConfigured, match="OUTBOX_LIMITS_REDIS_URL"):
        limits.check_configuration()


def test_a_concurrency_slot_outlives_the_longest_a_handler_may_run(limits_redis):
    limits_redis.OUTBOX_SUBSCRIBER_LIMITS = {"probe_a": {"concurrency": 2}}
    (slot,) = limits._limiters("probe_a", limits._limits_key())
    (time_limit,) = [m.time_limit for m in dramatiq.get_broker().middleware if isinstance(m, TimeLimit)]

    # A slot that expires while its handler still runs lets one more in than the cap.
    assert slot.ttl > time_limit
