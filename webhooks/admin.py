from django.contrib import admin, messages
from django.contrib.admin.utils import quote
from django.db.models import Count, F, Q
from django.urls import reverse
from django.utils.html import format_html

from outbox.ops import ReadOnlyAdmin, timeline_link
from webhooks import services
from webhooks.models import Attempt, Endpoint, Message


class MessageInline(admin.TabularInline):
    """The endpoint's messages still owed or given up, oldest first; each links to its attempts."""

    model = Message
    fields = readonly_fields = [
        "webhook_id",
        "event_type",
        "delivery_id",
        "change_number",
        "status",
        "attempts",
        "next_attempt_at",
    ]
    extra = 0
    can_delete = False
    ordering = ["created_at"]
    verbose_name_plural = "messages owed or given up"

    def get_queryset(self, request):
        return super().get_queryset(request).exclude(status=Message.Status.DELIVERED)

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="webhook id")
    def webhook_id(self, message):
        return format_html(
            '<a href="{}">{}</a>', reverse("admin:webhooks_message_change", args=[quote(message.pk)]), message.pk
        )


@admin.register(Endpoint)
class EndpointAdmin(ReadOnlyAdmin):
    """Customers' endpoints: the disabled first (most recently disabled on top), then the failing
    (failing longest on top), then the rest, newest first."""

    list_display = ["url", "customer_id", "state", "failing_since", "disabled_at", "owed", "attempts"]
    list_filter = [("disabled_at", admin.EmptyFieldListFilter), ("failing_since", admin.EmptyFieldListFilter)]
    search_fields = ["=customer_id", "url"]
    exclude = ["secret", "previous_secret"]
    readonly_fields = ["state", "attempts"]
    inlines = [MessageInline]

    def get_queryset(self, request):
        owed = Count("messages", filter=Q(messages__status__in=[Message.Status.PENDING, Message.Status.HELD]))
        return super().get_queryset(request).annotate(owed=owed)

    def get_ordering(self, request):
        return [
            F("disabled_at").desc(nulls_last=True),
            F("failing_since").asc(nulls_last=True),
            "-created_at",
        ]

    @admin.display(description="state")
    def state(self, endpoint):
        if endpoint.disabled_at:
            return f"disabled: {endpoint.disabled_reason}"
        return "failing" if endpoint.failing_since else "ok"

    @admin.display(description="owed", ordering="owed")
    def owed(self, endpoint):
        return endpoint.owed

    @admin.display(description="attempts")
    def attempts(self, endpoint):
        url = f"{reverse('admin:webhooks_attempt_changelist')}?message__endpoint__id__exact={endpoint.pk}"
        return format_html('<a href="{}">attempts</a>', url)


class AttemptInline(admin.TabularInline):
    model = Attempt
    fields = readonly_fields = ["attempted_at", "status_code", "error", "duration_ms", "response_excerpt"]
    ordering = ["-attempted_at"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    """Each message owed to an endpoint, with its attempts; one given up (or held at an enabled
    endpoint) can be replayed."""

    list_display = ["id", "event_type", "endpoint", "status", "attempts", "created_at", "next_attempt_at", "timeline"]
    list_filter = ["status", "event_type"]
    list_select_related = ["endpoint"]
    search_fields = ["=id", "=delivery_id", "endpoint__url"]
    exclude = ["body"]
    readonly_fields = ["sent_body"]
    inlines = [AttemptInline]
    actions = ["replay"]
    ordering = ["-created_at"]

    @admin.display(description="body")
    def sent_body(self, message):
        return message.body

    @admin.display(description="timeline")
    def timeline(self, message):
        return timeline_link(message.delivery_id) if message.delivery_id else ""

    def has_replay_permission(self, request) -> bool:
        return self._may(request, "replay_message")

    @admin.action(
        description="Replay: send again now (given up, or held at an enabled endpoint)", permissions=["replay"]
    )
    def replay(self, request, queryset):
        replayed = 0
        for message in queryset.order_by("created_at"):
            try:
                self.audited(request, message, "replayed", services.replay, message=message)
                replayed += 1
            except services.NotReplayable as refused:
                self.message_user(request, str(refused), messages.WARNING)
        self.message_user(request, f"{replayed} message(s) queued again.", messages.INFO)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ["attempted_at", "message", "status_code", "error", "duration_ms"]
    list_filter = ["status_code"]
    list_select_related = ["message"]
    search_fields = ["=message__id"]
    ordering = ["-attempted_at"]

    def lookup_allowed(self, lookup, value, request=None):
        return lookup == "message__endpoint__id__exact" or super().lookup_allowed(lookup, value, request)
