"""The documented commands, as separate processes: workers, relay --once, relay stopped by SIGTERM."""

import os
import signal
import subprocess

import pytest
from outbox_tests.probe.models import Effect
from outbox_tests.probe.services import ping

from outbox.models import Heartbeat, OutboxMessage
from tests.processes import MANAGE
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def workers(env, tmp_path):
    with (tmp_path / "workers.log").open("w") as log:  # a file: a pipe nobody reads fills up and blocks them
        process = subprocess.Popen(
            [*MANAGE, "rundramatiq", "--processes", "1", "--threads", "2"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    yield process
    process.send_signal(signal.SIGTERM)
    process.wait(30)


def test_relay_once_and_worker_processes_deliver_every_event(env, workers):
    for n in range(5):
        ping(n=n)

    relay = subprocess.run([*MANAGE, "relay_outbox", "--once"], env=env, capture_output=True, text=True, timeout=60)

    assert relay.returncode == 0, relay.stderr
    assert "relayed 5 events" in relay.stderr  # the relay reports through logging, like every process
    wait_until(lambda: Effect.objects.count() == 10, timeout=60, what="the worker processes to handle 5 x 2")


def test_sigterm_lets_the_relay_finish_and_exit_cleanly(env):
    relay = subprocess.Popen(
        [*MANAGE, "relay_outbox"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        ping(n=1)
        wait_until(
            lambda: OutboxMessage.objects.filter(published_at__isnull=False).exists(),
            what="the running relay to publish",
        )
        relay.send_signal(signal.SIGTERM)
        output, _ = relay.communicate(timeout=30)
    finally:
        relay.kill()
    assert relay.returncode == 0, output
    assert "relay stopped" in output


def test_a_stop_to_the_process_group_stops_workers_and_takes_their_heartbeats(env, tmp_path):
    """Ctrl-C under honcho, `kill %1` or systemd's default kill mode signal the whole group,
    so each Dramatiq worker process got SIGTERM twice (from the group, then forwarded by Dramatiq's
    main process), read the second as 'kill now' and left its heartbeat row to read 'silent'."""
    log_path = tmp_path / "workers.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [*MANAGE, "rundramatiq", "--processes", "2", "--threads", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a group of its own, as a terminal or a service manager gives it
        )
    try:
        wait_until(lambda: Heartbeat.objects.filter(kind="worker").count() == 2, timeout=60, what="2 workers' beats")
        os.killpg(process.pid, signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    output = log_path.read_text()
    assert "Killing worker process" not in output, output
    assert list(Heartbeat.objects.filter(kind="worker").values_list("process", flat=True)) == []
