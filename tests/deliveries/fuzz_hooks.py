"""schemathesis hooks for tests/deliveries/test_api_fuzzing.py (loaded through SCHEMATHESIS_HOOKS).

A date-time the schema allows is almost never inside the booking window (from a few minutes
ago to DELIVERY_BOOKING_HORIZON_DAYS ahead), so nearly every generated request would stop at
validation. Half of the positive cases get their dates moved into the window, so the fuzzer also
reaches the services, the outbox and the operations that follow a real delivery.
"""

import zlib
from datetime import UTC, datetime, timedelta

import schemathesis
from schemathesis.generation import GenerationMode


@schemathesis.hook
def map_case(context, case):
    body = case.body
    positive = case.meta is not None and case.meta.generation.mode == GenerationMode.POSITIVE
    if positive and isinstance(body, dict) and zlib.crc32(repr(body).encode()) % 2 == 0:
        now = datetime.now(UTC)
        if isinstance(body.get("pickupTime"), str):
            body["pickupTime"] = (now + timedelta(minutes=30)).isoformat()
        if isinstance(body.get("deadline"), str):
            body["deadline"] = (now + timedelta(hours=3)).isoformat()
    return case
