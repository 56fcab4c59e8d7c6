"""Event-storm guards per subscriber, with Dramatiq's rate limiters: settings.OUTBOX_SUBSCRIBER_LIMITS.

    OUTBOX_SUBSCRIBER_LIMITS = {"notifications": {"concurrency": 4, "per_second": 50}}

`concurrency` caps how many of the subscriber's messages are handled at once across every
worker process; `per_second` caps how many start in each second. The counters live in Redis:
OUTBOX_LIMITS_REDIS_URL, or the broker's own Redis when the broker is Redis (the embedded
default). A message over a limit is put back with a short delay, without spending a retry.
"""

from contextlib import ExitStack, contextmanager
from functools import cache

import dramatiq
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from dramatiq.middleware import TimeLimit
from dramatiq.rate_limits import ConcurrentRateLimiter, RateLimiter, WindowRateLimiter

# A worker that dies holding a slot frees it after this much longer than Dramatiq lets a handler
# run: a slot that expired while its handler still ran would let one more in than the cap.
SLOT_TTL_MARGIN_MS = 60_000


def slot_ttl_ms() -> int:
    """Longer than the longest a handler may run (the broker's TimeLimit middleware), plus a margin."""
    limits = [m.time_limit for m in dramatiq.get_broker().middleware if isinstance(m, TimeLimit)]
    return int(max(limits, default=TimeLimit().time_limit)) + SLOT_TTL_MARGIN_MS


@contextmanager
def within_limits(subscriber: str):
    """Hold the subscriber's slots while the block runs; raises RateLimitExceeded when over a limit."""
    with ExitStack() as stack:
        for limiter in _limiters(subscriber, _limits_key()):
            stack.enter_context(limiter.acquire(raise_on_failure=True))
        yield


def _limits_key() -> str:
    # Settings are read at call time; the cache is keyed by them so an override takes effect.
    return repr(sorted(settings.OUTBOX_SUBSCRIBER_LIMITS.items())) + settings.OUTBOX_LIMITS_REDIS_URL


@cache
def _limiters(subscriber: str, _key: str) -> tuple[RateLimiter, ...]:
    limits = settings.OUTBOX_SUBSCRIBER_LIMITS.get(subscriber)
    if not limits:
        return ()
    unknown = set(limits) - {"concurrency", "per_second"}
    if unknown:
        raise ImproperlyConfigured(f"OUTBOX_SUBSCRIBER_LIMITS[{subscriber!r}] has unknown keys {sorted(unknown)}")
    backend = _backend()
    key = f"{settings.OUTBOX_QUEUE_PREFIX}limits:{subscriber}"
    limiters: list[RateLimiter] = []
    if limits.get("concurrency"):
        limiters.append(
            ConcurrentRateLimiter(backend, f"{key}:concurrency", limit=limits["concurrency"], ttl=slot_ttl_ms())
        )
    if limits.get("per_second"):
        limiters.append(WindowRateLimiter(backend, f"{key}:per_second", limit=limits["per_second"], window=1))
    return tuple(limiters)


def _backend():
    """Dramatiq's Redis backend for the counters; Redis's client is loaded only by a project with limits."""
    import redis
    from dramatiq.rate_limits.backends import RedisBackend

    if settings.OUTBOX_LIMITS_REDIS_URL:
        return RedisBackend(client=redis.Redis.from_url(settings.OUTBOX_LIMITS_REDIS_URL))
    broker_client = getattr(dramatiq.get_broker(), "client", None)
    if isinstance(broker_client, redis.Redis):
        return RedisBackend(client=broker_client)
    raise ImproperlyConfigured(
        "OUTBOX_SUBSCRIBER_LIMITS needs a Redis for its counters: set OUTBOX_LIMITS_REDIS_URL=redis://..."
    )


def check_configuration() -> None:
    """Fail at start-up, not at the first message, when limits are set but have nowhere to count."""
    if settings.OUTBOX_SUBSCRIBER_LIMITS:
        _backend()
