"""The admin index's "Needs attention" block: the kernel's concerns (dead letters, silent relays and
workers), the deliveries stuck past their deadline or ETA and the webhook endpoints disabled, which
only the wiring may name together."""

from django import template
from django.db import DatabaseError
from django.urls import reverse

from deliveries.selectors import overdue_deliveries
from outbox.ops import Concern, needs_attention
from webhooks.selectors import disabled_endpoints

register = template.Library()


@register.inclusion_tag("admin/outbox/needs_attention.html", takes_context=True)
def needs_attention_block(context) -> dict:
    user = context["request"].user
    deliveries_seen = user.has_perm("deliveries.view_overduedelivery")
    endpoints_seen = user.has_perm("webhooks.view_endpoint")
    concerns = [
        *needs_attention(user),
        *(_stuck_deliveries() if deliveries_seen else []),
        *(_disabled_endpoints() if endpoints_seen else []),
    ]
    checked = [
        phrase
        for phrase, seen in (
            ("no open dead letter", user.has_perm("outbox.view_deadletter")),
            ("no silent relay or worker", user.has_perm("outbox.view_outboxmessage")),
            ("no delivery stuck past its deadline or ETA", deliveries_seen),
            ("no webhook endpoint disabled", endpoints_seen),
        )
        if seen
    ]
    return {"checked": checked, "concerns": concerns}


def _stuck_deliveries() -> list[Concern]:
    try:
        stuck: int | None = overdue_deliveries().count()
    except DatabaseError:  # the deliveries' database is away: the rest of the index still shows
        stuck = None
    if stuck == 0:
        return []
    return [
        Concern(
            name="stuck-deliveries",
            count=stuck,
            what="delivery stuck past its deadline or ETA"
            if stuck == 1
            else "deliveries stuck past their deadline or ETA",
            href=reverse("admin:deliveries_overduedelivery_changelist"),
        )
    ]


def _disabled_endpoints() -> list[Concern]:
    try:
        disabled: int | None = disabled_endpoints().count()
    except DatabaseError:
        disabled = None
    if disabled == 0:
        return []
    return [
        Concern(
            name="disabled-endpoints",
            count=disabled,
            what="webhook endpoint disabled" if disabled == 1 else "webhook endpoints disabled",
            href=reverse("admin:webhooks_endpoint_changelist") + "?disabled_at__isempty=0",
        )
    ]
