from django.contrib import admin

from notifications.models import Notification, NotifyMeRequest, SentMessage
from outbox.ops import ReadOnlyAdmin


@admin.register(Notification)
class NotificationAdmin(ReadOnlyAdmin):
    list_display = ["delivery_id", "kind", "message", "created_at"]
    list_filter = ["kind"]
    search_fields = ["=delivery_id"]


class SentMessageInline(admin.TabularInline):
    model = SentMessage
    fields = readonly_fields = ["kind", "channel", "created_at", "sent_at"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(NotifyMeRequest)
class NotifyMeRequestAdmin(ReadOnlyAdmin):
    """Who asked to be told about a delivery, and what was sent to them."""

    list_display = ["delivery_id", "email_address", "sms", "created_at", "messages_sent"]
    search_fields = ["=delivery_id", "email_address"]
    inlines = [SentMessageInline]

    @admin.display(description="messages sent")
    def messages_sent(self, request):
        return request.sent.exclude(sent_at=None).count()
