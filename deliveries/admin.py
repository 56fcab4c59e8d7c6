from django.contrib import admin, messages
from django.template.loader import render_to_string
from django.utils.timesince import timesince

from deliveries import selectors, services
from deliveries.models import Customer, CustomerToken, Delivery, OverdueDelivery
from deliveries.transitions import TooLate
from outbox.admin import ReadOnlyAdmin, timeline_link


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ["id", "customer", "status", "status_reason", "drone_id", "created_at", "updated_at", "timeline"]
    list_filter = ["status", "status_reason", "created_at"]
    search_fields = ["=id", "customer__name", "=drone_id", "=package_id"]
    actions = ["cancel"]
    readonly_fields = [
        "status",
        "status_reason",
        "customer",
        "pickup_location",
        "dropoff_location",
        "pickup_time",
        "deadline",
        "expedited",
        "package_id",
        "package_size",
        "package_weight_kg",
        "drone_id",
        "eta",
        "last_known_location",
        "compensations",
        "confirmation_required",
        "confirmation_token",
        "confirmation",
        "created_at",
        "updated_at",
        "event_timeline",
    ]
    fields = readonly_fields

    @admin.display(description="timeline")
    def timeline(self, delivery):
        return timeline_link(delivery.id)

    @admin.display(description="timeline")
    def event_timeline(self, delivery):
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
    """In transit long past the ETA: the deliveries no event will finish by itself."""

    list_display = ["id", "customer", "eta", "overdue_by", "drone_id", "last_known_location", "timeline"]
    list_filter = ["created_at"]
    actions = []

    def get_queryset(self, request):
        return selectors.overdue_deliveries()

    @admin.display(description="past its ETA (or without a drone) by")
    def overdue_by(self, delivery):
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
