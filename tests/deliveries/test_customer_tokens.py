"""Customer tokens: rotation, revocation and expiry, and the admin shows tokens
but never their values."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from deliveries.models import Customer, CustomerToken

pytestmark = pytest.mark.django_db


def answer(token: str) -> int:
    return Client(headers={"Authorization": f"Bearer {token}"}).get("/api/deliveries").status_code


def command(*args) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().splitlines()


def test_a_new_customer_token_works_and_only_its_hash_and_prefix_are_kept():
    token = command("create_customer", "alice")[-1]

    stored = CustomerToken.objects.get()
    assert answer(token) == 200
    assert stored.token_hash != token and token not in stored.token_hash
    assert stored.prefix == token[:6] and stored.state == "valid"


def test_rotation_replaces_the_token_at_once():
    old = command("create_customer", "alice")[-1]

    new = command("customer_token", "rotate", "alice")[-1]

    assert new != old
    assert (answer(old), answer(new)) == (401, 200)


def test_rotation_with_grace_keeps_the_old_token_until_the_grace_ends():
    old = command("create_customer", "alice")[-1]
    new = command("customer_token", "rotate", "alice", "--grace-minutes", "30")[-1]

    assert (answer(old), answer(new)) == (200, 200)
    grace = CustomerToken.objects.get(prefix=old[:6])
    assert timedelta(minutes=29) < grace.expires_at - timezone.now() <= timedelta(minutes=30)
    CustomerToken.objects.filter(pk=grace.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert (answer(old), answer(new)) == (401, 200)


def test_revocation_stops_every_token_of_the_customer_and_keeps_the_record():
    first = command("create_customer", "alice")[-1]
    second = command("customer_token", "rotate", "alice", "--grace-minutes", "60")[-1]
    bob = command("create_customer", "bob")[-1]

    lines = command("customer_token", "revoke", "alice")

    assert "revoked 2 token(s)" in lines[-1]
    assert (answer(first), answer(second), answer(bob)) == (401, 401, 200)
    assert CustomerToken.objects.filter(customer__name="alice", revoked_at__isnull=False).count() == 2


def test_a_token_with_an_expiry_stops_working_when_it_passes():
    token = command("create_customer", "alice", "--expires-in-days", "30")[-1]
    stored = CustomerToken.objects.get()
    assert answer(token) == 200 and stored.state.startswith("valid until")

    CustomerToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))

    response = Client(headers={"Authorization": f"Bearer {token}"}).get("/api/deliveries")
    assert response.status_code == 401 and response["WWW-Authenticate"].startswith("Bearer")


def test_list_shows_states_and_prefixes_never_values():
    old = command("create_customer", "alice")[-1]
    new = command("customer_token", "rotate", "alice")[-1]

    lines = command("customer_token", "list", "alice")

    assert len(lines) == 2
    assert lines[0].startswith(old[:6]) and "revoked" in lines[0]
    assert lines[1].startswith(new[:6]) and lines[1].endswith("valid")
    assert not any(old in line or new in line for line in lines)


def test_an_unknown_customer_is_a_clear_error():
    with pytest.raises(CommandError, match="no customer named 'nobody'"):
        command("customer_token", "revoke", "nobody")


def test_the_admin_shows_a_customers_tokens_but_not_their_values(admin_client):
    token = command("create_customer", "alice")[-1]
    command("customer_token", "rotate", "alice", "--grace-minutes", "5")
    customer = Customer.objects.get()

    listing = admin_client.get("/admin/deliveries/customer/").content.decode()
    page = admin_client.get(f"/admin/deliveries/customer/{customer.pk}/change/").content.decode()

    assert "alice" in listing
    assert token[:6] in page and "valid until" in page
    assert token not in page and CustomerToken.objects.first().token_hash not in page
