"""The admin's pages of the kernel's tables with `drones` on a database of its own: run by
tests/test_two_databases.py in a pytest of its own with CONTEXT_DATABASE_URLS set (the
settings of a run are read once), never collected by the suite's own runs (the file's name).

Each database numbers its rows itself, so a letter #N may be on both: every page, link, action and
audit entry must be of the database the operator chose."""

import re
from uuid import UUID, uuid4

import pytest
from django.contrib.admin.models import LogEntry
from django.urls import reverse
from django.utils import timezone
from outbox_tests.letters import a_dead_letter, envelope

from outbox.core.working_database import working_in
from outbox.handling.dispatch import dispatch
from outbox.models import DeadLetter, Heartbeat, InboxMessage, OutboxMessage
from tests.two_databases.dead_letter_groups import drones_away  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(databases="__all__")
LIST = "/admin/outbox/deadletter/"
OVERVIEW = "/admin/outbox/outboxmessage/overview/"


@pytest.fixture(autouse=True)
def _drones_on_a_database_of_their_own(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."


def on_drones(**fields) -> DeadLetter:
    with working_in("drones"):
        return a_dead_letter(**fields)


def its_event_on_default(letter: DeadLetter) -> None:
    """The letter's event as its publisher's outbox (on default) has it."""
    envelope, now = letter.envelope, timezone.now()
    OutboxMessage.objects.using("default").create(
        message_id=envelope["message_id"],
        type=envelope["type"],
        version=1,
        source="probe",
        occurred_at=now,
        correlation_id=envelope["correlation_id"],
        payload=envelope["payload"],
        stream=envelope["stream"],
        sequence=1,
        available_at=now,
        published_at=now,
        recipients=[letter.subscriber],
    )


def replay_on_drones(client, letter: DeadLetter) -> None:
    """The replay action, from the list of the drones' letters."""
    client.post(f"{LIST}?database=drones", {"action": "replay", "index": "0", "_selected_action": [letter.pk]})


def test_each_list_shows_its_databases_letters_and_offers_the_other(admin_client):
    a_dead_letter(subscriber="probe_a")
    on_drones(subscriber="probe_b")
    here, there = admin_client.get(LIST), admin_client.get(f"{LIST}?database=drones")
    assert "to probe_a" in here.content.decode() and "to probe_b" not in here.content.decode()
    assert "to probe_b" in there.content.decode() and "to probe_a" not in there.content.decode()
    assert 'href="?database=drones' in here.content.decode(), "no choice of the other database"


@pytest.mark.parametrize(
    "query",
    ["?database=", "?database=nonsense", "?database=default&database=drones", "?database=%00",
     "?_changelist_filters=%ZZ%00", "?_changelist_filters=database%3Dnonsense", "?database=drones&p=99"],
)  # fmt: skip
@pytest.mark.parametrize(
    "page", [LIST, "/admin/outbox/inboxmessage/", "/admin/outbox/outboxmessage/overview/",
             "/admin/outbox/deadletter/groups/", LIST + "{id}/change/", LIST + "{id}/history/"],
)  # fmt: skip
def test_whatever_a_link_says_of_the_database_the_page_answers(admin_client, page, query):
    letter = on_drones(subscriber="probe_b")
    assert admin_client.get(page.format(id=letter.pk) + query).status_code < 500


def test_a_replay_is_of_the_letter_listed_and_its_audit_entry_names_its_database(admin_client):
    here, there = a_dead_letter(subscriber="probe_a"), on_drones(subscriber="probe_b")
    its_event_on_default(there)
    replay_on_drones(admin_client, there)

    assert DeadLetter.objects.using("drones").get(pk=there.pk).status == "replayed"
    assert DeadLetter.objects.using("default").get(pk=here.pk).status == "open"
    copy = OutboxMessage.objects.using("default").get(message_id=there.message_id, target_subscriber="probe_b")
    assert copy.published_at is None  # into the outbox of its event, for that database's relay
    [entry] = LogEntry.objects.all()
    assert entry.object_id == f"{there.pk}@drones"
    assert admin_client.get(entry.get_admin_url()).context["original"].subscriber == "probe_b"  # "Recent actions"
    drones_history = admin_client.get(f"{LIST}{there.pk}/history/?_changelist_filters=database%3Ddrones")
    assert "replayed from the admin" in drones_history.content.decode()
    if here.pk == there.pk:  # default's letter of the same number was not replayed
        assert "replayed from the admin" not in admin_client.get(f"{LIST}{here.pk}/history/").content.decode()


def test_a_replay_whose_audit_entry_fails_leaves_the_letter_open(admin_client, monkeypatch):
    """The letter's database commits last: should the copy or the log entry (both on default) fail,
    the letter is still open, never "replayed" with no copy sent."""
    from outbox.admin import DeadLetterAdmin

    def the_log_fails(*args, **kwargs):
        raise RuntimeError("the audit log is away")

    monkeypatch.setattr(DeadLetterAdmin, "log_change", the_log_fails)
    admin_client.raise_request_exception = False
    letter = on_drones(subscriber="probe_b")
    its_event_on_default(letter)
    replay_on_drones(admin_client, letter)

    assert DeadLetter.objects.using("drones").get(pk=letter.pk).status == "open"
    assert not OutboxMessage.objects.using("default").filter(target_subscriber="probe_b").exists()


def test_a_letter_opened_from_the_groups_page_keeps_its_database_in_its_links(admin_client):
    on_drones(subscriber="probe_b")
    groups = admin_client.get("/admin/outbox/deadletter/groups/?database=drones").content.decode()
    link = re.search(r'href="(/admin/outbox/deadletter/[^"/]+/change/[^"]*)"', groups).group(1)
    page = admin_client.get(link.replace("&amp;", "&"))
    assert page.context["original"].subscriber == "probe_b", link
    html = page.content.decode()
    for kept in (
        re.search(r'href="([^"]*/history/[^"]*)"', html),
        re.search(r'href="([^"]*)" class="closelink"', html),
    ):
        assert re.search("database(=|%3D)drones", kept.group(1)), kept.group(1)


def test_discarding_with_a_note_and_replaying_a_group_act_on_the_chosen_database(admin_client):
    here = a_dead_letter(subscriber="probe_b")
    first, second = on_drones(subscriber="probe_b"), on_drones(subscriber="probe_b")
    url = f"{LIST}?database=drones"
    confirm = admin_client.post(url, {"action": "discard", "index": "0", "_selected_action": [first.pk]})
    assert f"#{first.pk}" in confirm.content.decode()  # the confirmation lists the drones' letter
    admin_client.post(url, {"action": "discard", "_selected_action": [first.pk], "note": "moot", "apply": "1"})
    admin_client.post(url, {"action": "replay_group", "index": "0", "_selected_action": [second.pk]})

    assert DeadLetter.objects.using("drones").get(pk=first.pk).status == "discarded"
    assert DeadLetter.objects.using("drones").get(pk=second.pk).status == "replayed"
    assert DeadLetter.objects.using("default").get(pk=here.pk).status == "open"


def test_the_overview_keeps_the_database_in_its_links_and_lists_the_relays_of_both(admin_client):
    on_drones(subscriber="probe_b")
    now = timezone.now()
    for database in ("default", "drones"):
        Heartbeat.objects.using(database).create(
            process=f"relay@host:{database}", kind="relay", started_at=now, last_seen=now
        )
    html = admin_client.get("/admin/outbox/outboxmessage/overview/?database=drones").content.decode()
    links = [link for link in re.findall(r'href="(/admin/outbox/[^"]*\?[^"]*)"', html) if "timeline" not in link]
    kept = [link for link in links if not link.startswith("/admin/outbox/inboxmessage/?subscriber=")]
    assert kept and all("database=drones" in link for link in kept), kept  # the map's rates: their own test
    assert "relay@host:default <small>(default)" in html and "relay@host:drones <small>(drones)" in html


def test_a_storys_timeline_links_a_drones_letter_to_that_letter(admin_client):
    a_dead_letter(subscriber="probe_a")  # default's, perhaps of the same number
    letter = on_drones(subscriber="probe_b")
    its_event_on_default(letter)
    html = admin_client.get(reverse("admin:outbox_timeline", args=[UUID(letter.envelope["correlation_id"])]))
    link = re.search(r'href="(/admin/outbox/deadletter/[^"/]+/change/)"', html.content.decode()).group(1)
    assert admin_client.get(link).context["original"].subscriber == "probe_b", link


def test_the_overview_of_one_database_says_where_else_letters_are_open(admin_client):
    on_drones(subscriber="probe_b")
    on_drones(subscriber="probe_b")

    html = admin_client.get("/admin/outbox/outboxmessage/overview/").content.decode()
    assert "None on this database." in html
    assert 'Open dead letters on other databases:\n<a href="?database=drones">drones: 2</a>' in html
    there = admin_client.get("/admin/outbox/outboxmessage/overview/?database=drones").content.decode()
    assert "dead-letters-elsewhere" not in there  # default has none open


def arrow(html: str, event_type: str, subscriber: str) -> tuple[str, str]:
    """The rate the overview's map shows on an arrow, and where it links."""
    edge = html[html.index(f'data-type="{event_type}"') :]
    drawn = edge[edge.index(f'data-subscriber="{subscriber}"') :]
    link, rate = re.search(r'<a href="([^"]*)"><text [^>]*class="count"[^>]*>([^<]*)</text>', drawn).groups()
    return rate, link.replace("&amp;", "&")


def completed_on_drones() -> None:
    """The drones handle a delivery.completed, on their database."""
    delivery_id = str(uuid4())
    body = envelope(type="delivery.completed", payload={"delivery_id": delivery_id}, stream=f"delivery:{delivery_id}")
    dispatch(subscriber="drones", body=body)
    assert InboxMessage.objects.using("drones").filter(subscriber="drones").count() == 1


def test_the_overviews_map_counts_each_arrows_messages_on_its_subscribers_database(admin_client):
    """An arrow to the drones counts what they handled on their database, whichever database the
    page shows (counted on the page's, it read a false 0/h); each rate links to what it counts."""
    completed_on_drones()

    for query in ("", "?database=drones"):
        html = admin_client.get(OVERVIEW + query).content.decode()
        rate, link = arrow(html, "delivery.completed", "drones")
        assert rate == "1/h", query
        assert link == "/admin/outbox/inboxmessage/?subscriber=drones&type=delivery.completed&database=drones"
        assert arrow(html, "delivery.completed", "notifications") == (
            "0/h",
            "/admin/outbox/inboxmessage/?subscriber=notifications&type=delivery.completed&database=default",
        )
    listed = admin_client.get(link).context["cl"].result_list
    assert [(row.subscriber, row.type) for row in listed] == [("drones", "delivery.completed")]


@pytest.mark.django_db(databases="__all__", transaction=True)
@pytest.mark.usefixtures("drones_away")
def test_an_arrow_whose_subscribers_database_does_not_answer_shows_no_rate_rather_than_0(admin_client):
    """Unknown is not idle: the drones' arrows say "—", the others still count."""
    html = admin_client.get(OVERVIEW).content.decode()
    assert arrow(html, "delivery.completed", "drones")[0] == "—/h"
    assert arrow(html, "delivery.completed", "notifications")[0] == "0/h"
