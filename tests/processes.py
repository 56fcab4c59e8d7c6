"""The system as separate processes: the manage.py command line, the test database's URL, free ports, HTTP calls."""

import json
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

from django.conf import settings
from django.db import connection

from delivery_project import database_url
from tests.factories import delivery_request

MANAGE = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]


def test_database_url() -> str:
    """The URL of pytest-django's throwaway database, for the subprocesses."""
    return database_url.url_of(connection.settings_dict)  # its hosts and every option kept


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
