"""The system as separate processes: the manage.py command line, the test database's URL, free ports, HTTP calls."""

import json
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import connection

from tests.factories import delivery_request

MANAGE = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]


def test_database_url() -> str:
    """The URL of pytest-django's throwaway database, for the subprocesses."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


test_database_url.__test__ = False


def a_free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def answers(url: str, token: str | None = None) -> int | None:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
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
