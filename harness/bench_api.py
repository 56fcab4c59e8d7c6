"""The API figure of `manage.py bench`: gunicorn serving the real application, and a load of
customers from a process of its own (spawned: it imports nothing of the project)."""

import http.client
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta


def a_request_body() -> bytes:
    """What a customer sends (as in the README's curl), times set at sending."""
    now = datetime.now(UTC)
    return json.dumps(
        {
            "pickupLocation": {"latitude": 47.6205, "longitude": -122.3493, "altitude": 0},
            "dropOffLocation": {"latitude": 47.6105, "longitude": -122.3393, "altitude": 0},
            "pickupTime": now.isoformat(),
            "deadline": (now + timedelta(hours=2)).isoformat(),
            "expedited": False,
            "confirmationRequired": "None",
            "packageInfo": {"packageId": str(uuid.uuid4()), "size": "Small", "weight": 1.5, "tag": "bench"},
        }
    ).encode()


def customers(port: int, token: str, clients: int, seconds: float, results, *, floor: bool = False) -> None:
    """`clients` threads, each on a kept-alive connection, POST as fast as answers come for
    `seconds`; put (status, milliseconds) of every answer on `results`. With `floor`, they GET
    /healthz instead: Django's own cost of a request on the same server, the API's reference."""
    answers: list[tuple[int, float]] = []
    lock, deadline = threading.Lock(), time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def customer():
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine = []
        while time.monotonic() < deadline:
            began = time.perf_counter()
            try:
                if floor:
                    connection.request("GET", "/healthz")
                else:
                    connection.request("POST", "/api/deliveryrequests", a_request_body(), headers)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                status = 0
            mine.append((202 if floor and status == 200 else status, (time.perf_counter() - began) * 1000))
        with lock:
            answers.extend(mine)

    threads = [threading.Thread(target=customer) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(answers)
