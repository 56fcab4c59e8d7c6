from django.contrib import admin

from outbox.ops import ReadOnlyAdmin, timeline_link
from packages.models import Package


@admin.register(Package)
class PackageAdmin(ReadOnlyAdmin):
    list_display = ["delivery_id", "package_id", "size", "weight_kg", "status", "reason", "updated_at", "timeline"]
    list_filter = ["status", "reason", "size"]
    search_fields = ["=delivery_id", "=package_id", "tag"]

    @admin.display(description="timeline")
    def timeline(self, package):
        return timeline_link(package.delivery_id)
