"""What the webhooks keep, and for how long: messages delivered or given up, with their attempts,
and the record of an ended delivery's heard changes, past WEBHOOKS_RETENTION_SECONDS. Never a
message still owed (pending, or held for a disabled endpoint), nor the record of a delivery still
going (a pickup booked weeks ahead is quiet until then) or owed anything."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from outbox.api import atomic
from webhooks.models import Attempt, HeardChanges, Message
from webhooks.services import OWED


@dataclass
class Pruned:
    table: str
    deleted: int = 0
    batches: int = 0
    finished: bool = False


def prune(
    *, older_than: timedelta, batch_size: int = 5_000, on_batch: Callable[[Pruned], None] = lambda pruned: None
) -> list[Pruned]:
    """Delete in batches, each its own short transaction: settled messages (their attempts first)
    made before `older_than` ago, and the heard changes of deliveries ended, quiet that long and owed
    nothing. A window within WEBHOOKS_RETRY_FOR_SECONDS is refused (ValueError): a message may be
    retried that long."""
    horizon = timedelta(seconds=settings.WEBHOOKS_RETRY_FOR_SECONDS)
    if older_than < horizon:
        days = older_than.total_seconds() / 86400
        raise ValueError(f"{days:g} days is within the retry period ({horizon.total_seconds() / 86400:g} days)")
    before = timezone.now() - older_than
    settled = Message.objects.filter(
        status__in=[Message.Status.DELIVERED, Message.Status.FAILED], created_at__lt=before
    )
    owed = Message.objects.filter(status__in=OWED, delivery_id__isnull=False)  # NOT IN a NULL keeps every row
    quiet = HeardChanges.objects.filter(ended=True, heard_beyond__isnull=True, last_heard_at__lt=before).exclude(
        delivery_id__in=owed.values("delivery_id")
    )
    results = [Pruned("webhooks messages"), Pruned("webhooks attempts"), Pruned("webhooks heard changes")]
    messages, attempts, heard = results
    for ids in _locked_batches(settled, batch_size):
        attempts.deleted += Attempt.objects.filter(message_id__in=ids).delete()[0]
        messages.deleted += Message.objects.filter(pk__in=ids).delete()[0]
        messages.batches += 1
        attempts.batches += 1
        on_batch(messages)
    for ids in _locked_batches(quiet, batch_size):
        heard.deleted += HeardChanges.objects.filter(pk__in=ids).delete()[0]
        heard.batches += 1
        on_batch(heard)
    for pruned in results:
        pruned.finished = True
        on_batch(pruned)
    return results


def _locked_batches(rows, size: int) -> Iterator[list]:
    """The primary keys of `rows`, up to `size` at a time, each batch locked in a transaction of its
    own while the caller deletes it: a row a worker holds (a message replayed, a change being heard)
    is skipped, and one changed meanwhile no longer matches."""
    while True:
        with atomic("webhooks"):
            ids = list(rows.select_for_update(skip_locked=True).values_list("pk", flat=True)[:size])
            if ids:
                yield ids
        if len(ids) < size:
            return
