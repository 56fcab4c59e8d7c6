from django.db import models


class Notification(models.Model):
    """What the system has told about a delivery, one per status change."""

    class Kind(models.TextChoices):
        DISPATCHED = "dispatched"
        CONFIRMATION_REQUESTED = "confirmation_requested"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    delivery_id = models.UUIDField()
    kind = models.CharField(max_length=30, choices=Kind.choices)
    message = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["delivery_id", "kind"], name="one_notification_per_kind")]

    def __str__(self):
        return f"{self.kind}: {self.delivery_id}"


class NotifyMeRequest(models.Model):
    """A customer asked to be told about a delivery. The address and number are personal data:
    they stay in this table, and no event ever carries them."""

    delivery_id = models.UUIDField(db_index=True)
    email_address = models.EmailField(blank=True)
    sms = models.CharField(max_length=16, blank=True, help_text="E.164, e.g. +14255550123")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return f"notify-me request {self.pk} for {self.delivery_id}"


class SentMessage(models.Model):
    """One message for a request, a status change and a channel: created once (unique), sent
    once (`sent_at`), by its own `notification.due` event."""

    class Channel(models.TextChoices):
        EMAIL = "email"
        SMS = "sms"

    request = models.ForeignKey(NotifyMeRequest, on_delete=models.CASCADE, related_name="sent")
    kind = models.CharField(max_length=30, choices=Notification.Kind.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request", "kind", "channel"], name="one_message_per_request_kind_channel")
        ]

    def __str__(self):
        return f"{self.channel} {self.kind} for request {self.request_id}"
