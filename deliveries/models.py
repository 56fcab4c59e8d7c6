import hashlib
import uuid

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Customer(models.Model):
    """Who may call the API, with one or more bearer tokens (CustomerToken)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.name


class CustomerToken(models.Model):
    """A bearer token of a customer. Only its hash is kept, and its first characters so that
    people can tell tokens apart; it may expire, and revoked it stays, for the record."""

    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="tokens")
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8, help_text="The token's first characters, to tell tokens apart.")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return f"{self.prefix}… of {self.customer_id}"

    @staticmethod
    def hash_token(token: str) -> str:
        # The token is 256 random bits: a fast hash suffices, no salt or stretching needed.
        return hashlib.sha256(token.encode()).hexdigest()

    @property
    def state(self) -> str:
        now = timezone.now()
        if self.revoked_at is not None:
            return f"revoked {self.revoked_at:%Y-%m-%d %H:%M}"
        if self.expires_at is not None and self.expires_at <= now:
            return f"expired {self.expires_at:%Y-%m-%d %H:%M}"
        return f"valid until {self.expires_at:%Y-%m-%d %H:%M}" if self.expires_at else "valid"


class Delivery(models.Model):
    """The delivery aggregate: the customer's request and where it stands."""

    class Status(models.TextChoices):
        REQUESTED = "requested"
        WAITING_FOR_DRONE = "waiting_for_drone"
        SCHEDULED = "scheduled"
        IN_TRANSIT = "in_transit"
        AWAITING_CONFIRMATION = "awaiting_confirmation"
        DELIVERED = "delivered"
        FAILED = "failed"
        CANCELLED = "cancelled"

    TERMINAL = (Status.DELIVERED, Status.FAILED, Status.CANCELLED)
    BEFORE_DISPATCH = (Status.REQUESTED, Status.WAITING_FOR_DRONE, Status.SCHEDULED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    customer = models.ForeignKey(Customer, on_delete=models.PROTECT, related_name="deliveries")
    status = models.CharField(max_length=30, choices=Status.choices, default=Status.REQUESTED, db_index=True)
    status_reason = models.CharField(max_length=100, blank=True)
    # Its status changes so far, numbered 1, 2, 3 in its `delivery.status_changed` events: a
    # subscriber that must keep their order can tell a change it has not heard yet from none.
    status_changes = models.PositiveIntegerField(default=0, db_default=0)  # the release before inserts none
    pickup_location = models.JSONField()
    dropoff_location = models.JSONField()
    pickup_time = models.DateTimeField()
    deadline = models.DateTimeField(null=True, blank=True)
    expedited = models.BooleanField(default=False)
    confirmation_required = models.CharField(max_length=20, default="None")
    package_id = models.UUIDField()
    package_size = models.CharField(max_length=20)
    package_weight_kg = models.FloatField()
    package_tag = models.CharField(max_length=100, blank=True)
    # The join: both halves must be in before the drone may take off.
    package_ready = models.BooleanField(default=False)
    drone_id = models.UUIDField(null=True, blank=True)
    # A reschedule to new places starts a new round; answers to an older round are ignored.
    schedule_round = models.PositiveIntegerField(default=1)
    eta = models.DateTimeField(null=True, blank=True)
    pickup_eta = models.DateTimeField(null=True, blank=True, help_text="When a drone is expected at the pickup.")
    waiting_since = models.DateTimeField(null=True, blank=True, help_text="First put in the drones' waiting line.")
    drone_scheduled_at = models.DateTimeField(null=True, blank=True)
    last_known_location = models.JSONField(null=True, blank=True)
    compensations = models.JSONField(default=list, blank=True, help_text="Compensations reported done.")
    # Proof of delivery: a task token issued when the drone arrives, single-use, bound to this
    # delivery and its confirmation type; only its id ever leaves the context in an event.
    confirmation_token_id = models.UUIDField(null=True, blank=True)
    confirmation_token_hash = models.CharField(max_length=64, blank=True, help_text="SHA-256 of the task token.")
    confirmation = models.JSONField(null=True, blank=True, help_text="The confirmation that completed it.")
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 (NULL: unique only if given)
    accepted_as = models.JSONField(
        null=True,
        blank=True,
        encoder=DjangoJSONEncoder,
        help_text="What was accepted, as it was then: a request repeated with its Idempotency-Key is answered so.",
    )
    request_fingerprint = models.CharField(
        max_length=64, blank=True, help_text="SHA-256 of the request made under the idempotency key."
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="delivery_idempotency_key_unique",
            ),
            # A package travels on one delivery at a time (services.PackageAlreadyTravelling).
            models.UniqueConstraint(
                fields=["customer", "package_id"],
                condition=~Q(status__in=["delivered", "failed", "cancelled"]),
                name="delivery_package_travels_once",
            ),
        ]
        verbose_name_plural = "deliveries"
        permissions = [("cancel_delivery_as_operator", "Can cancel deliveries before dispatch")]

    def __str__(self):
        return f"delivery {self.id} ({self.status})"

    @classmethod
    def from_db(cls, db, field_names, values):
        """Keep the status it was read with: a change to it is announced (`transitions.announce`)."""
        delivery = super().from_db(db, field_names, values)
        delivery.announced_status = delivery.__dict__.get("status")
        return delivery

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL


class OverdueDelivery(Delivery):
    """Deliveries in transit well past their ETA, or not dispatched well past their deadline, as
    operators see them: nothing arrived, nobody failed them, so a person has to look (the drone's
    status, the timeline, the dead letters)."""

    class Meta:
        proxy = True
        verbose_name = "overdue delivery"
        verbose_name_plural = "overdue deliveries"


class ApiRequestCount(models.Model):
    """Requests of one customer in one rate-limit window, counted by an atomic upsert so that
    every web process shares one exact count (see deliveries/rate_limits.py)."""

    customer = models.ForeignKey(Customer, on_delete=models.CASCADE, related_name="+")
    seconds = models.PositiveIntegerField(help_text="The window's length.")
    window_index = models.BigIntegerField(help_text="Which window: seconds since the epoch // its length.")
    requests = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["customer", "seconds", "window_index"], name="api_request_count_window_unique"
            )
        ]

    def __str__(self):
        return f"{self.requests} requests of {self.customer_id} in window {self.window_index} of {self.seconds} s"
