"""A delivery's story as a sequence diagram (outbox.console.sequence_diagram), for operators and support.

Lanes for the customer (the API) and the four contexts, in the order a delivery goes through
them; an uncaused event of the deliveries context is drawn as the customer's request.
"""

from collections.abc import Callable

from django.utils import timezone

from deliveries import selectors
from deliveries.models import Delivery
from outbox.api import sequence_diagram

CUSTOMER = "customer (API)"
LANES = (CUSTOMER, "deliveries", "packages", "drones", "notifications")
SVG = "image/svg+xml"


def timeline_svg(delivery: Delivery, *, dead_letter_link: Callable[[int], str] | None = None) -> str:
    """Its pending timers included; `dead_letter_link` (the admin's) makes each dead letter a link."""
    return sequence_diagram(
        selectors.timeline(delivery, scheduled=True),
        lanes=LANES,
        now=timezone.now(),
        origin=(CUSTOMER, "deliveries"),
        link=dead_letter_link,
        title=f"delivery {delivery.id}",
    )


def wants_svg(request, format: str | None) -> bool:
    """`?format=svg`, or no format asked and an Accept header that prefers the picture to JSON."""
    if format is not None:
        return format == "svg"
    return request.get_preferred_type(["application/json", SVG]) == SVG
