from django.db import models


class Notification(models.Model):
    class Kind(models.TextChoices):
        DISPATCHED = "dispatched"
        COMPLETED = "completed"
        FAILED = "failed"
        CANCELLED = "cancelled"

    delivery_id = models.UUIDField()
    kind = models.CharField(max_length=20, choices=Kind.choices)
    message = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["delivery_id", "kind"], name="one_notification_per_kind")]

    def __str__(self):
        return f"{self.kind}: {self.delivery_id}"
