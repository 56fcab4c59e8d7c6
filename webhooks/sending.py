"""Sign one webhook message and POST it, as Standard Webhooks says, to an address the guard allowed.

The URL is checked again at send time and the connection goes to one of the addresses check() returned,
never to a second resolution of the name (DNS rebinding); TLS still verifies the certificate for the
URL's host. Every network failure comes back as an Outcome: retrying is the caller's schedule's job.
"""

from __future__ import annotations

import http.client
import io
import math
import socket
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

from django.conf import settings
from standardwebhooks import Webhook

from .addresses import Address, ForbiddenAddress, check

USER_AGENT = "drone-delivery-webhooks/1"
EXCERPT_BYTES = 4096
ERROR_CHARS = 500
URL_SAFE = "!$%&'()*+,/:;=?@~"  # what the request line keeps as written; the rest is percent-encoded


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str
    duration_ms: int
    response_excerpt: str

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def signature_headers(*, secrets: list[str], webhook_id: str, timestamp: datetime, body: str) -> dict[str, str]:
    """Standard Webhooks' webhook-id, webhook-timestamp (unix seconds) and webhook-signature headers,
    one "v1,<base64>" per secret, space-separated (rotation: the old and the new secret both sign)."""
    if not secrets:
        raise ValueError("a webhook is signed with at least one secret")
    when = timestamp.astimezone(UTC) if timestamp.tzinfo else timestamp.replace(tzinfo=UTC)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(math.floor(when.timestamp())),
        "webhook-signature": " ".join(Webhook(secret).sign(webhook_id, when, body) for secret in secrets),
    }


def send(*, url: str, secrets: list[str], webhook_id: str, timestamp: datetime, body: str) -> Outcome:
    """check(url) again, connect to an address it returned, POST the signed body (TLS verified for the
    URL's host, no redirects), read at most 4 KiB of the answer within the timeout.
    Never raises for a network failure: Outcome(status_code=None, error=...)."""
    started = time.monotonic()
    timeout = float(getattr(settings, "WEBHOOKS_TIMEOUT_SECONDS", 5))
    payload = body.encode()
    headers = {
        **signature_headers(secrets=secrets, webhook_id=webhook_id, timestamp=timestamp, body=body),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Content-Length": str(len(payload)),
    }

    def outcome(status_code: int | None = None, error: str = "", excerpt: bytes = b"") -> Outcome:
        return Outcome(
            status_code=status_code,
            error=error[:ERROR_CHARS],
            duration_ms=round((time.monotonic() - started) * 1000),
            response_excerpt=excerpt[:EXCERPT_BYTES].decode("utf-8", errors="replace"),
        )

    try:
        addresses = check(url)
    except ForbiddenAddress as refused:
        return outcome(error=f"forbidden address: {refused}")
    parts = urlsplit(url.strip())
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    path = quote(parts.path or "/", safe=URL_SAFE) + (f"?{quote(parts.query, safe=URL_SAFE)}" if parts.query else "")
    connection_class = _PinnedHTTPSConnection if parts.scheme.lower() == "https" else _PinnedHTTPConnection
    connection = connection_class(host, port, addresses=addresses, timeout=timeout)
    status_code = None
    try:
        connection.request("POST", path, body=payload, headers={"Host": parts.netloc, **headers})
        connection.deadline = time.monotonic() + timeout
        response = connection.getresponse()
        status_code = response.status
        return outcome(status_code, excerpt=response.read(EXCERPT_BYTES))
    except (OSError, http.client.HTTPException, ValueError) as failure:
        # A failure after the status line keeps the status: the receiver has answered.
        return outcome(status_code, error=_describe(failure, connection, timeout))
    finally:
        connection.close()


def _describe(failure: Exception, connection: _Pinned, timeout: float) -> str:
    """A short "kind: message" for an Attempt's error."""
    where = f"{connection.host}:{connection.port}"
    if isinstance(failure, ssl.SSLCertVerificationError):
        return f"TLS certificate error: {failure.verify_message} (for {connection.host})"
    if isinstance(failure, ssl.SSLError):
        return f"TLS error: {failure.reason or failure}"
    if isinstance(failure, TimeoutError):
        if connection.sock is None:
            return f"timeout: could not connect to {where} within {timeout:g} s"
        return f"timeout: no complete answer from {where} within {timeout:g} s"
    if isinstance(failure, ConnectionRefusedError):
        return f"connection refused by {where}"
    if isinstance(failure, http.client.RemoteDisconnected | ConnectionResetError | BrokenPipeError):
        return f"connection closed by {where} before it answered"
    if isinstance(failure, http.client.HTTPException):
        return f"invalid HTTP answer from {where}: {type(failure).__name__} {failure}"
    if isinstance(failure, OSError):
        return f"network error reaching {where}: {failure.strerror or failure}"
    return f"invalid request: {failure}"


class _Pinned(http.client.HTTPConnection):
    """Connects to the addresses the guard returned; self.host stays the URL's host (Host, SNI)."""

    def __init__(self, host: str, port: int, *, addresses: list[Address], timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self.addresses = addresses
        self.deadline = math.inf
        self.response_class = self._response  # type: ignore[assignment]

    def _open(self) -> socket.socket:
        """A TCP connection to the first address that accepts, each tried for the timeout, all within twice it."""
        assert self.timeout is not None
        give_up = time.monotonic() + 2 * self.timeout
        failure: OSError = OSError(f"no address to connect to for {self.host}")
        for address in self.addresses:
            remaining = give_up - time.monotonic()
            if remaining <= 0:
                break
            try:
                sock = socket.create_connection((str(address), self.port), timeout=min(self.timeout, remaining))
            except OSError as error:
                failure = error
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return sock
        raise failure

    def _response(self, sock: socket.socket, method: str | None = None) -> http.client.HTTPResponse:
        assert self.timeout is not None
        return _DeadlineResponse(sock, method=method, deadline=self.deadline, read_timeout=self.timeout)


class _PinnedHTTPConnection(_Pinned):
    def connect(self) -> None:
        self.sock = self._open()


class _PinnedHTTPSConnection(_Pinned):
    def __init__(self, host: str, port: int, *, addresses: list[Address], timeout: float) -> None:
        super().__init__(host, port, addresses=addresses, timeout=timeout)
        self.tls = ssl.create_default_context()

    def connect(self) -> None:
        sock = self._open()
        try:
            self.sock = self.tls.wrap_socket(sock, server_hostname=self.host)
        except BaseException:
            sock.close()
            raise


class _DeadlineResponse(http.client.HTTPResponse):
    """An HTTP response read under a deadline for the whole answer, not only for each read,
    so a receiver trickling bytes cannot hold the sender longer than the timeout."""

    def __init__(self, sock: socket.socket, *, method: str | None, deadline: float, read_timeout: float) -> None:
        super().__init__(sock, method=method)
        self.fp = io.BufferedReader(_DeadlineReader(sock, self.fp, deadline, read_timeout))


class _DeadlineReader(io.RawIOBase):
    """Reads the socket itself; holds the reader HTTPResponse made, which keeps the socket open until
    the response is closed, as http.client expects (it closes its connection once the headers are read)."""

    def __init__(self, sock: socket.socket, holder: io.BufferedIOBase, deadline: float, read_timeout: float) -> None:
        self.sock = sock
        self.holder = holder
        self.deadline = deadline
        self.read_timeout = read_timeout

    def close(self) -> None:
        self.holder.close()
        super().close()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the answer took longer than the deadline")
        self.sock.settimeout(min(self.read_timeout, remaining))
        return self.sock.recv_into(buffer)
