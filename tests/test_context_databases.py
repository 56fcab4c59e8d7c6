"""A context on a database of its own (outbox.placement.databases): what the settings must say,
and the checks that say it when they do not. The system with drones on a second server is
tests/e2e/test_context_database.py's; the chaos rig's across two, tests/harness/test_chaos.py's."""

import pytest

from outbox.core.contracts import Event
from outbox.core.subscriptions import Subscription
from outbox.core.working_database import kernel_databases
from outbox.placement import databases, rows


def ids(found) -> list[str]:
    return sorted(f.id for f in found)


def test_nothing_to_say_when_every_context_is_on_default(settings):
    settings.OUTBOX_CONTEXT_DATABASES = {}
    assert databases.context_databases_are_routed() == []
    assert kernel_databases() == ["default"]
    assert databases.database_of("drones") == "default"


# The checks read DATABASES' names only: no connection is made to the alias added for the test.
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_a_context_moved_needs_the_router_an_app_and_an_alias_and_is_alone_there(settings):
    settings.DATABASES = {**settings.DATABASES, "fleet": {**settings.DATABASES["default"]}}
    settings.DATABASE_ROUTERS = []
    settings.OUTBOX_CONTEXT_DATABASES = {"drones": "fleet", "packages": "fleet", "no_such_app": "nowhere"}
    found = databases.context_databases_are_routed()
    assert ids(found) == ["outbox.E010", "outbox.E011", "outbox.E012", "outbox.W010"]
    assert any("drones, packages" in f.msg for f in found)
    assert kernel_databases() == ["default", "fleet", "nowhere"]

    settings.DATABASE_ROUTERS = ["outbox.placement.databases.ContextDatabases"]
    settings.OUTBOX_CONTEXT_DATABASES = {"drones": "fleet"}
    assert databases.context_databases_are_routed() == []
    assert databases.database_of("drones") == "fleet" and databases.database_of("packages") == "default"


def test_an_event_a_context_declares_outside_its_events_module_is_said_at_start(settings):
    settings.OUTBOX_CONTEXTS = ["drones"]
    assert rows.each_context_publishes_under_its_own_name() == []

    class Misplaced(Event):  # as if declared in drones/events/v2.py: its source() reads "events"
        type = "drone.misplaced_for_the_check"
        version = 1

    Misplaced.__module__ = "drones.events.v2"
    try:
        found = rows.each_context_publishes_under_its_own_name()
        assert ids(found) == ["outbox.E013"] and "'events'" in found[0].msg and "'drones'" in found[0].msg
    finally:
        from outbox.core.contracts import _contracts

        _contracts.pop(("drone.misplaced_for_the_check", 1), None)


def test_a_nested_or_relabelled_handler_has_its_inbox_on_its_apps_database(settings):
    """A subscriber's inbox, cursors and letters go to its context's database, and its handler's
    writes to its app's (the router, by app label): two names for one context would put the inbox
    on one database and the state on another, no longer one transaction."""
    settings.OUTBOX_CONTEXT_DATABASES = {"drones": "fleet", "probe": "fleet"}

    def handler(received):
        pass

    for module, context in [
        ("drones.handling.scheduling", "drones"),  # read as "handling" from its module path alone
        ("outbox_tests.probe.nested.handlers", "probe"),  # the app's label, not its package's name
        ("drones.handlers", "drones"),
        ("a_script_outside_every_app", "a_script_outside_every_app"),
    ]:
        handler.__module__ = module
        subscription = Subscription("nested", "drone.nested", handler, None, frozenset({1}))
        assert subscription.context == context, module
        assert databases.database_of(subscription.context) == ("fleet" if context in ("drones", "probe") else "default")
