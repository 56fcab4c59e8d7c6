"""`manage.py dead_letters` with `drones` on a database of its own, and no --database given: list
shows every database's letters under its name, replay and discard act where their letters are, or
ask which database when letters match on several. Run by tests/test_two_databases.py."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from outbox_tests.letters import a_dead_letter, envelope

from outbox.core.working_database import working_in
from outbox.models import DeadLetter

pytestmark = pytest.mark.django_db(databases="__all__")


def on_drones(**fields) -> DeadLetter:
    with working_in("drones"):
        return a_dead_letter(**fields)


def said(*arguments: str) -> str:
    out = StringIO()
    call_command("dead_letters", *arguments, stdout=out)
    return out.getvalue()


def test_list_shows_each_databases_letters_under_its_name(settings):
    assert settings.OUTBOX_CONTEXT_DATABASES.get("drones") == "drones", "run with CONTEXT_DATABASE_URLS=drones=..."
    here, there = a_dead_letter(subscriber="probe_a"), on_drones(subscriber="drones")

    listed = said("list")

    default_part, drones_part = listed.split("database drones:")
    assert default_part.startswith("database default:") and " probe_a " in default_part
    assert " drones " in drones_part and " probe_a " not in drones_part
    assert f"{there.pk:>6}  open" in drones_part and f"{here.pk:>6}  open" in default_part


def test_a_subscribers_letters_are_found_on_its_contexts_database():
    on_drones(subscriber="drones", error="gateway down")

    assert "gateway down" in said("list", "--subscriber", "drones")
    assert "gateway down" in said("list", "--groups", "--subscriber", "drones")


def test_a_replay_acts_on_the_one_database_whose_letters_match():
    body = envelope(type="delivery.completed", payload={"delivery_id": "d-1"})
    letter = on_drones(subscriber="drones", type=body["type"], message_id=body["message_id"], envelope=body)

    assert "replayed 1 dead letter(s)" in said("replay", "--subscriber", "drones")
    assert DeadLetter.objects.using("drones").get(pk=letter.pk).status == "replayed"


def test_letters_matching_on_two_databases_are_not_acted_on_until_one_is_named():
    a_dead_letter(subscriber="probe_a")
    on_drones(subscriber="drones")

    with pytest.raises(CommandError, match="open dead letters match on default, drones: say which with --database"):
        said("discard", "--reason", "handler_error", "--note", "moot")
    assert "discarded 1 dead letter(s)" in said(
        "discard", "--reason", "handler_error", "--note", "moot", "--database", "drones"
    )
    assert DeadLetter.objects.using("default").get().status == "open"
