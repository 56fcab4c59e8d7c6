from collections.abc import Callable, Collection
from uuid import UUID

from django.contrib import admin, messages
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from common.display import change_link, coordinates
from deliveries import selectors, services
from deliveries.models import Customer, CustomerToken, Delivery, OverdueDelivery
from deliveries.timeline_picture import timeline_svg
from deliveries.transitions import TooLate
from outbox.ops import ReadOnlyAdmin, timeline_link

DroneNames = Callable[[Collection[UUID]], dict[UUID, str]]


def _no_names(drone_ids: Collection[UUID]) -> dict[UUID, str]:
    return {}


_drone_names: DroneNames = _no_names


def name_drones_with(lookup: DroneNames) -> None:
    """Where the console finds a drone's name. A delivery knows its drone by id only (drone.scheduled
    carries no name) and this context may not read the drones' tables, so the deployable that wires
    the contexts together registers the lookup (delivery_project/admin.py); without it, a short id."""
    global _drone_names
    _drone_names = lookup


def _location(value: dict | None) -> str:
    """A location as this context stores it ({"latitude", "longitude", "altitude"}), for people."""
    if not value:
        return admin.site.empty_value_display
    return coordinates(value.get("latitude"), value.get("longitude"), value.get("altitude"))


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "customer", "status", "status_reason", "drone", "created_at", "updated_at", "timeline"]
    list_filter = ["status", "status_reason", "created_at"]
    search_fields = ["=id", "customer__name", "=drone_id", "=package_id"]
    actions = ["cancel"]
    readonly_fields = [
        "status",
        "status_reason",
        "customer",
        "pickup",
        "dropoff",
        "pickup_time",
        "deadline",
        "expedited",
        "package_id",
        "package_size",
        "package_weight_kg",
        "drone",
        "eta",
        "last_seen",
        "compensations_done",
        "confirmation_required",
        "confirmation",
        "created_at",
        "updated_at",
        "on_the_map",
    ]
    fields = readonly_fields
    # The sequence diagram above the fields, the width of the page: what an operator opens the
    # page for, drawn where a glance finds it (below twenty fields, its right lanes were cut).
    change_form_template = "admin/deliveries/delivery/change_form.html"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        delivery = self.get_object(request, object_id)
        story = {"sequence_diagram": self.sequence_diagram(delivery), "timeline": self.event_timeline(delivery)}
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), **(story if delivery is not None else {})}
        )

    def get_changelist_instance(self, request):
        """The drones' names for the whole page in one lookup, not one a row."""
        changelist = super().get_changelist_instance(request)
        names = _drone_names({d.drone_id for d in changelist.result_list if d.drone_id})
        for delivery in changelist.result_list:
            delivery.drone_name = names.get(delivery.drone_id)
        return changelist

    @admin.display(description="drone", ordering="drone_id")
    def drone(self, delivery):
        if delivery.drone_id is None:
            return self.get_empty_value_display()
        if hasattr(delivery, "drone_name"):
            name = delivery.drone_name
        else:
            name = _drone_names({delivery.drone_id}).get(delivery.drone_id)
        return change_link("admin:drones_drone_change", delivery.drone_id, name or f"{str(delivery.drone_id)[:8]}…")

    @admin.display(description="pickup location")
    def pickup(self, delivery):
        return _location(delivery.pickup_location)

    @admin.display(description="drop-off location")
    def dropoff(self, delivery):
        return _location(delivery.dropoff_location)

    @admin.display(description="last known location")
    def last_seen(self, delivery):
        return _location(delivery.last_known_location)

    @admin.display(description="compensations")
    def compensations_done(self, delivery):
        """What was undone, in words ("drone released"), not the stored list of codes."""
        done = ", ".join(str(step).replace("_", " ") for step in delivery.compensations)
        return done or self.get_empty_value_display()

    @admin.display(description="timeline")
    def timeline(self, delivery):
        return timeline_link(delivery.id)

    @admin.display(description="on the map")
    def on_the_map(self, delivery):
        """The fleet map with this delivery's route (or its pickup, while it waits) marked; by URL name, no import."""
        url = reverse("admin:drones_drone_map") + f"?delivery={delivery.pk}"
        return format_html('<a href="{}">its route on the fleet map</a>', url)

    def sequence_diagram(self, delivery) -> str:
        def letter(pk: int) -> str:
            return reverse("admin:outbox_deadletter_change", args=[pk])

        # Drawn by outbox.console.svg, which escapes every text it is given.
        return mark_safe(timeline_svg(delivery, dead_letter_link=letter))

    def event_timeline(self, delivery) -> str:
        return render_to_string("admin/outbox/timeline_table.html", {"events": selectors.timeline(delivery)})

    def has_cancel_permission(self, request) -> bool:
        return self._may(request, "cancel_delivery_as_operator")

    @admin.action(description="Cancel (before dispatch only)", permissions=["cancel"])
    def cancel(self, request, queryset):
        for delivery in queryset.exclude(status=Delivery.Status.CANCELLED):  # nothing to do, nothing to audit
            try:
                self.audited(
                    request,
                    delivery,
                    "cancelled",
                    services.cancel_delivery,
                    delivery_id=delivery.pk,
                    customer=None,
                    reason="cancelled_by_operator",
                )
            except TooLate as error:
                self.message_user(request, f"{delivery.pk}: {error}", messages.WARNING)
        self.message_user(request, "Cancellation requested; compensations follow through events.", messages.INFO)


@admin.register(OverdueDelivery)
class OverdueDeliveryAdmin(DeliveryAdmin):
    """In transit long past the ETA, or not dispatched long past the deadline: the deliveries no
    event will finish by itself."""

    list_display = ["id", "customer", "status", "eta", "deadline", "overdue_by", "drone", "last_seen", "timeline"]
    list_filter = ["created_at"]
    actions = []

    def get_queryset(self, request):
        return selectors.overdue_deliveries()

    @admin.display(description="past its ETA or deadline (or without a drone) by")
    def overdue_by(self, delivery):
        if delivery.status in Delivery.BEFORE_DISPATCH:
            return timesince(delivery.deadline)
        return timesince(delivery.eta or delivery.updated_at)


class CustomerTokenInline(admin.TabularInline):
    """A customer's tokens, never their values: `manage.py customer_token` rotates and revokes them."""

    model = CustomerToken
    fields = ["prefix", "created_at", "expires_at", "revoked_at", "state"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["-created_at"]

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Customer)
class CustomerAdmin(ReadOnlyAdmin):
    list_display = ["name", "id", "created_at", "valid_tokens"]
    search_fields = ["name"]
    inlines = [CustomerTokenInline]

    @admin.display(description="valid tokens")
    def valid_tokens(self, customer):
        return sum(token.state.startswith("valid") for token in customer.tokens.all())

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("tokens")
