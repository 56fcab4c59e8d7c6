"""A load of customers for `manage.py simulate`: requests through the real API, then a summary."""

import json
import random
import statistics
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from uuid import uuid4

from django.test import Client
from django.utils import timezone

TERMINAL = {"delivered", "failed", "cancelled"}
STATUSES = (
    "requested",
    "waiting_for_drone",
    "scheduled",
    "in_transit",
    "awaiting_confirmation",
    "delivered",
    "failed",
    "cancelled",
)


class ServerUnusable(Exception):
    """--url leads to no customer API that this simulation can use; the message says what answered
    instead and what to do about it."""


class _RedirectsReported(urllib.request.HTTPRedirectHandler):
    """A redirect comes back as the answer, not followed: urllib would send the POST again as a GET,
    and to an https:// URL that a plain-HTTP server then cannot answer."""

    def redirect_request(self, *args, **kwargs):
        return None


def check_server(url: str) -> None:
    """Ask `url` for the deliveries list, without a token, before anything is created: the API
    answers 401 in JSON. Nothing listening, an unknown host, a redirect (production mode sends
    plain HTTP to HTTPS) or a page that is not the API's JSON raise ServerUnusable, in one line."""
    opener = urllib.request.build_opener(_RedirectsReported)
    try:
        with opener.open(f"{url.rstrip('/')}/api/deliveries", timeout=10) as answer:
            status, headers = answer.status, answer.headers
    except urllib.error.HTTPError as error:
        status, headers = error.code, error.headers
        error.close()
    except OSError as error:  # URLError (refused, unknown host, TLS) or a timeout
        raise ServerUnusable(f"could not reach {url}: {cause_of(error)}") from error
    if 300 <= status < 400:
        location = headers.get("Location", "")
        if location.startswith("https://") and url.startswith("http://"):
            raise ServerUnusable(
                f"{url} redirected to {location}: pass the https:// URL, or start the server with "
                "DJANGO_SECURE_SSL_REDIRECT=0 (or DJANGO_DEBUG=1) to serve plain HTTP"
            )
        raise ServerUnusable(f"{url} redirected to {location or 'nowhere'}: pass the URL the API answers at")
    if headers.get_content_type() != "application/json":
        raise ServerUnusable(
            f"{url} answered {status} with {headers.get_content_type()}, not the customer API's JSON: "
            "is it this project's server?"
        )


def cause_of(error: OSError) -> str:
    """'connection refused', 'name or service not known', 'timed out': the cause, without errno."""
    cause = getattr(error, "reason", error)
    text = str(getattr(cause, "strerror", None) or cause)
    return text[:1].lower() + text[1:] if text[1:2].islower() else text


class Api:
    """Calls the customer API over HTTP, or in-process through Django's test client."""

    def __init__(self, *, token: str, url: str | None):
        self.token, self.url = token, url.rstrip("/") if url else None
        self._local = threading.local()

    def call(self, method: str, path: str, body: dict | None = None, headers: dict | None = None) -> tuple[int, dict]:
        """One call; over the customer's rate limit (429) it waits the Retry-After seconds and
        tries again, as a well-behaved client does."""
        while True:
            status, answer, retry_after = self._call(method, path, body, headers)
            if status != 429:
                return status, answer
            threading.Event().wait(float(retry_after or 1))

    def _call(self, method, path, body, headers) -> tuple[int, dict, str | None]:
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", **(headers or {})}
        data = json.dumps(body).encode() if body is not None else None
        if self.url is None:
            client = getattr(self._local, "client", None) or Client()
            self._local.client = client
            response = client.generic(
                method,
                f"/api{path}",
                data or b"",
                content_type="application/json",
                headers={k: v for k, v in headers.items() if k != "Content-Type"},
            )
            return response.status_code, _json(response.content), response.get("Retry-After")
        request = urllib.request.Request(f"{self.url}/api{path}", data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, _json(response.read()), None
        except urllib.error.HTTPError as error:
            return error.code, _json(error.read()), error.headers.get("Retry-After")


def _json(body: bytes) -> dict:
    """The answer's JSON; a server error page that is not JSON is kept as text, to be reported."""
    try:
        return json.loads(body or b"{}")
    except ValueError:
        return {"detail": body[:300].decode(errors="replace")}


def random_request(
    rng: random.Random, *, latitude: float, longitude: float, radius_km: float, confirmation_share: float = 0.0
) -> dict:
    """A customer's request; its times are set when it is sent (`stamped`). A `confirmation_share`
    of them ask for a confirmation (proof of delivery)."""

    def near() -> dict:
        return {
            "latitude": latitude + rng.uniform(-1, 1) * radius_km / 111.32,
            "longitude": longitude + rng.uniform(-1, 1) * radius_km / 74.0,
            "altitude": 0,
        }

    weight = round(rng.uniform(0.2, 6.0), 2)  # a few are too heavy for their size class
    size = "Small" if weight <= 2 else "Medium" if weight <= 4.5 else rng.choice(["Medium", "Large"])
    # Drawn only when asked for, so that the other requests of a seed stay what they were.
    confirmed = confirmation_share > 0 and rng.random() < confirmation_share
    return {
        "pickupLocation": near(),
        "dropOffLocation": near(),
        "expedited": rng.random() < 0.2,
        "confirmationRequired": "FingerPrint" if confirmed else "None",
        "packageInfo": {"packageId": str(uuid4()), "size": size, "weight": weight, "tag": "simulated"},
    }


def submit(
    api: Api, requests: list[dict], *, concurrency: int, rate: float, progress: Callable[[int], None]
) -> list[str]:
    """POST every request; returns the accepted delivery ids."""
    started, done, ids, lock = time.monotonic(), [0], [], threading.Lock()

    def send(i_body):
        i, body = i_body
        if rate:
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                threading.Event().wait(delay)
        status, answer = api.call("POST", "/deliveryrequests", stamped(body))
        if status != 202:
            raise RuntimeError(f"request {i} answered {status}: {answer}")
        with lock:
            ids.append(answer["deliveryId"])
            done[0] += 1
            progress(done[0])

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(send, enumerate(requests)))
    return ids


def stamped(body: dict) -> dict:
    """Pickup now, deadline in two hours: set at sending, so a slow submission never sends a stale pickup time."""
    now = timezone.now()
    return {**body, "pickupTime": now.isoformat(), "deadline": (now + timedelta(hours=2)).isoformat()}


def fetch_all(api: Api) -> list[dict]:
    deliveries, page = [], 1
    while True:
        status, body = api.call("GET", f"/deliveries?page={page}")
        if status != 200:
            raise RuntimeError(f"listing deliveries answered {status}: {body}")
        deliveries.extend(body["items"])
        if len(deliveries) >= body["count"] or not body["items"]:
            return deliveries
        page += 1


def wait_until_terminal(
    api: Api,
    *,
    count: int,
    timeout: float,
    progress: Callable[[int], None],
    history: list[tuple[float, Counter]] | None = None,
    began: float | None = None,
) -> list[dict]:
    """Poll until `count` deliveries are terminal; each poll's counts per status go to `history`."""
    deadline = time.monotonic() + timeout
    while True:
        deliveries = fetch_all(api)
        finished = sum(d["status"] in TERMINAL for d in deliveries)
        if history is not None:
            history.append((time.monotonic() - (began or 0), Counter(d["status"] for d in deliveries)))
        progress(finished)
        if finished >= count or time.monotonic() > deadline:
            return deliveries
        threading.Event().wait(0.5)


def _seconds_between(start: str, end: str) -> float:
    return (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()


def _percentiles(label: str, seconds: list[float]) -> str:
    seconds = sorted(seconds)
    p95 = seconds[min(len(seconds) - 1, round(0.95 * (len(seconds) - 1)))]
    return f"{label}: p50 {statistics.median(seconds):.2f} s, p95 {p95:.2f} s (n={len(seconds)})"


def summary(deliveries: list[dict]) -> list[str]:
    """Counts per status, failure reasons, and p50/p95 seconds from request to a drone and to delivered."""
    counts = Counter(d["status"] for d in deliveries)
    reasons = Counter(d["statusReason"] for d in deliveries if d["status"] == "failed")
    delivered = [_seconds_between(d["createdAt"], d["updatedAt"]) for d in deliveries if d["status"] == "delivered"]
    waited = [_seconds_between(d["createdAt"], d["droneScheduledAt"]) for d in deliveries if d["droneScheduledAt"]]
    wide = max(map(len, STATUSES))  # awaiting_confirmation, the longest, in line with the rest
    lines = [f"{'status':<{wide}} {'count':>6}", f"{'-' * wide} {'-' * 6}"]
    lines += [f"{status:<{wide}} {counts.get(status, 0):>6}" for status in STATUSES]
    lines += [f"{'total':<{wide}} {len(deliveries):>6}", ""]
    on_purpose = " (on purpose: some parcels are drawn too heavy for their size)"
    lines += [f"failed because {r}: {n}" + (on_purpose if r == "too_heavy" else "") for r, n in reasons.most_common()]
    lines.append(f"waited in line for a drone: {sum(1 for d in deliveries if d['waitingSince'])}")
    if waited:
        lines.append(_percentiles("request -> drone reserved (wait for a drone)", waited))
    if delivered:
        lines.append(_percentiles("request -> delivered", delivered))
    return lines


def plot(history: list[tuple[float, Counter]], path: str, *, title: str) -> None:
    """Deliveries waiting for a drone, with a drone (scheduled or in flight), delivered and failed, over time."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    seconds = [t for t, _ in history]
    series = {
        "waiting for a drone": ("requested", "waiting_for_drone"),
        "drone reserved or in flight": ("scheduled", "in_transit"),
        "delivered": ("delivered",),
        "failed": ("failed",),
    }
    figure, axes = pyplot.subplots(figsize=(9, 4.5), dpi=100)
    for label, statuses in series.items():
        axes.plot(seconds, [sum(counts.get(s, 0) for s in statuses) for _, counts in history], label=label)
    axes.set_xlabel("seconds since the first request")
    axes.set_ylabel("deliveries")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
