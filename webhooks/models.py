import base64
import secrets
import uuid

from django.db import models
from django.utils import timezone


def new_secret() -> str:
    """A Standard Webhooks signing secret: `whsec_` and the base64 of 24 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def new_webhook_id() -> str:
    """The `webhook-id` of one message: the same on every retry of it, unique across messages."""
    return f"msg_{uuid.uuid4().hex}"


class Endpoint(models.Model):
    """A URL a customer registered to be POSTed its deliveries' status changes."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    customer_id = models.UUIDField(db_index=True)  # the deliveries context's customer: a value, never a foreign key
    url = models.URLField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    event_types = models.JSONField(default=list, blank=True, help_text="empty: every type")
    secret = models.CharField(max_length=100, default=new_secret)
    previous_secret = models.CharField(max_length=100, blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    disabled_reason = models.CharField(max_length=200, blank=True)
    failing_since = models.DateTimeField(null=True, blank=True, help_text="the first failure not followed by a success")
    # Whom to e-mail when it is disabled (the customer's own data: no event carries it), and the
    # disabling last told of (its `disabled_at`): one e-mail per disabling.
    alert_email = models.EmailField(blank=True, db_default="")
    alerted_for = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self):
        return self.url

    @property
    def enabled(self) -> bool:
        return self.disabled_at is None

    def wants(self, event_type: str) -> bool:
        return not self.event_types or event_type in self.event_types


class Message(models.Model):
    """One POST owed to an endpoint: its body built once, signed and sent as is on every attempt."""

    class Status(models.TextChoices):
        PENDING = "pending"
        DELIVERED = "delivered"
        HELD = "held"  # its endpoint is disabled: sent once it is enabled again
        FAILED = "failed"  # given up after WEBHOOKS_RETRY_FOR_SECONDS

    id = models.CharField(primary_key=True, max_length=40, default=new_webhook_id, editable=False)
    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="messages")
    delivery_id = models.UUIDField(null=True, blank=True)  # none for a ping
    # The status change's number on its delivery's stream: messages about one delivery go in this
    # order, whichever order the workers happened to hear the changes in.
    sequence = models.PositiveBigIntegerField(null=True, blank=True)
    # The delivery's change it tells (1, 2, 3: `delivery.status_changed`'s `change_number`): not sent
    # before every change below it has been heard (HeardChanges), whether or not the endpoint wants it.
    change_number = models.PositiveIntegerField(null=True, blank=True)
    event_type = models.CharField(max_length=60)
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["endpoint", "delivery_id", "created_at"], name="webhooks_message_in_order"),
            models.Index(fields=["status", "created_at"], name="webhooks_message_by_status"),  # retention
        ]
        permissions = [("replay_message", "Can replay a webhook message given up or held")]

    def __str__(self):
        return f"{self.event_type} {self.pk}"


class HeardChanges(models.Model):
    """Which of a delivery's status changes this context has heard: 1 to `heard_through`, and those
    above a gap (`heard_beyond`, None when there is no gap) whose messages wait until it is filled;
    `ended` once its delivered, failed or cancelled was heard, which retention waits for."""

    delivery_id = models.UUIDField(primary_key=True)
    heard_through = models.PositiveIntegerField(default=0)
    heard_beyond = models.JSONField(null=True, blank=True)
    ended = models.BooleanField(default=False)
    last_heard_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["ended", "last_heard_at"], name="webhooks_heard_ended")]  # retention

    def __str__(self):
        return f"{self.delivery_id}: 1-{self.heard_through}" + "".join(f", {n}" for n in self.heard_beyond or ())

    def heard(self, number: int) -> bool:
        return number <= self.heard_through or number in (self.heard_beyond or ())

    def hear(self, number: int) -> None:
        if not self.heard(number):
            beyond = {*(self.heard_beyond or ()), number}
            while self.heard_through + 1 in beyond:
                self.heard_through += 1
                beyond.remove(self.heard_through)
            self.heard_beyond = sorted(beyond) or None


class Attempt(models.Model):
    """One POST of a message, and what came of it."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="attempts_made")
    attempted_at = models.DateTimeField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    duration_ms = models.PositiveIntegerField(default=0)
    response_excerpt = models.CharField(max_length=1024, blank=True)

    class Meta:
        indexes = [models.Index(fields=["message", "-attempted_at"], name="webhooks_attempt_newest")]

    def __str__(self):
        return f"attempt of {self.message_id} at {self.attempted_at:%Y-%m-%d %H:%M:%S}"
