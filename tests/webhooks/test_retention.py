"""`manage.py prune_webhooks`: settled messages and their attempts, and the heard changes of ended
deliveries owed nothing, past the retention window; never a message still owed, nor the record of a
delivery still going however quiet (a pickup booked weeks ahead)."""

import io
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from webhooks.models import Attempt, Endpoint, HeardChanges, Message

pytestmark = pytest.mark.django_db

LONG_AGO = timezone.now() - timedelta(days=31)


def a_message(endpoint, status, *, made=LONG_AGO, delivery_id=None, attempts=1) -> Message:
    message = Message.objects.create(
        endpoint=endpoint,
        delivery_id=delivery_id or uuid.uuid4(),
        event_type="delivery.delivered",
        body="{}",
        status=status,
        created_at=made,
    )
    for _ in range(attempts):
        Attempt.objects.create(message=message, attempted_at=made, status_code=200)
    return message


def pruned(*arguments: str) -> str:
    out = io.StringIO()
    call_command("prune_webhooks", *arguments, stdout=out)
    return out.getvalue()


def test_settled_messages_and_quiet_deliveries_past_the_window_go_and_what_is_owed_stays():
    endpoint = Endpoint.objects.create(customer_id=uuid.uuid4(), url="https://receiver.example/hooks")
    delivered, given_up = a_message(endpoint, "delivered", attempts=2), a_message(endpoint, "failed")
    recent = a_message(endpoint, "delivered", made=timezone.now())
    pending, held = a_message(endpoint, "pending", attempts=0), a_message(endpoint, "held")
    a_ping = Message.objects.create(endpoint=endpoint, event_type="webhook.ping", body="{}", status="held")
    ended = HeardChanges.objects.create(
        delivery_id=delivered.delivery_id, heard_through=5, ended=True, last_heard_at=LONG_AGO
    )
    waited_on = HeardChanges.objects.create(
        delivery_id=held.delivery_id, heard_through=2, ended=True, last_heard_at=LONG_AGO
    )
    booked_ahead = HeardChanges.objects.create(delivery_id=uuid.uuid4(), heard_through=2, last_heard_at=LONG_AGO)
    lively = HeardChanges.objects.create(delivery_id=uuid.uuid4(), heard_through=5, ended=True)

    output = pruned("--batch-size", "1")

    assert set(Message.objects.values_list("pk", flat=True)) == {recent.pk, pending.pk, held.pk, a_ping.pk}
    assert not Attempt.objects.filter(message_id__in=[delivered.pk, given_up.pk]).exists()
    assert Attempt.objects.filter(message_id__in=[recent.pk, held.pk]).count() == 2
    assert set(HeardChanges.objects.values_list("pk", flat=True)) == {waited_on.pk, booked_ahead.pk, lively.pk}
    assert ended.pk not in set(HeardChanges.objects.values_list("pk", flat=True))
    assert output.splitlines()[0] == "pruning what is older than 30 days"
    assert "  webhooks messages: 2 deleted (2 batches)" in output
    assert "  webhooks attempts: 3 deleted (2 batches)" in output
    assert "  webhooks heard changes: 1 deleted (1 batches)" in output
    assert output.splitlines()[-1].endswith("webhooks messages 2, webhooks attempts 3, webhooks heard changes 1")


def test_a_window_within_the_retry_period_is_refused(settings):
    settings.WEBHOOKS_RETRY_FOR_SECONDS = 3 * 86400

    with pytest.raises(CommandError, match=r"2 days is within the retry period \(3 days\): choose a longer window"):
        pruned("--older-than-days", "2")
