"""The admin index's "Needs attention" block with `drones` on a database of its own: run by
tests/test_two_databases.py in a pytest of its own with CONTEXT_DATABASE_URLS set.

Each database's open dead letters are counted on a line of their own, linking to that database's
list; a database that does not answer is "unknown" and the index still shows the rest."""

import re
from html import unescape

import pytest
from outbox_tests.letters import a_dead_letter

from outbox.core.working_database import working_in
from tests.two_databases.dead_letter_groups import drones_away  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def _drones_on_a_database_of_their_own(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."


def lines(admin_client) -> list[str]:
    index = admin_client.get("/admin/")
    assert index.status_code == 200
    found = re.search(r'<div id="needs-attention">(.*?)</div>', index.content.decode(), flags=re.DOTALL)
    items = re.findall(r"<li[^>]*>(.*?)</li>", found.group(1) if found else "", flags=re.DOTALL)
    return [" ".join(re.sub(r"<[^>]+>", "", unescape(item)).split()) for item in items]


@pytest.mark.django_db(databases="__all__")
def test_each_databases_open_dead_letters_are_counted_with_a_link_to_that_databases_list(admin_client):
    a_dead_letter(subscriber="probe_a")
    with working_in("drones"):
        a_dead_letter(subscriber="probe_b")
        a_dead_letter(subscriber="probe_b")

    assert lines(admin_client) == [
        "1 open dead letter on default · in groups of one cause",
        "2 open dead letters on drones · in groups of one cause",
    ]
    index = admin_client.get("/admin/").content.decode()
    listed = admin_client.get(unescape(re.search(r'id="attention-dead-letters-drones">\s*<a href="([^"]+)"', index)[1]))
    assert listed.context["cl"].result_count == 2 and "to probe_b" in listed.content.decode()


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_a_database_that_does_not_answer_is_unknown_and_the_others_are_still_counted(admin_client, drones_away):  # noqa: F811
    a_dead_letter(subscriber="probe_a")

    shown = lines(admin_client)

    assert "1 open dead letter on default · in groups of one cause" in shown
    assert "Open dead letters on drones: unknown, that database did not answer" in shown
    assert "Silent relays or workers on drones: unknown, that database did not answer" in shown
