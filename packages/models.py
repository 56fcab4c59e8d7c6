from django.db import models


class Package(models.Model):
    """The package of one delivery; also a tombstone when a delivery ended before its package was seen."""

    class Status(models.TextChoices):
        READY = "ready"
        REJECTED = "rejected"
        IN_TRANSIT = "in_transit"
        DELIVERED = "delivered"
        CANCELLED = "cancelled"

    delivery_id = models.UUIDField(primary_key=True)
    package_id = models.UUIDField(null=True, blank=True)
    size = models.CharField(max_length=20, blank=True)
    weight_kg = models.FloatField(null=True, blank=True)
    tag = models.CharField(max_length=100, blank=True)
    status = models.CharField(max_length=20, choices=Status.choices, db_index=True)
    reason = models.CharField(max_length=50, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"package of {self.delivery_id} ({self.status})"
