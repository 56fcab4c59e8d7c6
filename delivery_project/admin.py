import django_dramatiq.admin  # noqa: F401  (registers Task: this app comes first in INSTALLED_APPS)
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django.urls import reverse_lazy
from django_dramatiq.models import Task

from deliveries.admin import name_drones_with
from drones.models import Drone
from outbox.ops import ReadOnlyAdmin

# django_dramatiq's task table is filled only by its AdminMiddleware, which we leave out
# (a database write per task event); the dead letters and the timelines take its place.
admin.site.unregister(Task)
admin.site.site_header = "Drone delivery operations"
admin.site.site_title = "Drone delivery operations"
# The index links the messaging overview (the outbox's health and routing), not only the outbox list.
admin.site.index_template = "admin/console_index.html"
# "View site": this backend's site is its API, and its docs are what answers there (`/` redirects too).
admin.site.site_url = reverse_lazy("api:openapi-view")


def drone_names(drone_ids):
    """The wiring may read every context: it gives the deliveries' pages their drones' names, which no
    event carries to the deliveries context (which knows its drone by id only)."""
    return dict(Drone.objects.filter(pk__in=drone_ids).values_list("pk", "name"))


name_drones_with(drone_names)


@admin.register(LogEntry)
class AuditLogAdmin(ReadOnlyAdmin):
    """Every operator action (replay, discard, ground, return to service) leaves an entry in Django's
    admin log in the same transaction: who, when, on what, and the note."""

    list_display = ["action_time", "user", "content_type", "object_repr", "change_message"]
    list_filter = ["content_type", "user"]
    search_fields = ["object_repr", "change_message", "user__username"]
    date_hierarchy = "action_time"
