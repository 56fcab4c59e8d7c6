"""`/metrics` with `drones` on a database of its own: run by tests/test_two_databases.py in a pytest
of its own with CONTEXT_DATABASE_URLS set. A database that does not answer is `outbox_database_up`
0, and the scrape still has the other database's figures."""

import pytest
from django.test import Client
from outbox_tests.letters import a_dead_letter
from prometheus_client.parser import text_string_to_metric_families

from outbox.core.working_database import working_in
from tests.two_databases.dead_letter_groups import drones_away  # noqa: F401 (a fixture)


@pytest.fixture(autouse=True)
def _drones_on_a_database_of_their_own(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."
    settings.METRICS_STATE_CACHE_SECONDS = 0


def scrape() -> dict[tuple, float]:
    response = Client().get("/metrics")
    assert response.status_code == 200, response.content[:300]
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


@pytest.fixture
def letters():
    a_dead_letter(subscriber="probe_a", reason="handler_error")
    with working_in("drones"):
        a_dead_letter(subscriber="probe_b", reason="handler_error")


@pytest.mark.django_db(databases="__all__")
def test_both_databases_count_in_the_totals(letters):
    scraped = scrape()

    assert scraped[("outbox_database_up", (("database", "default"),))] == 1
    assert scraped[("outbox_database_up", (("database", "drones"),))] == 1
    assert scraped[("outbox_dead_letters_open", (("reason", "handler_error"),))] == 2


@pytest.mark.django_db(databases="__all__")
def test_a_database_away_is_up_0_and_the_others_figures_are_still_scraped(letters, request):
    request.getfixturevalue("drones_away")  # once its letter is written

    scraped = scrape()

    assert scraped[("outbox_database_up", (("database", "default"),))] == 1
    assert scraped[("outbox_database_up", (("database", "drones"),))] == 0
    assert scraped[("outbox_dead_letters_open", (("reason", "handler_error"),))] == 1  # default's
    assert ("outbox_backlog_rows", ()) in scraped and ("deliveries_waiting_for_drone", ()) in scraped
