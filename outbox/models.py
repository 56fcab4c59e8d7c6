"""The kernel's tables: what is to be sent, what was received, what could not be processed."""

import uuid

from django.db import models
from django.db.models import Q, Value


class OutboxMessage(models.Model):
    """An event appended in the same transaction as the state change it announces."""

    # Looked up through outbox_message_target_unique, which leads with it.
    message_id = models.UUIDField(default=uuid.uuid4, editable=False)
    type = models.CharField(max_length=100, db_index=True)
    version = models.PositiveIntegerField()
    source = models.CharField(max_length=100, help_text="The context that published it (its app).")
    occurred_at = models.DateTimeField()
    correlation_id = models.UUIDField(db_index=True)
    causation_id = models.UUIDField(null=True, blank=True)
    stream = models.CharField(max_length=200)
    sequence = models.PositiveBigIntegerField()
    hops = models.PositiveIntegerField(default=0)
    payload = models.JSONField()
    available_at = models.DateTimeField(help_text="Not relayed before this time (timeouts, retries).")
    published_at = models.DateTimeField(null=True, blank=True)
    # A relay leases rows instead of holding locks while it talks to the broker; an expired
    # lease (a crashed relay) makes the row claimable again.
    claimed_until = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=64, blank=True)
    send_attempts = models.PositiveIntegerField(default=0)
    # A replay re-sends a dead-lettered message to the one subscriber that failed it.
    target_subscriber = models.CharField(max_length=100, blank=True, help_text="Blank: every subscriber.")
    # Who must receive it, decided when it was published (by the code that published it), so a
    # relay running other code (a rolling deploy) sends exactly these copies.
    recipients = models.JSONField(default=list, help_text="Subscribers decided at publish time.")
    # A database default too: rows written by code that predates the column (a rolling deploy) stay valid.
    trace_context = models.JSONField(
        default=dict,
        db_default=Value({}, output_field=models.JSONField()),
        blank=True,
        help_text="W3C traceparent and tracestate of the publishing span, when tracing.",
    )
    # The redelivery sweep (outbox.relaying.sweep): when every recipient had acknowledged it, and, on a
    # copy for one subscriber, how many times the sweep sent it again.
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    resends = models.PositiveSmallIntegerField(default=0)

    class Meta:
        indexes = [
            models.Index(
                fields=["available_at", "id"],
                condition=Q(published_at__isnull=True),
                name="outbox_pending_idx",
            ),
            models.Index(
                fields=["published_at", "id"],
                condition=Q(acknowledged_at__isnull=True, target_subscriber="", published_at__isnull=False),
                name="outbox_unsettled_idx",
            ),
            # When the next lease ends, asked by every idle relay: few rows, read in one probe.
            models.Index(
                fields=["claimed_until"],
                condition=Q(published_at__isnull=True, claimed_until__isnull=False),
                name="outbox_leased_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["stream", "sequence"], condition=Q(target_subscriber=""), name="outbox_stream_sequence_unique"
            ),
            models.UniqueConstraint(fields=["message_id", "target_subscriber"], name="outbox_message_target_unique"),
        ]

    def __str__(self):
        return f"{self.type} v{self.version} {self.message_id}"

    def envelope(self, *, traced: bool = True) -> dict:
        """The wire form, exactly as the guide's envelope (Concepts); `traced=False`
        leaves out the trace context (a dead letter for a row whose trace context is unusable)."""
        return {
            "message_id": str(self.message_id),
            "type": self.type,
            "version": self.version,
            "occurred_at": self.occurred_at.isoformat(),
            "correlation_id": str(self.correlation_id),
            "causation_id": str(self.causation_id) if self.causation_id else None,
            "stream": self.stream,
            "sequence": self.sequence,
            "hops": self.hops,
            "payload": self.payload,
            **(self.trace_context if traced else {}),
        }


class Stream(models.Model):
    """The last sequence number handed out per aggregate stream (`order:7`)."""

    name = models.CharField(max_length=200, primary_key=True)
    last_sequence = models.PositiveBigIntegerField(default=0)

    def __str__(self):
        return f"{self.name}@{self.last_sequence}"


class InboxMessage(models.Model):
    """A message one subscriber has processed; its presence makes a redelivery a no-op."""

    subscriber = models.CharField(max_length=100)
    message_id = models.UUIDField()
    type = models.CharField(max_length=100)
    correlation_id = models.UUIDField(db_index=True)
    processed_at = models.DateTimeField(auto_now_add=True)
    duplicates = models.PositiveIntegerField(default=0, help_text="Redeliveries skipped after the first.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["subscriber", "message_id"], name="inbox_subscriber_message_unique"),
        ]
        # The timeline asks who processed a message, whatever the subscriber.
        indexes = [models.Index(fields=["message_id"], name="inbox_message_idx")]

    def __str__(self):
        return f"{self.subscriber} <- {self.type} {self.message_id}"


class DeadLetter(models.Model):
    """A message a subscriber could not process: kept whole so an operator can replay it."""

    class Status(models.TextChoices):
        OPEN = "open"
        REPLAYED = "replayed"  # sent again; the subscriber has not processed it yet
        PROCESSED = "processed"  # the subscriber processed it after all: a later copy, or the replay
        DISCARDED = "discarded"

    subscriber = models.CharField(max_length=100)
    message_id = models.UUIDField(null=True, blank=True)
    type = models.CharField(max_length=100, blank=True)
    correlation_id = models.UUIDField(null=True, blank=True, db_index=True)
    envelope = models.JSONField(help_text="The message as received, even when it was malformed.")
    reason = models.CharField(max_length=50, db_index=True)
    exception_type = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    fingerprint = models.CharField(
        max_length=16,
        blank=True,
        help_text="The error's type and its message with ids, numbers and times taken out: letters failed "
        "for one cause share it (outbox.core.fingerprints).",
    )
    traceback = models.TextField(blank=True)
    attempts = models.PositiveIntegerField(default=1)
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.OPEN, db_index=True)
    replays = models.PositiveIntegerField(default=0)
    last_replayed_at = models.DateTimeField(
        null=True, blank=True, help_text="When it was last sent again: its group tells what failed after."
    )
    note = models.TextField(blank=True, help_text="Why it was discarded or replayed, for the audit trail.")
    resolved_at = models.DateTimeField(null=True, blank=True)
    resolved_by = models.CharField(max_length=150, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["subscriber", "message_id"], name="deadletter_subscriber_message_unique"),
        ]
        indexes = [
            models.Index(fields=["message_id"], name="deadletter_message_idx"),
            models.Index(fields=["status", "subscriber", "type", "reason", "fingerprint"], name="deadletter_group_idx"),
        ]
        permissions = [
            ("replay_deadletter", "Can replay dead letters"),
            ("discard_deadletter", "Can discard dead letters"),
        ]

    def __str__(self):
        return f"{self.subscriber}: {self.type or '?'} ({self.reason})"


class StreamCursor(models.Model):
    """How far one subscriber has read one stream, for subscriptions that care about order."""

    subscriber = models.CharField(max_length=100)
    stream = models.CharField(max_length=200)
    last_sequence = models.PositiveBigIntegerField(default=0)
    gaps = models.PositiveIntegerField(default=0, help_text="Sequence numbers skipped over (never seen first).")
    stale = models.PositiveIntegerField(default=0, help_text="Events dropped as older than one already applied.")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["subscriber", "stream"], name="cursor_subscriber_stream_unique")]
        # Retention asks whether any subscriber still has a cursor on a stream.
        indexes = [models.Index(fields=["stream"], name="cursor_stream_idx")]

    def __str__(self):
        return f"{self.subscriber} @ {self.stream}#{self.last_sequence}"


class Heartbeat(models.Model):
    """A relay or worker process saying it is alive, every few seconds, with what it has done:
    an operator sees a dead relay at a glance in the messaging overview."""

    class Kind(models.TextChoices):
        RELAY = "relay"
        WORKER = "worker"

    process = models.CharField(max_length=200, unique=True, help_text="kind@host:pid")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    started_at = models.DateTimeField()
    last_seen = models.DateTimeField(db_index=True)
    relayed = models.PositiveBigIntegerField(default=0, help_text="Rows relayed since it started.")
    handled = models.PositiveBigIntegerField(default=0, help_text="Messages handled since it started.")

    def __str__(self):
        return self.process


class Lock(models.Model):
    """A row for each of the kernel's jobs that runs in one place at a time (`sweep`: a page of the
    redelivery sweep), taken FOR UPDATE SKIP LOCKED: a context's role has no privilege on this
    table, so it cannot hold a job back, as it could hold any advisory lock."""

    name = models.CharField(max_length=50, primary_key=True)

    def __str__(self):
        return self.name
