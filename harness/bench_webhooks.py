"""The webhook figures of `manage.py bench`: messages sent through webhooks.services.attempt a
second, beside bare http.client POSTs of the same bodies to the same receiver, a process of its
own (harness.webhook_receiver) answering 200 at once."""

import contextlib
import http.client
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.test.utils import override_settings
from django.utils import timezone

from outbox.api import atomic
from webhooks import services
from webhooks.models import Message


@contextlib.contextmanager
def receiver() -> Iterator[str]:
    """The receiver's URL, while it runs; webhooks allowed to it meanwhile (http://, 127.0.0.0/8)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.webhook_receiver"], cwd=settings.BASE_DIR, stdout=subprocess.PIPE, text=True
    )
    try:
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError("the webhook receiver did not start")
        with override_settings(WEBHOOKS_ALLOW_HTTP=True, WEBHOOKS_ALLOW_PRIVATE_NETWORKS=["127.0.0.0/8"]):
            yield f"http://127.0.0.1:{port}/hooks"
    finally:
        process.terminate()
        process.wait(10)


def owed_messages(url: str, count: int) -> list[Message]:
    """`count` messages owed to a new endpoint at `url`, one status change of as many deliveries
    each, made as the webhooks subscriber makes them (their `webhook.due` published, never relayed)."""
    customer_id, now = uuid.uuid4(), timezone.now()
    services.create_endpoint(customer_id=customer_id, url=url, description="bench")
    made = []
    with atomic("webhooks"):
        for _ in range(count):
            made += services.enqueue_status_change(
                customer_id=customer_id,
                delivery_id=uuid.uuid4(),
                status="in_transit",
                changed_at=now,
                last_known_location={"latitude": 47.6155, "longitude": -122.3443, "altitude": 60.0},
                pickup_eta=now,
                delivery_eta=now + timedelta(minutes=12),
            )
    return made


@override_settings(DEBUG=False)
def attempted(messages: list[Message]) -> float:
    """Seconds to attempt each message once, one after another, as the `webhook.due` handler does:
    its transaction, the URL checked, the signed POST, the Attempt row."""
    began = time.perf_counter()
    for message in messages:
        services.attempt(message_id=message.pk, after_attempts=0)
    elapsed = time.perf_counter() - began
    delivered = Message.objects.filter(pk__in=[m.pk for m in messages], status=Message.Status.DELIVERED).count()
    if delivered != len(messages):
        raise RuntimeError(f"{len(messages) - delivered} of {len(messages)} webhook messages were not delivered")
    return elapsed


def bare_posts(url: str, bodies: list[str]) -> float:
    """The reference: seconds to POST each body from bare http.client, on a connection of its own as
    a send opens one, and read the answer: the floor of an HTTP round trip to the receiver."""
    parts = urlsplit(url)
    payloads = [body.encode() for body in bodies]
    refused = 0
    began = time.perf_counter()
    for payload in payloads:
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
        connection.request("POST", parts.path, payload, {"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        connection.close()
        refused += response.status != 200
    elapsed = time.perf_counter() - began
    if refused:
        raise RuntimeError(f"the webhook receiver refused {refused} of {len(bodies)} bare POSTs")
    return elapsed


def sends_per_second(url: str, *, messages: int, warm_up: int = 10) -> tuple[float, float]:
    """(webhook sends a second, bare POSTs a second), `messages` of each after `warm_up` untimed."""
    made = owed_messages(url, warm_up + messages)
    bodies = [message.body for message in made]
    attempted(made[:warm_up])
    bare_posts(url, bodies[:warm_up])
    bare = messages / bare_posts(url, bodies[warm_up:])
    sends = messages / attempted(made[warm_up:])
    return sends, bare
