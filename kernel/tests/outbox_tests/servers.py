"""The servers a test may need, and how a test that was not given one says so.

Without DATABASE_URL, BROKER_URL and OUTBOX_LIMITS_REDIS_URL a run is the embedded default (SQLite,
an embedded Redis broker). A test that needs a server carries its marker (`postgres`, `rabbitmq`,
`redis`) and is skipped there, naming the variable to set; a test that needs one only for one case
calls `skip_unless_given`. Under CI=true such a skip is the only one allowed (outbox_tests.plugin).
"""

from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

from outbox.core.brokers import broker_urls
from outbox.core.rabbitmq import amqp_parameters

NOT_GIVEN = "which this run was not given"


def broker_virtual_host() -> str:
    """The RabbitMQ virtual host BROKER_URL names, as pika reads it: what `rabbitmqctl -p` must name."""
    return amqp_parameters(broker_urls(settings.BROKER_URL))[0].virtual_host


def _broker_is_rabbitmq() -> bool:
    first = settings.BROKER_URL.split()[0] if settings.BROKER_URL.strip() else ""
    return urlsplit(first).scheme in ("amqp", "amqps")


# marker: (the server, whether this run was given it, the variable that gives it)
SERVERS = {
    "postgres": ("PostgreSQL", lambda: connection.vendor == "postgresql", "DATABASE_URL=postgres://..."),
    "rabbitmq": ("RabbitMQ", _broker_is_rabbitmq, "BROKER_URL=amqp://..."),
    "redis": ("a Redis", lambda: bool(settings.OUTBOX_LIMITS_REDIS_URL), "OUTBOX_LIMITS_REDIS_URL=redis://..."),
}


def skip_unless_given(marker: str) -> None:
    """Skip the running test, naming the variable, unless this run was given the server."""
    server, given, variable = SERVERS[marker]
    if not given():
        pytest.skip(f"needs {server}, {NOT_GIVEN}: set {variable}")
