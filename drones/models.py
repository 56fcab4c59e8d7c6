from django.db import models
from django.db.models import Q


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
    # Where it is now: home at first, then where its last delivery landed, until it flies back.
    latitude = models.FloatField()
    longitude = models.FloatField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.AVAILABLE, db_index=True)
    delivery_id = models.UUIDField(null=True, blank=True, help_text="The delivery it is reserved for or flying.")
    missions = models.PositiveIntegerField(default=0, help_text="Deliveries it was reserved for, all told.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # Free drones near a pickup: status, then a latitude band, longitude read from the index.
            models.Index(fields=["status", "latitude", "longitude"], name="drone_free_near_idx"),
            # Is any free drone strong enough? One probe, before any search.
            models.Index(fields=["status", "max_payload_kg"], name="drone_free_payload_idx"),
            # The fleet's longest range, and the homes near a pickup (what no drone could ever fly).
            models.Index(fields=["range_km"], name="drone_range_idx"),
            models.Index(fields=["home_latitude", "home_longitude"], name="drone_home_idx"),
        ]
        permissions = [
            ("ground_drone", "Can ground drones for maintenance"),
            ("return_drone", "Can return drones to service"),
        ]

    def __str__(self):
        return f"{self.name} ({self.status})"


# Upper bounds (kg) of the weight classes the waiting line is indexed by: a light drone looks at the
# head of each class it can carry, never down a line of parcels too heavy for it.
WEIGHT_CLASSES = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0)


def _weight_class() -> models.Case:
    return models.Case(
        *(models.When(weight_kg__lte=bound, then=models.Value(n)) for n, bound in enumerate(WEIGHT_CLASSES)),
        default=models.Value(len(WEIGHT_CLASSES)),
        output_field=models.SmallIntegerField(),
    )


class Assignment(models.Model):
    """What the scheduler decided for one delivery, from the waiting list to the tombstone once it ended."""

    class Status(models.TextChoices):
        PLANNED = "planned", "planned (pickup later)"
        WAITING = "waiting", "waiting for a drone"
        RESERVED = "reserved"
        FLYING = "flying"
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
    trip_km = models.FloatField(null=True, help_text="Pickup to drop-off.")
    weight_kg = models.FloatField(null=True)
    weight_class = models.GeneratedField(
        expression=_weight_class(), output_field=models.SmallIntegerField(null=True), db_persist=True
    )
    pickup_time = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    # The waiting list: the line is ordered by rank_at, then by how long each has waited.
    waiting_since = models.DateTimeField(null=True, blank=True)
    rank_at = models.DateTimeField(null=True, blank=True, help_text="Place in line (see drones.services.rank).")
    reserve_at = models.DateTimeField(null=True, blank=True, help_text="When a drone is reserved for a later pickup.")
    replans = models.PositiveSmallIntegerField(default=0)
    expected_pickup_at = models.DateTimeField(null=True, blank=True, help_text="Estimate given while it waits.")
    dispatched = models.BooleanField(default=False, help_text="Dispatched while it had no drone (one was grounded).")
    change = models.PositiveBigIntegerField(
        default=0, help_text="Sequence (in the delivery's stream) of the last change applied: older ones are moot."
    )
    takeoff_at = models.DateTimeField(null=True, blank=True)
    eta = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["rank_at", "waiting_since", "delivery_id"],
                condition=Q(status="waiting"),
                name="assignment_waiting_line_idx",
            ),
            models.Index(
                fields=["weight_class", "rank_at", "waiting_since", "delivery_id"],
                condition=Q(status="waiting"),
                name="assignment_line_by_weight_idx",
            ),
            # The busy drones soonest free, for a waiting delivery's estimate.
            models.Index(
                fields=["eta"], condition=Q(status__in=["reserved", "flying"]), name="assignment_busy_eta_idx"
            ),
        ]

    def __str__(self):
        return f"{self.delivery_id}: {self.status}"


class FleetCheck(models.Model):
    """The one timer chain of the fleet check (drones.fleet_check): when its next timer is due."""

    id = models.PositiveSmallIntegerField(primary_key=True, default=1)
    generation = models.PositiveIntegerField(default=0)
    due_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"fleet check #{self.generation} due {self.due_at}"


class WaitingDelivery(Assignment):
    """The waiting list as operators see it: deliveries planned for later or waiting for a drone."""

    class Meta:
        proxy = True
        verbose_name = "waiting delivery"
        verbose_name_plural = "waiting list"
