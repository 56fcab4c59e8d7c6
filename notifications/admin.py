from django.contrib import admin

from notifications.models import Notification
from outbox.admin import ReadOnlyAdmin


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["delivery_id", "kind", "message", "created_at"]
    list_filter = ["kind"]
    search_fields = ["=delivery_id"]
