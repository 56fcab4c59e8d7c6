"""Structured logs (issue 11 §2): with LOG_FORMAT=json every line is one JSON object, and a line
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
from django.utils.module_loading import import_string

from outbox.dispatch import dispatch
from outbox.models import OutboxMessage
from tests.factories import requested

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


def test_a_line_logged_while_handling_names_the_delivery_message_subscriber_and_type(
    customer, fleet, choreography, json_lines
):
    delivery_id = requested(customer)
    row = OutboxMessage.objects.get(type="delivery.requested")
    choreography.deliver("delivery.requested", delivery_id, only="drones")

    dispatch(subscriber="drones", body=row.envelope())  # a duplicate: the kernel logs that it skips it

    line = next(line for line in json_lines() if "skipped duplicate" in line["message"])
    assert line["correlation_id"] == str(delivery_id)
    assert (line["message_id"], line["subscriber"], line["event_type"]) == (
        str(row.message_id),
        "drones",
        "delivery.requested",
    )
    assert line["level"] == "INFO" and line["logger"] == "outbox.dispatch" and "time" in line


def test_log_format_json_makes_every_line_of_a_process_json():
    environment = {**os.environ, "LOG_FORMAT": "json", "DJANGO_SETTINGS_MODULE": "delivery_project.settings"}
    script = "import django, logging; django.setup(); logging.getLogger('drones').warning('a drone is late')"
    run = subprocess.run(
        [sys.executable, "-c", script], env=environment, cwd=Path(settings.BASE_DIR), capture_output=True, text=True
    )

    lines = [json.loads(line) for line in run.stderr.splitlines() if line.strip()]
    assert run.returncode == 0 and lines
    assert {"message": "a drone is late", "level": "WARNING", "logger": "drones"}.items() <= lines[-1].items()
