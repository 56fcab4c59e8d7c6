from django.db import models


class Drone(models.Model):
    class Status(models.TextChoices):
        AVAILABLE = "available"
        RESERVED = "reserved"
        IN_FLIGHT = "in_flight"
        MAINTENANCE = "maintenance"

    id = models.UUIDField(primary_key=True)
    name = models.CharField(max_length=50, unique=True)
    max_payload_kg = models.FloatField()
    range_km = models.FloatField()
    speed_kmh = models.FloatField()
    home_latitude = models.FloatField()
    home_longitude = models.FloatField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.AVAILABLE, db_index=True)
    delivery_id = models.UUIDField(null=True, blank=True, help_text="The delivery it is reserved for or flying.")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.name} ({self.status})"


class Assignment(models.Model):
    """What the scheduler decided for one delivery; a tombstone once the delivery ended."""

    class Status(models.TextChoices):
        RESERVED = "reserved"
        FLYING = "flying"
        ARRIVED = "arrived"
        RELEASED = "released"
        REFUSED = "refused"

    delivery_id = models.UUIDField(primary_key=True)
    drone = models.ForeignKey(Drone, null=True, blank=True, on_delete=models.PROTECT, related_name="assignments")
    status = models.CharField(max_length=20, choices=Status.choices, db_index=True)
    reason = models.CharField(max_length=50, blank=True)
    priority = models.CharField(max_length=10, default="normal")
    round = models.PositiveIntegerField(default=1, help_text="Scheduling round: a reschedule starts the next.")
    pickup_latitude = models.FloatField(null=True)
    pickup_longitude = models.FloatField(null=True)
    dropoff_latitude = models.FloatField(null=True)
    dropoff_longitude = models.FloatField(null=True)
    eta = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self):
        return f"{self.delivery_id}: {self.status}"
