"""The admin index's "Needs attention" block: open dead letters, silent relays and workers, and
deliveries stuck past their deadline or ETA, each a count that links to the list of them."""

import re
from datetime import timedelta
from html import unescape

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from outbox_tests.letters import a_dead_letter

from deliveries.models import Delivery
from outbox.models import Heartbeat
from tests.factories import requested
from webhooks.models import Endpoint

pytestmark = pytest.mark.django_db


def block(admin_client) -> str:
    """The block's HTML, or '' when the index has none."""
    index = admin_client.get("/admin/").content.decode()
    found = re.search(r'<div id="needs-attention">(.*?)</div>', index, flags=re.DOTALL)
    return unescape(found.group(1)) if found else ""


def warnings(html: str) -> list[str]:
    return [
        " ".join(re.sub(r"<[^>]+>", "", item).split()) for item in re.findall(r"<li[^>]*>(.*?)</li>", html, re.DOTALL)
    ]


def test_with_nothing_wrong_the_index_says_so_and_warns_of_nothing(admin_client, customer, settings):
    requested(customer)  # a delivery on its way, its deadline ahead
    Heartbeat.objects.create(process="relay@here:1", kind="relay", started_at=timezone.now(), last_seen=timezone.now())

    shown = block(admin_client)

    assert "Nothing needs attention" in shown and warnings(shown) == []


def test_open_dead_letters_are_counted_with_a_link_to_the_open_ones_and_their_groups(admin_client):
    for _ in range(15):
        a_dead_letter()
    a_dead_letter(status="discarded")  # resolved: not counted

    shown = block(admin_client)

    assert warnings(shown) == ["15 open dead letters · in groups of one cause"]
    assert 'href="/admin/outbox/deadletter/?status=open"' in shown
    assert 'href="/admin/outbox/deadletter/groups/"' in shown
    assert "Nothing needs attention" not in shown
    listed = admin_client.get("/admin/outbox/deadletter/?status=open")
    assert listed.context["cl"].result_count == 15


def test_a_delivery_stuck_past_its_deadline_is_counted_and_its_link_lists_it(admin_client, customer, settings):
    settings.DELIVERY_OVERDUE_AFTER_SECONDS = 600
    stuck, on_time, failed = (requested(customer) for _ in range(3))
    long_ago = timezone.now() - timedelta(minutes=11)
    Delivery.objects.filter(pk=stuck).update(status="waiting_for_drone", deadline=long_ago)
    Delivery.objects.filter(pk=on_time).update(
        status="waiting_for_drone", deadline=timezone.now() - timedelta(minutes=9)
    )
    Delivery.objects.filter(pk=failed).update(status="failed", deadline=long_ago)  # ended: nothing to do

    shown = block(admin_client)

    assert warnings(shown) == ["1 delivery stuck past its deadline or ETA"]
    link = re.search(r'<a href="([^"]+)"><strong>1</strong> delivery stuck', shown).group(1)
    listed = admin_client.get(link)
    assert [delivery.pk for delivery in listed.context["cl"].result_list] == [stuck]


def test_a_silent_relay_is_counted_with_a_link_to_the_overviews_relays(admin_client, settings):
    now, beat = timezone.now(), timedelta(seconds=settings.OUTBOX_HEARTBEAT_SECONDS)
    Heartbeat.objects.create(process="relay@a:1", kind="relay", started_at=now - beat * 10, last_seen=now - beat * 4)
    Heartbeat.objects.create(process="worker@a:2", kind="worker", started_at=now, last_seen=now)  # alive
    # Not seen for two days: the overview no longer lists it, and neither does the index.
    Heartbeat.objects.create(process="relay@b:3", kind="relay", started_at=now, last_seen=now - timedelta(days=2))

    shown = block(admin_client)

    assert warnings(shown) == ["1 silent relay or worker"]
    assert 'href="/admin/outbox/outboxmessage/overview/#relays-and-workers"' in shown
    overview = admin_client.get("/admin/outbox/outboxmessage/overview/").content.decode()
    assert 'id="relays-and-workers"' in overview and "silent for" in overview


def test_a_disabled_webhook_endpoint_is_counted_and_its_link_lists_it(admin_client, customer):
    disabled, failing = (
        Endpoint.objects.create(customer_id=customer.customer.pk, url=f"https://hooks.example.com/{n}") for n in (1, 2)
    )
    Endpoint.objects.filter(pk=disabled.pk).update(disabled_at=timezone.now(), disabled_reason="no success for 3 days")
    Endpoint.objects.filter(pk=failing.pk).update(failing_since=timezone.now())  # still retried: not counted

    shown = block(admin_client)

    assert warnings(shown) == ["1 webhook endpoint disabled"]
    link = re.search(r'<a href="([^"]+)"><strong>1</strong> webhook endpoint disabled', shown).group(1)
    listed = admin_client.get(link)
    assert [endpoint.pk for endpoint in listed.context["cl"].result_list] == [disabled.pk]


def test_only_what_a_user_may_see_is_counted_for_them(admin_client, client, customer):
    a_dead_letter()
    clerk = User.objects.create_user("clerk", password="pw", is_staff=True)
    clerk.user_permissions.add(Permission.objects.get(codename="view_customer"))
    client.force_login(clerk)

    assert warnings(block(admin_client)) == ["1 open dead letter · in groups of one cause"]
    assert block(client) == "" and "dead letter" not in client.get("/admin/").content.decode()
