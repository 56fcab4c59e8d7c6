"""The Procfile names the three kinds of process, each a command this project has."""

from pathlib import Path

from django.conf import settings
from django.core.management import get_commands

PROCFILE = Path(settings.BASE_DIR) / "Procfile"


def test_the_procfile_runs_web_relay_and_workers_with_commands_that_exist():
    processes = dict(line.split(": ", 1) for line in PROCFILE.read_text().splitlines() if line.strip())

    assert set(processes) == {"web", "relay", "worker"}
    # The admin's static files are collected (compressed, hashed) before the server starts.
    assert processes["web"].startswith("python manage.py collectstatic --noinput --verbosity 0 && exec gunicorn ")
    assert "gunicorn delivery_project.wsgi " in processes["web"]
    for name in ("relay", "worker"):
        program, manage, command = processes[name].split()[:3]
        assert (program, manage) == ("python", "manage.py") and command in get_commands(), processes[name]
