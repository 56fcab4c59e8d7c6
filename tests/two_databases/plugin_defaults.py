"""The kernel's pytest plugin with `drones` on a database of its own: a test that uses the database
needs no `databases=` of its own to write where a context lives. Run by tests/test_two_databases.py."""

import pytest

from drones.models import Drone
from drones.services import seed_fleet


def test_a_test_with_the_db_fixture_alone_may_write_to_a_contexts_own_database(db, settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."
    seed_fleet(count=1, latitude=47.6, longitude=-122.3)  # written where the drones live

    assert Drone.objects.using("drones").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_mark_without_databases_is_given_every_one_and_keeps_its_options(request):
    marked = request.node.get_closest_marker("django_db")
    assert (marked.kwargs.get("databases"), marked.kwargs.get("transaction")) == ("__all__", True)
    seed_fleet(count=2, latitude=47.6, longitude=-122.3)

    assert Drone.objects.using("drones").count() == 2


@pytest.mark.django_db(databases=["default"])
def test_a_mark_that_names_its_databases_keeps_them(request):
    assert request.node.get_closest_marker("django_db").kwargs["databases"] == ["default"]
