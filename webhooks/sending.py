"""A stand-in for wt-whsend's webhooks/sending.py, with the design's signatures, until that branch is merged."""

import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from standardwebhooks import Webhook

from webhooks.addresses import check


@dataclass(frozen=True)
class Outcome:
    status_code: int | None
    error: str
    duration_ms: int
    response_excerpt: str

    @property
    def ok(self):
        return self.status_code is not None and 200 <= self.status_code < 300


def signature_headers(*, secrets, webhook_id, timestamp, body):
    sigs = [Webhook(s).sign(webhook_id, timestamp, body) for s in secrets]
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": " ".join(sigs),
    }


def send(*, url, secrets, webhook_id, timestamp, body):
    check(url)
    start = time.monotonic()
    headers = {
        "Content-Type": "application/json",
        **signature_headers(secrets=secrets, webhook_id=webhook_id, timestamp=timestamp, body=body),
    }
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return Outcome(
                answer.status, "", int((time.monotonic() - start) * 1000), answer.read(4096).decode(errors="replace")
            )
    except urllib.error.HTTPError as e:
        return Outcome(e.code, "", int((time.monotonic() - start) * 1000), "")
    except OSError as e:
        return Outcome(None, str(e), int((time.monotonic() - start) * 1000), "")
