"""The operators' pages of webhooks: endpoints that need attention first, each message's attempts,
and a replay of a message given up that sends it again."""

import re
from datetime import timedelta
from uuid import uuid4

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.admin.utils import quote
from django.utils import timezone

from outbox.testing import run_choreography
from webhooks import services
from webhooks.models import Endpoint, Message


def endpoint(url: str, **fields) -> Endpoint:
    return Endpoint.objects.create(customer_id=uuid4(), url=url, **fields)


def test_endpoints_are_listed_disabled_first_then_failing_then_the_rest(admin_client):
    now = timezone.now()
    fine = endpoint("https://fine.example/hooks")
    failing = endpoint("https://failing.example/hooks", failing_since=now - timedelta(hours=5))
    failing_longer = endpoint("https://failing-longer.example/hooks", failing_since=now - timedelta(days=1))
    disabled = endpoint("https://disabled.example/hooks", disabled_at=now, disabled_reason="no success for 3 days")

    page = admin_client.get("/admin/webhooks/endpoint/")

    assert page.status_code == 200
    html = page.content.decode()
    places = [html.index(e.url) for e in (disabled, failing_longer, failing, fine)]
    assert places == sorted(places)
    assert "disabled: no success for 3 days" in html
    assert admin_client.get(f"/admin/webhooks/endpoint/{fine.pk}/change/").status_code == 200
    attempts = admin_client.get(f"/admin/webhooks/attempt/?message__endpoint__id__exact={fine.pk}")
    assert attempts.status_code == 200


def test_a_message_given_up_is_replayed_and_sent(admin_client, receiver):
    target = endpoint(receiver.url)
    message = Message.objects.create(
        endpoint=target, event_type="webhook.ping", body='{"type":"webhook.ping"}', status=Message.Status.FAILED
    )
    assert admin_client.get(f"/admin/webhooks/message/{quote(message.pk)}/change/").status_code == 200

    answer = admin_client.post(
        "/admin/webhooks/message/", {"action": "replay", "_selected_action": [message.pk]}, follow=True
    )

    assert answer.status_code == 200 and "1 message(s) queued again." in answer.content.decode()
    run_choreography()
    message.refresh_from_db()
    assert message.status == Message.Status.DELIVERED
    assert [r["headers"]["webhook-id"] for r in receiver.received] == [message.pk]
    assert LogEntry.objects.filter(object_id=message.pk, change_message="replayed").exists()


def test_an_owed_messages_link_opens_it_whatever_its_id_holds(admin_client):
    """A webhook id's `_40` is the admin's escape for `@`: the link quotes the id (2 in 100 did not open)."""
    target = endpoint("https://receiver.example/hooks")
    message = Message.objects.create(pk="msg_40c81bcccf454ffab00f096eb6566275", endpoint=target, body="{}")

    page = admin_client.get(f"/admin/webhooks/endpoint/{target.pk}/change/").content.decode()

    [link] = re.findall(r'href="(/admin/webhooks/message/[^"]+/change/)"', page)
    opened = admin_client.get(link)
    assert opened.status_code == 200 and message.pk in opened.content.decode()


def test_a_message_held_at_a_disabled_endpoint_is_not_replayed(db, receiver):
    target = endpoint(receiver.url)
    message = Message.objects.create(endpoint=target, event_type="webhook.ping", body="{}")
    services.disable(endpoint=target, reason="by hand")
    message.refresh_from_db()

    with pytest.raises(services.NotReplayable, match="enable it"):
        services.replay(message=message)
    assert Message.objects.get(pk=message.pk).status == Message.Status.HELD
