"""The README's Try it, run as written: a customer's moves on a delivery to pick up later."""

import contextlib
import os
import re
import signal
import subprocess
from pathlib import Path
from uuid import UUID

import pytest
from django.conf import settings

from deliveries.models import Delivery
from drones.models import Assignment
from drones.services import seed_fleet
from tests.factories import Customer
from tests.processes import a_free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.integration
README = Path(settings.BASE_DIR) / "README.md"


def the_block(starting_with: str) -> str:
    """The README's code block that starts with `starting_with`."""
    blocks = re.findall(r"^```\n(.*?)^```", README.read_text(), flags=re.DOTALL | re.MULTILINE)
    return next(block for block in blocks if block.startswith(starting_with))


def the_customers_moves() -> str:
    """The block that starts with AUTH=…, the moves besides requesting a delivery."""
    return the_block('AUTH="Authorization: Bearer $TOKEN"')


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


def test_try_its_webhook_endpoint_receives_a_signed_ping_as_the_readme_says(
    live_server, system, db, settings, tmp_path
):
    """The receiver, the registration and the ping of the README, run as written (its port a free one)."""
    settings.WEBHOOKS_ALLOW_HTTP, settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = (
        True,
        ["127.0.0.0/8"],
    )  # as ./dev up with the README's variable
    token, port = Customer("alice").token, a_free_port()
    moves = the_customers_moves().splitlines()[0]  # AUTH=… API=…, set by the block before
    script = f"{moves}\n{the_block('.venv/bin/python -c')}".replace("http://127.0.0.1:8000", live_server.url)
    script = script.replace('127.0.0.1", 9000', f'127.0.0.1", {port}').replace("127.0.0.1:9000", f"127.0.0.1:{port}")
    output = tmp_path / "output"
    with output.open("w") as out:
        # Its own session: the receiver the block starts in the background is stopped with it.
        run = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=settings.BASE_DIR,
            env={**os.environ, "TOKEN": token},
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            assert run.wait(60) == 0, output.read_text()
            said = wait_until(lambda: _pinged(output.read_text()), what="the receiver to print the signed ping")
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.pid, signal.SIGTERM)

    assert re.findall(r"HTTP/1\.1 (\d{3}) ", said) == ["202", "200"], said  # the ping queued, the attempts listed
    assert '"secret": "whsec_' in said  # the registration's answer, printed: its secret is shown only then
    assert "webhook-signature: v1," in said.lower() and '"type":"webhook.ping"' in said.replace(" ", "")


def _pinged(output: str) -> str | None:
    """The output once the receiver has printed the ping (after the ping's 202)."""
    return output if "webhook.ping" in output.split("HTTP/1.1 202")[-1] else None
