"""What a relay remembers between rounds about copies it could not hand over.

A queue that returns the relay's copies as unroutable (it is missing, or its cluster node is
down) is an outage, not a poison row: it is logged once when it starts and once when it ends,
gauged (`outbox_queue_unavailable`), its rows wait 0.5 s, doubling up to 5 s, uncounted, and after
OUTBOX_RELAY_QUEUE_WAIT_SECONDS it is overdue (the relay then sets its copies aside). And by row,
the subscribers whose copy the broker took already: a row sent again goes to the others only.
Both live in the relay's memory: another relay that claims the row sends it to every subscriber,
and the inboxes absorb the copies.
"""

import logging
import time

from django.conf import settings

from outbox.observability.metrics import QUEUE_UNAVAILABLE

logger = logging.getLogger("outbox.relaying.relay")

# A row whose queue is down waits this long before it is sent again, doubling up to the maximum.
QUEUE_RETRY_SECONDS, QUEUE_RETRY_MAX_SECONDS = 0.5, 5.0
# Rows remembered at most (forgetting one only sends its reached queues a copy again).
REMEMBERED_ROWS = 100_000


class QueueUnavailable(Exception):
    """A subscriber's queue has returned the relay's copies as unroutable for too long."""


class QueueOutages:
    """The queues down, by name: since when (monotonic), and the wait before their next try."""

    def __init__(self):
        self.down: dict[str, tuple[float, float]] = {}

    def __bool__(self) -> bool:
        return bool(self.down)

    def returned(self, queues: set[str]) -> float:
        """Copies to `queues` came back: note the new outages; how long their rows now wait."""
        now = time.monotonic()
        for queue in sorted(queues - self.down.keys()):
            logger.warning("queue %s is unavailable (the broker returns its copies): its rows wait", queue)
            QUEUE_UNAVAILABLE.labels(queue).set(1)
            self.down[queue] = (now, QUEUE_RETRY_SECONDS)
        wait = max(self.down[queue][1] for queue in queues)
        for queue in queues:
            since, current = self.down[queue]
            self.down[queue] = (since, min(current * 2, QUEUE_RETRY_MAX_SECONDS))
        return wait

    def overdue(self, queues: set[str]) -> list[str]:
        """Those of `queues` down for longer than OUTBOX_RELAY_QUEUE_WAIT_SECONDS."""
        now, bound = time.monotonic(), settings.OUTBOX_RELAY_QUEUE_WAIT_SECONDS
        return sorted(queue for queue in queues if queue in self.down and now - self.down[queue][0] > bound)

    def taken(self, queues: set[str]) -> None:
        """Copies to `queues` were confirmed: any outage of theirs is over."""
        for queue in sorted(queues & self.down.keys()):
            since, _ = self.down.pop(queue)
            logger.warning("queue %s takes copies again after %.1f s", queue, time.monotonic() - since)
            QUEUE_UNAVAILABLE.labels(queue).set(0)


class Reached(dict):
    """Row id -> the subscribers whose copy of it the broker took, while the row waits for others."""

    def add(self, row_id: int, subscribers) -> None:
        if not subscribers:
            return
        self.setdefault(row_id, set()).update(subscribers)
        while len(self) > REMEMBERED_ROWS:
            self.pop(next(iter(self)))  # the oldest
