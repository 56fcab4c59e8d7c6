"""Where the kernel's rows go and which role runs on `default`, with `drones` on a database of its
own: run by tests/test_two_databases.py in a pytest of its own with CONTEXT_DATABASE_URLS set."""

import pytest
from django.db import connection, connections
from outbox_tests.letters import a_dead_letter

from outbox.core.working_database import working_in
from outbox.models import DeadLetter
from outbox.placement import roles

pytestmark = pytest.mark.django_db(databases="__all__", transaction=True)


@pytest.fixture(autouse=True)
def _drones_on_a_database_of_their_own(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."


def current_user(alias: str) -> str:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT current_user")
        return cursor.fetchone()[0]


def test_a_kernel_row_read_from_a_database_is_saved_back_to_it_wherever_the_code_works_now():
    """A drones' letter, read there and saved by code working in `default` (the admin, a console
    command): the router sends it back where it came from, never to another database's letter of
    the same number, nor as a new row there."""
    with working_in("drones"):
        letter = a_dead_letter(subscriber="drones")
    read = DeadLetter.objects.using("drones").get(pk=letter.pk)

    read.note = "looked at"
    read.save()

    assert DeadLetter.objects.using("drones").get(pk=letter.pk).note == "looked at"
    assert not DeadLetter.objects.using("default").exists()


def test_a_context_on_a_database_of_its_own_sets_no_role_on_defaults_connection():
    """It is alone on its database and touches nothing of `default`'s: its code runs there as the
    project's role (on `default` its role would be refused its own tables, which are not there)."""
    operator = current_user("default")
    before = roles.enter("drones")
    try:
        assert current_user("default") == operator
        with roles.acting_as("drones"):
            assert current_user("default") == operator
        before_deliveries = roles.enter("deliveries")  # a context on default: its role, as ever
        assert current_user("default") == roles.role_of("deliveries")
        roles.leave(before_deliveries)
    finally:
        roles.leave(before)
    assert current_user("default") == operator
    assert connection.vendor == "postgresql"
