"""Sending one webhook (webhooks/sending.py) to real receivers this test starts on 127.0.0.1: what they
get, what comes back, and the failures that come back as an Outcome instead of an exception."""

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from webhooks.sending import Outcome, send, signature_headers

pytestmark = pytest.mark.servers_unused  # its receivers are its own, on 127.0.0.1

CURRENT = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PREVIOUS = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
BODY = json.dumps({"type": "delivery.delivered", "timestamp": "2026-05-01T12:00:00Z", "data": {"deliveryId": "d-1"}})


class Receiver:
    """An HTTP server in a thread whose handler does what the test says; it records every request."""

    def __init__(self, answer, tls=None):
        self.answer = answer
        self.requests = []
        self.sni = []
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                receiver.requests.append(
                    {"path": self.path, "headers": dict(self.headers.items()), "body": self.rfile.read(length)}
                )
                receiver.answer(self)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls:
            tls.sni_callback = lambda _sock, name, _context: self.sni.append(name)
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}/hooks/drones?customer=42"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def respond(status, body=b"", headers=()):
    def answer(handler):
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return answer


@pytest.fixture
def receivers():
    started = []

    def start(answer, tls=None):
        started.append(Receiver(answer, tls))
        return started[-1]

    yield start
    for receiver in started:
        receiver.stop()


@pytest.fixture(autouse=True)
def local_receivers_allowed(settings):
    settings.DEBUG = False
    settings.WEBHOOKS_ALLOW_HTTP = True
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = ["127.0.0.0/8"]
    settings.WEBHOOKS_TIMEOUT_SECONDS = 5
    return settings


def post(url, secrets=(CURRENT,), webhook_id="msg_2x7HqN8WcYb4J0k1", body=BODY):
    outcome = send(url=url, secrets=list(secrets), webhook_id=webhook_id, timestamp=datetime.now(UTC), body=body)
    assert isinstance(outcome, Outcome)
    assert outcome.duration_ms >= 0
    return outcome


def test_a_receiver_gets_the_body_and_headers_signed_by_every_secret(receivers):
    receiver = receivers(respond(200, b'{"received": true}'))
    outcome = post(receiver.url, secrets=[CURRENT, PREVIOUS])

    assert outcome == Outcome(200, "", outcome.duration_ms, '{"received": true}')
    assert outcome.ok
    [request] = receiver.requests
    assert request["path"] == "/hooks/drones?customer=42"
    assert request["body"] == BODY.encode()
    headers = request["headers"]
    assert headers["Host"] == f"127.0.0.1:{receiver.port}"
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == "drone-delivery-webhooks/1"
    assert headers["Content-Length"] == str(len(BODY.encode()))
    assert headers["webhook-id"] == "msg_2x7HqN8WcYb4J0k1"
    assert abs(int(headers["webhook-timestamp"]) - time.time()) < 60
    assert len(headers["webhook-signature"].split(" ")) == 2
    assert Webhook(CURRENT).verify(request["body"], headers) == json.loads(BODY)
    assert Webhook(PREVIOUS).verify(request["body"], headers) == json.loads(BODY)
    with pytest.raises(WebhookVerificationError):
        Webhook("whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFB").verify(request["body"], headers)


def test_the_signature_covers_id_timestamp_and_body():
    when = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    headers = signature_headers(secrets=[CURRENT], webhook_id="msg_1", timestamp=when, body=BODY)
    assert headers["webhook-timestamp"] == "1777636800"
    signed = Webhook(CURRENT).sign("msg_1", when, BODY)
    assert headers["webhook-signature"] == signed
    assert (
        signature_headers(secrets=[CURRENT], webhook_id="msg_2", timestamp=when, body=BODY)["webhook-signature"]
        != signed
    )
    assert signature_headers(secrets=[CURRENT], webhook_id="msg_1", timestamp=when, body=BODY + " ") != headers


def test_a_server_error_is_not_ok_and_keeps_its_status_and_answer(receivers):
    receiver = receivers(respond(500, b"database down"))
    outcome = post(receiver.url)
    assert (outcome.status_code, outcome.ok, outcome.error, outcome.response_excerpt) == (
        500,
        False,
        "",
        "database down",
    )


def test_a_redirect_is_not_followed(receivers):
    target = receivers(respond(200))
    redirector = receivers(respond(302, headers=[("Location", target.url)]))
    outcome = post(redirector.url)
    assert outcome.status_code == 302
    assert not outcome.ok
    assert len(redirector.requests) == 1
    assert target.requests == []


def test_a_receiver_slower_than_the_timeout_gives_a_timeout(receivers, settings):
    settings.WEBHOOKS_TIMEOUT_SECONDS = 1
    receiver = receivers(lambda handler: receiver.release.wait(30))
    outcome = post(receiver.url)
    assert outcome.status_code is None
    assert "timeout" in outcome.error
    assert len(receiver.requests) == 1


def test_a_receiver_trickling_its_answer_is_cut_off_at_the_deadline(receivers, settings):
    """Each byte comes within the read timeout, the whole answer not within the deadline."""
    settings.WEBHOOKS_TIMEOUT_SECONDS = 1

    def trickle(handler):
        for byte in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"x" * 200:
            if receiver.release.wait(0.25):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    receiver = receivers(trickle)
    outcome = post(receiver.url)
    assert outcome.status_code is None
    assert "timeout" in outcome.error


def test_at_most_4_kib_of_the_answer_is_read(receivers):
    receiver = receivers(respond(200, b"x" * (1024 * 1024)))
    outcome = post(receiver.url)
    assert outcome.ok
    assert outcome.response_excerpt == "x" * 4096


def test_a_closed_port_gives_refused():
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    outcome = post(f"http://127.0.0.1:{port}/hooks")
    assert outcome.status_code is None
    assert "refused" in outcome.error
    assert not outcome.ok


def test_a_forbidden_address_is_never_connected_to(receivers, settings):
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = []
    receiver = receivers(respond(200))
    outcome = post(receiver.url)
    assert outcome.status_code is None
    assert outcome.error.startswith("forbidden address: the URL's host 127.0.0.1 is a loopback address")
    # send() returns only after an answer, which the receiver gives after recording the request: none came.
    assert receiver.requests == []


def test_http_is_refused_at_send_time_where_it_is_not_allowed(receivers, settings):
    settings.WEBHOOKS_ALLOW_HTTP = False
    receiver = receivers(respond(200))
    outcome = post(receiver.url)
    assert outcome.error.startswith("forbidden address: the URL's scheme is 'http'")
    assert receiver.requests == []


def test_the_name_is_resolved_once_and_the_checked_address_connected_to(receivers, monkeypatch):
    """DNS rebinding: a name that answers a public or allowed address to the check and another one
    afterwards gets the request at the address that was checked."""
    receiver = receivers(respond(204))
    real = socket.getaddrinfo
    lookups = []

    def resolve(host, *args, **kwargs):
        if host == "rebind.example":  # a made-up name: 127.0.0.1 first, the metadata address after
            lookups.append(host)
            return real("127.0.0.1" if len(lookups) == 1 else "169.254.169.254", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    outcome = post(f"http://rebind.example:{receiver.port}/hooks")
    assert outcome.status_code == 204, outcome.error
    assert lookups == ["rebind.example"]
    [request] = receiver.requests
    assert request["headers"]["Host"] == f"rebind.example:{receiver.port}"


def test_the_next_address_is_tried_when_one_refuses(receivers, monkeypatch):
    receiver = receivers(respond(200))  # on 127.0.0.1 only: 127.0.0.2 refuses its port
    real = socket.getaddrinfo

    def resolve(host, *args, **kwargs):
        if host == "two.example":  # a made-up name with two addresses, the first one refusing
            return real("127.0.0.2", *args, **kwargs) + real("127.0.0.1", *args, **kwargs)
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    outcome = post(f"http://two.example:{receiver.port}/")
    assert outcome.ok, outcome.error
    assert len(receiver.requests) == 1


# TLS: certificates of the test's own.


def certificate(tmp_path, name, san):
    """A self-signed certificate and its key for the subject alternative names `san` (openssl's syntax)."""
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    try:
        make_with_cryptography(cert, key, san)
    except ImportError:
        if not shutil.which("openssl"):
            pytest.skip("needs the cryptography package or the openssl command to make a certificate")
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=webhook test"]
            + ["-keyout", str(key), "-out", str(cert), "-addext", f"subjectAltName={san}"],
            check=True,
            capture_output=True,
        )
    return cert, key


def make_with_cryptography(cert_path, key_path, san):
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    names = [
        x509.IPAddress(ipaddress.ip_address(value)) if kind == "IP" else x509.DNSName(value)
        for kind, value in (entry.split(":", 1) for entry in san.split(","))
    ]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "webhook test")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def server_tls(cert, key):
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_a_certificate_nobody_trusts_is_refused(receivers, tmp_path):
    receiver = receivers(respond(200), tls=server_tls(*certificate(tmp_path, "self-signed", "IP:127.0.0.1")))
    outcome = post(receiver.url)
    assert outcome.status_code is None
    assert outcome.error.startswith("TLS certificate error")
    assert "self-signed" in outcome.error or "self signed" in outcome.error
    assert receiver.requests == []


def test_the_certificate_is_checked_for_the_urls_host(receivers, tmp_path, monkeypatch):
    """Trusted (its own CA), but issued for another name: refused all the same."""
    cert, key = certificate(tmp_path, "other", "DNS:other.example")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    receiver = receivers(respond(200), tls=server_tls(cert, key))
    outcome = post(receiver.url)
    assert outcome.error.startswith("TLS certificate error")
    assert "mismatch" in outcome.error
    assert receiver.requests == []


def test_tls_to_a_trusted_certificate_for_the_name_with_sni(receivers, tmp_path, monkeypatch, settings):
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = ["127.0.0.0/8", "::1/128"]
    cert, key = certificate(tmp_path, "localhost", "DNS:localhost")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    receiver = receivers(respond(200, b"ok"), tls=server_tls(cert, key))
    outcome = post(f"https://localhost:{receiver.port}/tls")
    assert (outcome.status_code, outcome.error, outcome.response_excerpt) == (200, "", "ok")
    assert receiver.sni == ["localhost"]
    [request] = receiver.requests
    assert request["headers"]["Host"] == f"localhost:{receiver.port}"
    assert Webhook(CURRENT).verify(request["body"], request["headers"])
