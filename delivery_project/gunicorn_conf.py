"""gunicorn's settings: `gunicorn.conf.py` in a checkout, `-c python:delivery_project.gunicorn_conf` from the wheel.

Its own lines (booting, workers started, a worker timed out) in the deployable's format, JSON
under LOG_FORMAT=json like every other line of the web process. The access log is off, as it is in
gunicorn by default; WEB_ACCESS_LOG=1 writes one line per request in the same format.
"""

import json
import os

from gunicorn import util

from delivery_project import log_format

_access = "INFO" if os.environ.get("WEB_ACCESS_LOG") == "1" else "WARNING"
logconfig_dict = log_format.logging_config(
    loggers={
        "gunicorn.error": {"level": os.environ.get("LOG_LEVEL", "INFO"), "propagate": True},
        "gunicorn.access": {"level": _access, "propagate": True},
    }
)


# What gunicorn refuses before Django sees the request (a header over 8 KB: 431; a request line or
# header it cannot parse: 400) it answers with an HTML page of its own; the API's clients get the
# JSON error every other answer has, naming what was wrong. gunicorn has no setting for it: its
# one writer of those pages, gunicorn.util.write_error, is replaced for every worker.
_FIELDS = {431: "headers", 400: "request", 501: "Transfer-Encoding", 403: "request"}


def _json_error(sock, status_int: int, reason: str, mesg: str) -> None:
    field = _FIELDS.get(status_int, "request")
    body = json.dumps({"detail": f"{reason}: {mesg}", "errors": [{"field": field, "message": mesg or reason}]})
    head = (
        f"HTTP/1.1 {status_int} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body.encode())}\r\n\r\n"
    )
    util.write_nonblock(sock, (head + body).encode("latin1", "replace"))


util.write_error = _json_error


def on_starting(server) -> None:
    """DJANGO_LOCAL_HTTP=1 serves the admin over plain HTTP: for this machine only, so refuse an
    address other machines reach (a Procfile runner's 0.0.0.0, say), in one line that says what to set."""
    if os.environ.get("DJANGO_LOCAL_HTTP") != "1":
        return
    exposed = [address for address in server.cfg.bind if not _loopback(address)]
    if exposed:
        raise SystemExit(
            f"DJANGO_LOCAL_HTTP=1 serves plain HTTP for this machine only, not on {', '.join(exposed)}: "
            "bind 127.0.0.1 (WEB_BIND=127.0.0.1 with the Procfile)"
        )


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if not address.startswith("unix:") else "unix"
    return host in ("127.0.0.1", "localhost", "::1", "unix") or host.startswith("127.")
