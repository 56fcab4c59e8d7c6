"""The README's Try it, run as written: a customer's moves on a delivery to pick up later."""

import os
import re
import subprocess
from pathlib import Path
from uuid import UUID

import pytest
from django.conf import settings

from deliveries.models import Delivery
from drones.models import Assignment
from drones.services import seed_fleet
from tests.factories import Customer
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
README = Path(settings.BASE_DIR) / "README.md"


def the_customers_moves() -> str:
    """The README's block that starts with AUTH=…, the moves besides requesting a delivery."""
    blocks = re.findall(r"^```\n(.*?)^```", README.read_text(), flags=re.DOTALL | re.MULTILINE)
    return next(block for block in blocks if block.startswith('AUTH="Authorization: Bearer $TOKEN"'))


def test_try_its_notify_me_reschedule_and_cancel_answer_as_the_readme_says(live_server, system, db):
    seed_fleet(count=20, latitude=47.6205, longitude=-122.3493)  # `seed_fleet 20`: idle drones near the pickup
    token = Customer("alice").token
    script = the_customers_moves().replace("http://127.0.0.1:8000", live_server.url)

    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"{script}\necho; echo LATER=$LATER"],
        cwd=settings.BASE_DIR,
        env={**os.environ, "TOKEN": token},
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert run.returncode == 0, run.stderr
    statuses = re.findall(r"HTTP/1\.1 (\d{3}) ", run.stdout)  # a body ends without a newline
    assert statuses == ["201", "202", "202"], run.stdout  # notify-me, reschedule, cancel
    later = UUID(re.search(r"^LATER=(\S+)$", run.stdout, flags=re.MULTILINE).group(1))
    wait_until(
        lambda: Assignment.objects.filter(delivery_id=later, status=Assignment.Status.RELEASED).exists(),
        what="the drones context to release what it planned for the cancelled delivery",
    )
    assert Delivery.objects.get(pk=later).status == Delivery.Status.CANCELLED
