"""Structured logs: with LOG_FORMAT=json every line is one JSON object, and a line
logged while a message is handled names its delivery, message, subscriber and event type."""

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.utils.module_loading import import_string

from outbox.handling.dispatch import dispatch
from outbox.testing import deliver, hand_over, published
from tests.factories import Customer, requested

pytestmark = pytest.mark.django_db


def configured(kind: str, name: str):
    """A formatter or filter built from settings.LOGGING, as dictConfig builds it."""
    config = dict(settings.LOGGING[kind][name])
    return import_string(config.pop("()"))(**config)


@pytest.fixture
def json_lines():
    """The project's own json formatter and filter, on a handler of the kernel's logger."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(configured("formatters", "json"))
    handler.addFilter(configured("filters", "message_context"))
    logger = logging.getLogger("outbox")
    logger.addHandler(handler)
    previous, logger.level = logger.level, logging.INFO
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(previous)


def test_a_line_logged_while_handling_names_the_delivery_message_subscriber_and_type(customer, fleet, db, json_lines):
    delivery_id = requested(customer)
    [handed] = hand_over("delivery.requested", correlation_id=delivery_id, to="drones")
    row = handed.envelope

    deliver("drones", row)  # a duplicate: the kernel logs that it skips it

    line = next(line for line in json_lines() if line.get("outcome") == "duplicate")
    assert line["correlation_id"] == str(delivery_id)
    assert (line["message_id"], line["subscriber"], line["event_type"]) == (
        str(row.message_id),
        "drones",
        "delivery.requested",
    )
    assert line["level"] == "INFO" and line["logger"] == "outbox.handling.dispatch" and "time" in line


def test_the_web_says_which_delivery_it_accepted_so_a_grep_finds_the_request_too(customer, caplog):
    """Only the workers' lines carried the delivery's id; the request that began it said nothing."""
    caplog.set_level(logging.INFO, logger="deliveries.api")

    delivery_id = requested(customer)

    [line] = [r for r in caplog.records if r.name == "deliveries.api"]
    assert str(delivery_id) in line.getMessage() and line.correlation_id == str(delivery_id)


def test_every_handled_message_gets_one_line_with_its_outcome_and_duration(customer, fleet, json_lines):
    delivery_id = requested(customer)
    [row] = published("delivery.requested")

    deliver("packages", row)
    dispatch(subscriber="packages", body={"not": "an envelope"})

    processed, dead = [line for line in json_lines() if "outcome" in line]
    assert {"subscriber": "packages", "event_type": "delivery.requested", "outcome": "processed"}.items() <= (
        processed.items()
    )
    assert processed["correlation_id"] == str(delivery_id) and processed["duration_ms"] > 0
    assert str(delivery_id) in processed["message"]  # plain text too: `grep <delivery id>` finds it
    assert (dead["outcome"], dead["event_type"], dead["level"]) == ("dead_lettered", "?", "INFO")


def test_the_per_message_line_can_be_lowered_to_debug_for_high_volume(customer, fleet, json_lines, settings):
    settings.OUTBOX_HANDLED_LOG_LEVEL = "DEBUG"
    requested(customer)

    deliver("packages", published("delivery.requested")[0])

    assert not [line for line in json_lines() if "outcome" in line]  # the logger is at INFO


def test_log_format_json_makes_every_line_of_a_process_json():
    environment = {**os.environ, "LOG_FORMAT": "json", "DJANGO_SETTINGS_MODULE": "delivery_project.settings"}
    script = "import django, logging; django.setup(); logging.getLogger('drones').warning('a drone is late')"
    run = subprocess.run(
        [sys.executable, "-c", script], env=environment, cwd=Path(settings.BASE_DIR), capture_output=True, text=True
    )

    lines = [json.loads(line) for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 0 and lines
    assert {"message": "a drone is late", "level": "WARNING", "logger": "drones"}.items() <= lines[-1].items()


def test_a_clients_mistake_is_not_an_operators_warning(customer, caplog):
    client = Client(headers={"Authorization": f"Bearer {Customer('bob').token}"})

    with caplog.at_level(logging.INFO):
        answer = client.post("/api/deliveryrequests", data="{", content_type="application/json")

    assert answer.status_code == 400
    assert not [record for record in caplog.records if record.name == "django.request"]  # runserver logs it once
