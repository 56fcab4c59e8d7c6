"""The short chaos run: `manage.py chaos` as a user runs it, on PostgreSQL and RabbitMQ."""

import os
import re
import signal
import subprocess

import pytest

from harness.chaos import KINDS
from harness.postgres_servers import PostgresServer
from tests.processes import MANAGE, a_free_port
from tests.servers import POSTGRES_RIG

pytestmark = [pytest.mark.integration, pytest.mark.slow, *POSTGRES_RIG]  # the second test starts a server

SEED = 2026


def chaos(env: dict, deliveries: int, duration: int) -> str:
    """`manage.py chaos` to its end, with faults of every kind twice; its output."""
    command = [*MANAGE, "chaos", "--deliveries", str(deliveries), "--seed", str(SEED), "--port", str(a_free_port())]
    # Pauses past two AMQP heartbeats (5 s each), so RabbitMQ gives up on the paused process; the
    # injector runs its faults one after another, and four pauses of 15 s would take a minute alone.
    command += ["--pause-seconds", "12", "--duration", str(duration)]
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.send_signal(signal.SIGINT)  # the rig stops its processes and drops its database
            run.communicate(timeout=60)
    assert run.returncode == 0, output
    assert f"verdict: violations: 0 (seed {SEED})" in output
    injected = output.split("faults injected")[1].split("quiet after")[0]
    for kind in KINDS:
        assert len(re.findall(rf"\b{kind}\b", injected)) == 2, f"{kind} was not injected twice:\n{output}"
    # The webhooks' ledger ran: every message arrived, some after the receiver's outage, none to the
    # disabled endpoint, which was owed some (held).
    webhooks = {name: int(n) for name, n in re.findall(r"^  (webhook\w*): (\d+)$", output, re.MULTILINE)}
    assert webhooks["webhook_messages"] > 0 and webhooks["webhooks_received"] == webhooks["webhook_messages"], output
    assert webhooks["webhook_posts_refused_while_down"] > 0 and webhooks["webhook_connections_cut_while_down"] > 0
    assert webhooks["webhooks_retried"] > 0 and webhooks["webhooks_held_for_the_disabled_endpoint"] > 0, output
    assert "webhook_duplicates_dropped_by_receiver" in webhooks, output
    return output


def test_200_deliveries_under_kills_pauses_and_broker_disconnections_keep_the_ledger():
    output = chaos({**os.environ, "DJANGO_SETTINGS_MODULE": "delivery_project.settings"}, 200, 45)
    assert "deliveries: {" in output and "200 accepted (202)" in output
    # Proof of delivery under the same faults: some confirmed with their token, some left to time out.
    confirmed = int(re.search(r"confirmed: (\d+)", output).group(1))
    left = int(re.search(r"left_to_time_out: (\d+)", output).group(1))
    assert confirmed > 0 and left > 0, output
    assert "'confirmation_timeout': " in output


def test_with_the_drones_on_a_database_of_their_own_the_ledger_holds_across_both():
    """The same faults with `drones` on a second PostgreSQL server (the rig's own), by settings alone:
    nothing lost or doubled across two outboxes, each served by two relays, one of which the faults hit."""
    with PostgresServer() as server:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "delivery_project.settings",
            "CONTEXT_DATABASE_URLS": f"drones={server.url('postgres')}",
        }
        output = chaos(env, 100, 30)
    assert "databases: ['default', 'drones']" in output, output
    assert "relay-2" in output.split("faults injected")[1], f"the drones' relay was never hit:\n{output}"
