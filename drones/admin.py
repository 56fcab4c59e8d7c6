from django.contrib import admin, messages
from django.db.models import Count

from drones import services
from drones.models import Assignment, Drone, WaitingDelivery
from outbox.admin import ReadOnlyAdmin, timeline_link


@admin.register(Drone)
class DroneAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "status",
        "delivery_id",
        "where",
        "missions",
        "max_payload_kg",
        "range_km",
        "speed_kmh",
        "updated_at",
    ]
    list_filter = ["status"]
    search_fields = ["name", "=id", "=delivery_id"]
    actions = ["ground", "return_to_service"]

    def changelist_view(self, request, extra_context=None):
        """The fleet's state at a glance, above the list."""
        counts = dict(Drone.objects.values_list("status").annotate(n=Count("id")))
        waiting = Assignment.objects.filter(status=Assignment.Status.WAITING).count()
        planned = Assignment.objects.filter(status=Assignment.Status.PLANNED).count()
        fleet = ", ".join(f"{counts.get(s, 0)} {label.lower()}" for s, label in Drone.Status.choices)
        summary = f"Fleet: {fleet}. Waiting list: {waiting} waiting for a drone, {planned} planned for later."
        return super().changelist_view(request, {**(extra_context or {}), "fleet_summary": summary})

    @admin.display(description="where")
    def where(self, drone):
        if (drone.latitude, drone.longitude) == (drone.home_latitude, drone.home_longitude):
            return "home"
        return f"{drone.latitude:.4f}, {drone.longitude:.4f}"

    def has_ground_permission(self, request) -> bool:
        return self._may(request, "ground_drone")

    def has_return_permission(self, request) -> bool:
        return self._may(request, "return_drone")

    @admin.action(
        description="Ground for maintenance (a reserved drone's delivery goes back to the head of the line)",
        permissions=["ground"],
    )
    def ground(self, request, queryset):
        for drone in queryset.exclude(status=Drone.Status.MAINTENANCE):  # nothing to do, nothing to audit
            try:
                self.audited(request, drone, "grounded", services.ground_drone, drone_id=drone.pk)
            except services.DroneBusy as error:
                self.message_user(request, str(error), messages.WARNING)
        self.message_user(request, "Done; drones in flight were left alone.", messages.INFO)

    @admin.action(description="Return to service", permissions=["return"])
    def return_to_service(self, request, queryset):
        grounded = list(queryset.filter(status=Drone.Status.MAINTENANCE))
        for drone in grounded:
            self.audited(request, drone, "returned to service", services.return_drone_to_service, drone_id=drone.pk)
        self.message_user(request, f"{len(grounded)} drone(s) back in service.", messages.SUCCESS)


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ["delivery_id", "drone", "status", "reason", "priority", "eta", "updated_at", "timeline"]
    list_filter = ["status", "reason", "priority"]
    search_fields = ["=delivery_id", "drone__name"]

    @admin.display(description="timeline")
    def timeline(self, assignment):
        return timeline_link(assignment.delivery_id)


@admin.register(WaitingDelivery)
class WaitingListAdmin(ReadOnlyAdmin):
    """Who waits, in the order drones will take them; deliveries planned for a later pickup below."""

    list_display = [
        "delivery_id",
        "status",
        "priority",
        "waiting_since",
        "pickup_time",
        "deadline",
        "rank_at",
        "expected_pickup_at",
        "reserve_at",
        "timeline",
    ]
    list_filter = ["status", "priority"]
    search_fields = ["=delivery_id"]
    ordering = ["-status", "rank_at", "waiting_since", "reserve_at"]  # "waiting" before "planned"

    def get_queryset(self, request):
        waiting = (Assignment.Status.WAITING, Assignment.Status.PLANNED)
        return super().get_queryset(request).filter(status__in=waiting)

    @admin.display(description="timeline")
    def timeline(self, assignment):
        return timeline_link(assignment.delivery_id)
