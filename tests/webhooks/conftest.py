"""A webhook receiver the tests start: a real HTTP server on 127.0.0.1, in a thread."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from standardwebhooks import Webhook


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps each POST it is sent and answers from a script
    (`answers`, first to last, then 200 for ever)."""

    def __init__(self):
        self.received: list[dict] = []
        self.answers: list[int] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
                with receiver.lock:
                    receiver.received.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                    status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def verified(self, secret: str) -> list[dict]:
        """Each POST received, its signature checked with the `standardwebhooks` package: its JSON."""
        return [Webhook(secret).verify(r["body"], r["headers"]) for r in self.received]


@pytest.fixture
def receiver(settings) -> Iterator[Receiver]:
    settings.WEBHOOKS_ALLOW_HTTP = True
    settings.WEBHOOKS_ALLOW_PRIVATE_NETWORKS = ["127.0.0.0/8"]
    # A retry is due an hour later: a test hands it over when it means to, and a run_choreography
    # slowed past the first step's few seconds (a loaded machine) does not make it by itself.
    settings.WEBHOOKS_BACKOFF_SECONDS = (3600.0,)
    running = Receiver()
    yield running
    running.close()
