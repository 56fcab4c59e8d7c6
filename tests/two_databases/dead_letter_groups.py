"""`GET /dead-letter-groups`, what a paging script reads, with `drones` on a database of its own:
run by tests/test_two_databases.py in a pytest of its own with CONTEXT_DATABASE_URLS set.

A context on its own database has its own dead letters: the groups of every database are listed,
each saying its database, and a database that does not answer is named, the others still listed."""

import socket

import pytest
from django.db import connections
from django.test import Client
from outbox_tests.letters import a_dead_letter

from outbox.core.working_database import working_in
from outbox.models import DeadLetter


@pytest.fixture(autouse=True)
def _drones_on_a_database_of_their_own(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."


@pytest.fixture
def drones_away(monkeypatch):
    """The drones' database does not answer: its address is a port of this host nobody listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    drones = connections["drones"]
    drones.close()
    monkeypatch.setitem(drones.settings_dict, "HOST", "127.0.0.1")
    monkeypatch.setitem(drones.settings_dict, "PORT", port)
    yield
    drones.close()  # reconnects, once its settings are back, to the database it left


def on_drones(**fields) -> DeadLetter:
    with working_in("drones"):
        return a_dead_letter(**fields)


@pytest.mark.django_db(databases="__all__")
def test_the_groups_of_every_database_are_listed_each_saying_its_database():
    a_dead_letter(subscriber="probe_a")
    on_drones(subscriber="probe_b")
    on_drones(subscriber="probe_b")

    answer = Client().get("/dead-letter-groups")

    assert answer.status_code == 200
    groups = answer.json()["groups"]
    assert [(group["subscriber"], group["letters"]) for group in groups] == [("probe_b", 2), ("probe_a", 1)]
    assert [group["database"] for group in groups] == ["drones", "default"]  # the largest first, wherever it is
    assert answer.json()["unanswered"] == []


@pytest.mark.django_db(databases="__all__", transaction=True)
def test_a_database_that_does_not_answer_is_named_and_the_others_groups_are_still_listed(drones_away):
    a_dead_letter(subscriber="probe_a")

    answer = Client().get("/dead-letter-groups")

    assert answer.status_code == 200
    assert answer.json().get("unanswered") == ["drones"]
    assert [(group["database"], group["subscriber"]) for group in answer.json()["groups"]] == [("default", "probe_a")]
