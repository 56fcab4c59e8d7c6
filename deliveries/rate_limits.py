"""Per-customer rate limits on the API, through django-ninja's throttling hook.

ninja's own AuthRateThrottle keeps a list of every request's timestamp in the cache and rewrites
it on each call: at a limit of thousands a minute that is a list of thousands, and two web
processes reading it at once both write their own copy back. This throttle counts in fixed
windows with the cache's `incr` instead, one small key per customer and window, atomic on Redis,
in Django's cache that every web process shares (Redis with DJANGO_CACHE_URL, else a database
table).
"""

import threading
import time

from django.conf import settings
from django.core.cache import cache
from ninja.throttling import BaseThrottle, SimpleRateThrottle


def parse_rate(rate: str) -> tuple[int, int]:
    """`100/min` → (100, 60); the forms ninja and DRF accept: s, sec, m, min, h, hour, d, day."""
    count, seconds = SimpleRateThrottle.parse_rate(SimpleRateThrottle, rate)
    return count, seconds


class CustomerRateThrottle(BaseThrottle):
    """At most API_RATE_LIMIT requests per customer (per address before authentication) a window."""

    def __init__(self):
        self._last = threading.local()  # ninja shares one throttle between the threads of a process

    def allow_request(self, request) -> bool:
        rate = settings.API_RATE_LIMIT
        if not rate:
            return True
        limit, seconds = parse_rate(rate)
        customer = getattr(request, "auth", None)
        who = f"customer:{customer.pk}" if customer is not None else f"address:{self.get_ident(request)}"
        now = time.time()
        window = int(now // seconds)
        key = f"api-rate:{who}:{seconds}:{window}"
        cache.add(key, 0, timeout=seconds + 1)
        try:
            count = cache.incr(key)
        except ValueError:  # expired or evicted between add and incr
            cache.set(key, 1, timeout=seconds + 1)
            count = 1
        self._last.wait = (window + 1) * seconds - now
        return count <= limit

    def wait(self) -> float:
        return self._last.wait
