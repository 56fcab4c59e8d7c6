from django.contrib import admin, messages

from drones import services
from drones.models import Assignment, Drone
from outbox.admin import ReadOnlyAdmin, timeline_link


@admin.register(Drone)
class DroneAdmin(ReadOnlyAdmin):
    list_display = ["name", "status", "delivery_id", "max_payload_kg", "range_km", "speed_kmh", "updated_at"]
    list_filter = ["status"]
    search_fields = ["name", "=id", "=delivery_id"]
    actions = ["ground", "return_to_service"]

    @admin.action(description="Ground for maintenance (idle drones only)")
    def ground(self, request, queryset):
        for drone in queryset:
            try:
                services.ground_drone(drone_id=drone.pk)
            except services.DroneBusy as error:
                self.message_user(request, str(error), messages.WARNING)
        self.message_user(request, "Done; busy drones were left alone.", messages.INFO)

    @admin.action(description="Return to service")
    def return_to_service(self, request, queryset):
        for drone in queryset:
            services.return_drone_to_service(drone_id=drone.pk)
        self.message_user(request, f"{queryset.count()} drone(s) back in service.", messages.SUCCESS)


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ["delivery_id", "drone", "status", "reason", "priority", "eta", "updated_at", "timeline"]
    list_filter = ["status", "reason", "priority"]
    search_fields = ["=delivery_id", "drone__name"]

    @admin.display(description="timeline")
    def timeline(self, assignment):
        return timeline_link(assignment.delivery_id)
