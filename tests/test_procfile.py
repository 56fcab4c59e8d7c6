"""The Procfile names the three kinds of process, each a command this project has."""

import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import get_commands

from tests.processes import a_free_port, web_server_up
from tests.waiting import wait_until

PROCFILE = Path(settings.BASE_DIR) / "Procfile"


def test_the_procfile_runs_web_relay_and_workers_with_commands_that_exist():
    processes = dict(line.split(": ", 1) for line in PROCFILE.read_text().splitlines() if line.strip())

    assert set(processes) == {"web", "relay", "worker"}
    # The admin's static files are collected (compressed, hashed) before the server starts.
    assert processes["web"].startswith("python manage.py collectstatic --noinput --verbosity 0 && exec gunicorn ")
    assert "gunicorn delivery_project.wsgi " in processes["web"]
    for name in ("relay", "worker"):
        # exec: the process manager's stop reaches the command itself, not a shell that dies of it
        run, program, manage, command = processes[name].split()[:4]
        assert (run, program, manage) == ("exec", "python", "manage.py") and command in get_commands(), processes[name]


def test_local_http_serves_the_loopback_only_and_refuses_an_address_others_reach():
    """Under honcho the Procfile bound 0.0.0.0, which with DJANGO_LOCAL_HTTP=1 is a plain-HTTP
    admin on every interface. gunicorn now refuses it, saying what to set."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "delivery_project.settings",
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": "k" * 60,
        "DJANGO_LOCAL_HTTP": "1",
    }
    gunicorn = [sys.executable, "-m", "gunicorn", "delivery_project.wsgi", "--bind"]
    exposed = subprocess.run(
        [*gunicorn, f"0.0.0.0:{a_free_port()}"],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert exposed.returncode != 0
    assert "DJANGO_LOCAL_HTTP=1 serves plain HTTP for this machine only, not on 0.0.0.0:" in exposed.stderr
    assert "WEB_BIND=127.0.0.1" in exposed.stderr

    port = a_free_port()
    local = subprocess.Popen([*gunicorn, f"127.0.0.1:{port}"], env=env, cwd=settings.BASE_DIR)
    try:
        wait_until(
            lambda: web_server_up(f"http://127.0.0.1:{port}/healthz"), timeout=60, what="gunicorn on the loopback"
        )
    finally:
        local.terminate()
        local.wait(30)
