"""`manage.py simulate`: a burst of several times the fleet, through the API, relay and worker, all served."""

import re
from io import StringIO

import pytest
from django.core.management import call_command

from deliveries.models import Delivery
from drones.models import Assignment
from drones.services import seed_fleet
from tests.factories import BASE

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_burst_of_six_times_the_fleet_is_served_and_the_run_is_summed_up_and_plotted(
    broker, transactional_db, tmp_path, monkeypatch
):
    from harness.management.commands import simulate

    monkeypatch.setattr(simulate, "PIPED_PROGRESS_SECONDS", 0.0)  # a progress line at every update, here
    seed_fleet(count=4, latitude=BASE[0], longitude=BASE[1])
    out, png = StringIO(), tmp_path / "run.png"

    call_command("simulate", deliveries=24, timeout=120, plot=str(png), stdout=out, verbosity=1)

    report = out.getvalue()
    reasons = set(Delivery.objects.filter(status="failed").values_list("status_reason", flat=True))
    assert reasons <= {"too_heavy"}, reasons  # only what can never fly fails
    delivered = Delivery.objects.filter(status="delivered").count()
    assert delivered + Delivery.objects.filter(status="failed").count() == 24 and delivered >= 16
    assert re.search(rf"^delivered\s+{delivered}$", report, re.MULTILINE), report
    waited = Delivery.objects.exclude(waiting_since=None).count()
    assert waited >= 12 and f"waited in line for a drone: {waited}" in report
    assert "request -> drone reserved (wait for a drone): p50" in report and "request -> delivered: p50" in report
    assert not Assignment.objects.filter(status="waiting").exists()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot written to {png}" in report
    # Into a pipe (not a terminal) no bars, nothing redrawn with \r: a plain line every so often, and at the end.
    assert "\r" not in report and "24/24" not in report
    assert re.search(r"^submitted: 24 of 24 after \d+ s$", report, re.MULTILINE), report
    assert re.search(r"^terminal: 24 of 24 after \d+ s$", report, re.MULTILINE), report
    if "too_heavy" in reasons:
        assert "failed because too_heavy: " in report and "(on purpose" in report


def test_the_summary_table_keeps_its_count_column_in_line_on_every_row():
    """awaiting_confirmation is longer than the column was wide: its count stood out of line."""
    from harness.simulation import STATUSES, summary

    rows = summary(
        [
            {
                "status": status,
                "statusReason": "",
                "createdAt": "2026-12-06T00:00:00Z",
                "updatedAt": "2026-12-06T00:00:01Z",
                "droneScheduledAt": None,
                "waitingSince": None,
            }
            for status in STATUSES
        ]
    )
    table = rows[: rows.index("")]
    assert len({len(row) for row in table}) == 1, "\n".join(table)
