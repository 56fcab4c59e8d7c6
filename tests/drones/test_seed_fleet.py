"""seed_fleet: a bound, a thousand drones to a statement, all or nothing, progress shown."""

from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from drones import services
from drones.models import Drone

pytestmark = pytest.mark.django_db


def test_a_large_fleet_is_placed_in_a_few_statements_with_its_progress_in_a_pipe():
    out = StringIO()  # not a terminal: a line a tenth of the way
    with CaptureQueriesContext(connection) as queries:
        call_command("seed_fleet", "2500", stdout=out)

    # A statement or so per thousand on PostgreSQL (SQLite's bound on parameters splits an insert in 14):
    # it was a transaction of several statements per drone.
    assert Drone.objects.count() == 2500 and len(queries) < 2500 / 20, len(queries)
    lines = out.getvalue().splitlines()
    assert lines == [
        "placing drones: 1,000 of 2,500",
        "placing drones: 2,000 of 2,500",
        "placing drones: 2,500 of 2,500",
        "fleet: 2500 drones added, 0 already there",
    ]
    call_command("seed_fleet", "2600", stdout=out)  # again, larger: only the new ones
    assert (
        Drone.objects.count() == 2600
        and out.getvalue().splitlines()[-1] == "fleet: 100 drones added, 2500 already there"
    )


def test_a_fleet_that_fails_midway_leaves_no_drone(monkeypatch):
    placed = services._placed

    def fails_at_the_1500th(i, **kwargs):
        if i == 1499:
            raise KeyboardInterrupt  # the operator's Ctrl-C, midway
        return placed(i, **kwargs)

    monkeypatch.setattr(services, "_placed", fails_at_the_1500th)
    with pytest.raises(KeyboardInterrupt):
        call_command("seed_fleet", "2500", stdout=StringIO())

    assert Drone.objects.count() == 0  # stopped after 30 s, it used to leave thousands in the fleet
