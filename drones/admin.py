from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import JsonResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from common.display import change_link, coordinates
from drones import services
from drones.fleet_map import fleet_map
from drones.models import Assignment, Drone, WaitingDelivery
from outbox.ops import ReadOnlyAdmin, timeline_link

RECENT_ASSIGNMENTS = 20  # on a drone's page; the assignment list, filtered to the drone, has them all


def delivery_link(delivery_id) -> str:
    """A delivery id leads to the delivery's page in its own context (by URL name: no import)."""
    return change_link("admin:deliveries_delivery_change", delivery_id)


def waited_for(elapsed: timedelta) -> str:
    """How long, in the two units that matter ("4 min 12 s", "2 h 05 min"): the waiting list shows
    who waited longest, where times to the minute read the same on every row."""
    seconds = max(int(elapsed.total_seconds()), 0)
    days, hours, minutes = seconds // 86_400, seconds // 3600 % 24, seconds // 60 % 60
    if days:
        return f"{days} d {hours} h"
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {seconds % 60} s" if minutes else f"{seconds} s"


@admin.register(Drone)
class DroneAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "status",
        "delivery",
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
    readonly_fields = [
        "name",
        "id",
        "status",
        "delivery",
        "where",
        "home",
        "missions",
        "max_payload_kg",
        "range_km",
        "speed_kmh",
        "updated_at",
        "assignments",
    ]
    fields = readonly_fields

    def get_urls(self):
        def viewer_only(view):
            def checked(request, *args, **kwargs):
                if not self.has_view_permission(request):
                    raise PermissionDenied
                return view(request, *args, **kwargs)

            return self.admin_site.admin_view(checked)

        return [
            path("map/", viewer_only(self.fleet_map_page), name="drones_drone_map"),
            path("map/data.json", viewer_only(self.fleet_map_data), name="drones_drone_map_data"),
            *super().get_urls(),
        ]

    def fleet_map_page(self, request):
        """Every drone on a map (Leaflet, shipped as static files), refreshed from `fleet_map_data`."""
        context = {
            **self.admin_site.each_context(request),
            "title": "Fleet map",
            "source": reverse("admin:drones_drone_map_data"),
            "tiles": settings.FLEET_MAP_TILE_URL,
            "attribution": settings.FLEET_MAP_TILE_ATTRIBUTION,
            "refresh_ms": int(settings.FLEET_MAP_REFRESH_SECONDS * 1000),
            "drone_url": reverse("admin:drones_drone_change", args=[UUID(int=0)]),
            "delivery": request.GET.get("delivery", "")[:36],
        }
        return TemplateResponse(request, "admin/drones/fleet_map.html", context)

    def fleet_map_data(self, request):
        return JsonResponse(fleet_map(now=timezone.now()))

    def changelist_view(self, request, extra_context=None):
        """The fleet's state at a glance, above the list."""
        counts = dict(Drone.objects.values_list("status").annotate(n=Count("id")))
        waiting = Assignment.objects.filter(status=Assignment.Status.WAITING).count()
        planned = Assignment.objects.filter(status=Assignment.Status.PLANNED).count()
        fleet = ", ".join(f"{counts.get(s, 0)} {label.lower()}" for s, label in Drone.Status.choices)
        summary = f"Fleet: {fleet}. Waiting list: {waiting} waiting for a drone, {planned} planned for later."
        return super().changelist_view(request, {**(extra_context or {}), "fleet_summary": summary})

    @admin.display(description="delivery", ordering="delivery_id")
    def delivery(self, drone):
        return delivery_link(drone.delivery_id)

    @admin.display(description="where")
    def where(self, drone):
        if (drone.latitude, drone.longitude) == (drone.home_latitude, drone.home_longitude):
            return "home"
        return coordinates(drone.latitude, drone.longitude)

    @admin.display(description="home")
    def home(self, drone):
        return coordinates(drone.home_latitude, drone.home_longitude)

    @admin.display(description="assignments")
    def assignments(self, drone):
        """What the drone was assigned, latest first, each delivery a link to its page."""
        recent = drone.assignments.order_by("-created_at")[:RECENT_ASSIGNMENTS]
        rows = [
            {"assignment": a, "delivery": delivery_link(a.delivery_id), "timeline": timeline_link(a.delivery_id)}
            for a in recent
        ]
        every = f"{reverse('admin:drones_assignment_changelist')}?drone__id__exact={drone.pk}"
        context = {"rows": rows, "total": drone.assignments.count(), "every": every}
        return render_to_string("admin/drones/drone/assignments.html", context)

    def has_ground_permission(self, request) -> bool:
        return self._may(request, "ground_drone")

    def has_return_permission(self, request) -> bool:
        return self._may(request, "return_drone")

    @admin.action(
        description="Ground for maintenance (a reserved drone's delivery goes back to the head of the line)",
        permissions=["ground"],
    )
    def ground(self, request, queryset):
        grounded = flying = 0
        for drone in queryset.exclude(status=Drone.Status.MAINTENANCE):  # nothing to do, nothing to audit
            try:
                self.audited(request, drone, "grounded", services.ground_drone, drone_id=drone.pk)
                grounded += 1
            except services.DroneBusy as error:
                flying += 1
                self.message_user(request, str(error), messages.WARNING)
        self.message_user(
            request, f"Grounded {grounded} drone(s); {flying} in flight left alone to finish.", messages.INFO
        )

    @admin.action(description="Return to service", permissions=["return"])
    def return_to_service(self, request, queryset):
        grounded = list(queryset.filter(status=Drone.Status.MAINTENANCE))
        for drone in grounded:
            self.audited(request, drone, "returned to service", services.return_drone_to_service, drone_id=drone.pk)
        self.message_user(request, f"{len(grounded)} drone(s) back in service.", messages.SUCCESS)


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdmin):
    list_display = ["delivery_id", "drone_name", "status", "reason", "priority", "eta", "updated_at", "timeline"]
    list_filter = ["status", "reason", "priority"]
    list_select_related = ["drone"]
    search_fields = ["=delivery_id", "drone__name"]
    readonly_fields = [
        "delivery",
        "drone_name",
        "status",
        "reason",
        "priority",
        "round",
        "pickup",
        "dropoff",
        "trip_km",
        "weight_kg",
        "pickup_time",
        "deadline",
        "waiting_since",
        "rank_at",
        "reserve_at",
        "expected_pickup_at",
        "replans",
        "dispatched",
        "takeoff_at",
        "eta",
        "change",
        "created_at",
        "updated_at",
        "timeline",
    ]
    fields = readonly_fields

    @admin.display(description="delivery")
    def delivery(self, assignment):
        return delivery_link(assignment.delivery_id)

    @admin.display(description="drone", ordering="drone__name")
    def drone_name(self, assignment):
        """The drone's name only: its current state ("in_flight") is not this assignment's, which may
        long be released; the assignment's own state is its status column."""
        if assignment.drone is None:
            return self.get_empty_value_display()
        return change_link("admin:drones_drone_change", assignment.drone_id, assignment.drone.name)

    @admin.display(description="pickup")
    def pickup(self, assignment):
        return coordinates(assignment.pickup_latitude, assignment.pickup_longitude)

    @admin.display(description="drop-off")
    def dropoff(self, assignment):
        return coordinates(assignment.dropoff_latitude, assignment.dropoff_longitude)

    @admin.display(description="timeline")
    def timeline(self, assignment):
        return timeline_link(assignment.delivery_id)


@admin.register(WaitingDelivery)
class WaitingListAdmin(AssignmentAdmin):
    """Who waits, in the order drones will take them; deliveries planned for a later pickup below."""

    list_display = [
        "delivery_id",
        "status",
        "priority",
        "waited",
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

    @admin.display(description="waited", ordering="waiting_since")
    def waited(self, assignment):
        """Sorted by when it started waiting: ascending, the longest wait comes first."""
        if assignment.waiting_since is None:
            return self.get_empty_value_display()
        return waited_for(timezone.now() - assignment.waiting_since)
