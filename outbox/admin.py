from django.contrib import admin

from outbox.models import DeadLetter, InboxMessage, OutboxMessage


class ReadOnlyAdmin(admin.ModelAdmin):
    """Messages are facts: operators read them here and act through commands and actions."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(OutboxMessage)
class OutboxMessageAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "type",
        "version",
        "stream",
        "sequence",
        "occurred_at",
        "available_at",
        "published_at",
    ]
    list_filter = ["type", ("published_at", admin.EmptyFieldListFilter)]
    search_fields = ["=message_id", "=correlation_id", "stream"]


@admin.register(InboxMessage)
class InboxMessageAdmin(ReadOnlyAdmin):
    list_display = ["subscriber", "type", "message_id", "processed_at", "duplicates"]
    list_filter = ["subscriber", "type"]
    search_fields = ["=message_id", "=correlation_id"]


@admin.register(DeadLetter)
class DeadLetterAdmin(ReadOnlyAdmin):
    list_display = ["subscriber", "type", "reason", "attempts", "last_failed_at", "status"]
    list_filter = ["subscriber", "reason", "type", "status", "last_failed_at"]
    search_fields = ["=message_id", "=correlation_id", "error"]
