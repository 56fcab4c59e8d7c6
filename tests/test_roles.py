"""Operators and auditors: each admin action checks its permission, and every operator
action leaves an audit record (who, when, on what, the note) in Django's admin log."""

from uuid import UUID

import pytest
from axes.models import AccessAttempt
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from outbox_tests.letters import a_dead_letter

from deliveries.models import Delivery
from drones.models import Drone
from drones.services import seed_fleet
from outbox.models import DeadLetter
from tests.console import act
from tests.factories import Customer

pytestmark = pytest.mark.django_db


def staff_in(group: str) -> Client:
    user = User.objects.create_user(f"{group}-user", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator():
    return staff_in("operators")


@pytest.fixture
def auditor():
    return staff_in("auditors")


@pytest.fixture
def drone():
    seed_fleet(count=1, latitude=47.6, longitude=-122.3)
    return Drone.objects.get()


def audit_trail() -> list[tuple[str, str, str]]:
    return [
        (entry.user.username, entry.content_type.model, entry.change_message)
        for entry in LogEntry.objects.order_by("id")
    ]


def test_migrate_leaves_both_groups_and_create_roles_is_idempotent(capsys):
    call_command("create_roles")
    call_command("create_roles")

    assert "operators:" in capsys.readouterr().out
    operators = set(Group.objects.get(name="operators").permissions.values_list("codename", flat=True))
    auditors = set(Group.objects.get(name="auditors").permissions.values_list("codename", flat=True))
    assert {"replay_deadletter", "discard_deadletter", "ground_drone", "return_drone"} <= operators
    assert auditors == {codename for codename in operators if codename.startswith("view_")}
    assert {"view_deadletter", "view_drone", "view_delivery", "view_logentry"} <= auditors


@pytest.mark.parametrize("role", ["operator", "auditor"])
@pytest.mark.parametrize(
    "page",
    [
        "/admin/outbox/deadletter/",
        "/admin/drones/drone/",
        "/admin/deliveries/delivery/",
        "/admin/outbox/outboxmessage/overview/",
        "/admin/admin/logentry/",
    ],
)
def test_both_roles_see_the_state_and_the_audit_log(request, role, page):
    assert request.getfixturevalue(role).get(page).status_code == 200


def test_an_operator_replays_and_discards_and_each_leaves_an_audit_record(operator):
    replayed, discarded = a_dead_letter(), a_dead_letter()

    act(operator, "outbox/deadletter", "replay", [replayed.pk])
    act(operator, "outbox/deadletter", "discard", [discarded.pk], apply="Discard", note="a duplicate order")

    assert DeadLetter.objects.get(pk=replayed.pk).status == "replayed"
    assert DeadLetter.objects.get(pk=discarded.pk).status == "discarded"
    assert audit_trail() == [
        ("operators-user", "deadletter", "replayed: replayed from the admin"),
        ("operators-user", "deadletter", "discarded: a duplicate order"),
    ]


def test_an_operator_replays_a_group_and_each_letter_is_audited(operator):
    chosen, same_group = a_dead_letter(), a_dead_letter()

    act(operator, "outbox/deadletter", "replay_group", [chosen.pk])

    assert {e.object_id for e in LogEntry.objects.all()} == {str(chosen.pk), str(same_group.pk)}
    assert {message for _, _, message in audit_trail()} == {"replayed with its group: replayed from the admin"}


def test_an_operator_grounds_and_returns_a_drone_and_each_is_audited(operator, drone):
    act(operator, "drones/drone", "ground", [drone.pk])
    assert Drone.objects.get().status == "maintenance"
    act(operator, "drones/drone", "return_to_service", [drone.pk])

    assert Drone.objects.get().status == "available"
    assert audit_trail() == [
        ("operators-user", "drone", "grounded"),
        ("operators-user", "drone", "returned to service"),
    ]
    assert all(entry.object_id == str(drone.pk) for entry in LogEntry.objects.all())


def test_an_operator_cancels_a_delivery_and_it_is_audited(operator):
    delivery_id = UUID(Customer("alice").request().json()["deliveryId"])

    act(operator, "deliveries/delivery", "cancel", [delivery_id])

    assert Delivery.objects.get(pk=delivery_id).status == "cancelled"
    assert audit_trail() == [("operators-user", "delivery", "cancelled")]


@pytest.mark.parametrize(
    ("model", "action"),
    [
        ("outbox/deadletter", "replay"),
        ("outbox/deadletter", "replay_group"),
        ("outbox/deadletter", "discard"),
        ("drones/drone", "ground"),
        ("drones/drone", "return_to_service"),
        ("deliveries/delivery", "cancel"),
    ],
)
def test_an_auditor_is_offered_no_action_and_posting_one_changes_nothing(auditor, drone, model, action):
    letter = a_dead_letter()
    delivery_id = UUID(Customer("alice").request().json()["deliveryId"])
    target = {"outbox/deadletter": letter.pk, "drones/drone": drone.pk, "deliveries/delivery": delivery_id}[model]
    if action == "return_to_service":
        Drone.objects.update(status="maintenance")

    page = auditor.get(f"/admin/{model}/")
    response = act(auditor, model, action, [target], apply="Discard", note="why not")

    assert f'value="{action}"' not in page.content.decode()
    assert response.status_code in (200, 302)
    assert DeadLetter.objects.get(pk=letter.pk).status == "open"
    assert Drone.objects.get().status == ("maintenance" if action == "return_to_service" else "available")
    assert Delivery.objects.get(pk=delivery_id).status == "requested"
    assert not LogEntry.objects.exists()


def test_an_operator_without_the_role_sees_nothing():
    user = User.objects.create_user("newcomer", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)

    assert client.get("/admin/outbox/deadletter/").status_code == 403
    assert client.get("/admin/outbox/outboxmessage/overview/").status_code == 403


def test_a_customer_token_opens_no_admin_page(db):
    token = Customer("alice").token
    client = Client(headers={"Authorization": f"Bearer {token}"})

    for page in ("/admin/", "/admin/outbox/deadletter/", "/admin/drones/drone/"):
        response = client.get(page)
        assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_the_admin_login_locks_a_username_out_after_repeated_failures(settings):
    User.objects.create_user("operator", password="right-password", is_staff=True)
    client = Client()

    def log_in(password: str):
        return client.post("/admin/login/", {"username": "operator", "password": password})

    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in("guess").status_code == 200  # the form again, with its error
    assert log_in("guess").status_code == 429
    locked_out = log_in("right-password")

    assert locked_out.status_code == 429  # even the right password, until the cool-off ends
    assert "_auth_user_id" not in client.session
    call_command("axes_reset_username", "operator")
    assert log_in("right-password").status_code == 302


def test_guessing_one_username_from_many_addresses_is_locked_out_too(settings):
    User.objects.create_user("operator", password="right-password", is_staff=True)

    def log_in(password: str, address: str):
        return Client(REMOTE_ADDR=address).post("/admin/login/", {"username": "operator", "password": password})

    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in("guess", f"203.0.113.{n + 1}")  # a new address for every guess

    assert log_in("right-password", "198.51.100.7").status_code == 429


def test_an_action_that_changes_nothing_leaves_no_audit_record(operator, drone):
    delivery_id = UUID(Customer("alice").request().json()["deliveryId"])
    # The customer cancelled first: the operator's cancel then has nothing to do.
    Delivery.objects.filter(pk=delivery_id).update(status="cancelled", status_reason="cancelled_by_customer")

    act(operator, "drones/drone", "return_to_service", [drone.pk])  # it is available already
    act(operator, "deliveries/delivery", "cancel", [delivery_id])
    act(operator, "drones/drone", "ground", [drone.pk])
    act(operator, "drones/drone", "ground", [drone.pk])  # grounded already

    assert audit_trail() == [("operators-user", "drone", "grounded")]
    assert Delivery.objects.get(pk=delivery_id).status_reason == "cancelled_by_customer"


def test_behind_a_proxy_failures_are_recorded_against_the_client_not_a_forged_hop(settings):
    settings.PROXY_COUNT = 1
    User.objects.create_user("operator", password="right-password", is_staff=True)

    def log_in(client_address: str, password: str, forged: str = "198.51.100.66"):
        via_proxy = {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": f"{forged}, {client_address}"}
        return Client().post("/admin/login/", {"username": "operator", "password": password}, **via_proxy)

    for _ in range(settings.AXES_FAILURE_LIMIT):
        log_in("203.0.113.7", "guess", forged=f"198.51.100.{_}")  # a forged first hop changes nothing

    assert set(AccessAttempt.objects.values_list("ip_address", flat=True)) == {"203.0.113.7"}
    assert log_in("203.0.113.7", "right-password").status_code == 429
