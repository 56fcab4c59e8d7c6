"""What the webhooks keep, and for how long: messages delivered or given up, with their attempts,
and the record of a delivery's heard changes once it has been quiet, past WEBHOOKS_RETENTION_SECONDS.
Never a message still owed (pending, or held for a disabled endpoint), nor the heard changes its
turn may wait on."""

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
    made before `older_than` ago, and heard changes of deliveries quiet for that long and owed
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
    quiet = HeardChanges.objects.filter(last_heard_at__lt=before).exclude(delivery_id__in=owed.values("delivery_id"))
    results = [Pruned("webhooks messages"), Pruned("webhooks attempts"), Pruned("webhooks heard changes")]
    messages, attempts, heard = results
    for ids in _batches(settled, batch_size):
        with atomic("webhooks"):
            attempts.deleted += Attempt.objects.filter(message_id__in=ids).delete()[0]
            messages.deleted += Message.objects.filter(pk__in=ids).delete()[0]
        messages.batches += 1
        attempts.batches += 1
        on_batch(messages)
    for ids in _batches(quiet, batch_size):
        with atomic("webhooks"):
            heard.deleted += HeardChanges.objects.filter(pk__in=ids).delete()[0]
        heard.batches += 1
        on_batch(heard)
    for pruned in results:
        pruned.finished = True
        on_batch(pruned)
    return results


def _batches(rows, size: int) -> Iterator[list]:
    """The primary keys of `rows`, `size` at a time, read again after each batch is deleted."""
    while ids := list(rows.values_list("pk", flat=True)[:size]):
        yield ids
        if len(ids) < size:
            return
