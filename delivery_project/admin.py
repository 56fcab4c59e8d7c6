import django_dramatiq.admin  # noqa: F401  (registers Task: this app comes first in INSTALLED_APPS)
from django.contrib import admin
from django.contrib.admin.models import LogEntry
from django_dramatiq.models import Task

from outbox.admin import ReadOnlyAdmin

# django_dramatiq's task table is filled only by its AdminMiddleware, which we leave out
# (a database write per task event); the dead letters and the timelines take its place.
admin.site.unregister(Task)
admin.site.site_header = "Drone delivery operations"
admin.site.site_title = "Drone delivery operations"


@admin.register(LogEntry)
class AuditLogAdmin(ReadOnlyAdmin):
    """Every operator action (replay, discard, ground, return to service) leaves an entry in Django's
    admin log in the same transaction: who, when, on what, and the note."""

    list_display = ["action_time", "user", "content_type", "object_repr", "change_message"]
    list_filter = ["content_type", "user"]
    search_fields = ["object_repr", "change_message", "user__username"]
    date_hierarchy = "action_time"
