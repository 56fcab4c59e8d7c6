"""The event catalogue as AsyncAPI 3.0 (docs/events/asyncapi.json): valid, complete, and in step with the code.

The AsyncAPI 3.0.0 JSON Schema is the one the `@asyncapi/specs` package on npm ships (version
6.11.1, `schemas/3.0.0-without-$id.json`, Apache-2.0: tests/outbox/asyncapi/LICENSE), checked in
so the test needs no network.
"""

import json
from pathlib import Path

import jsonschema_rs
from django.conf import settings
from django.core.management import call_command

from outbox.console import asyncapi
from outbox.core.contracts import Event, contracts
from outbox.core.subscriptions import routing_table

CHECKED_IN = Path(settings.BASE_DIR) / "docs" / "events" / "asyncapi.json"
SPEC = Path(__file__).parent / "asyncapi" / "asyncapi-3.0.0.schema.json"
LEFT_OUT = frozenset({"probe"})  # the test suite's own context: the catalogue is of what ships


def from_the_code() -> dict:
    return asyncapi.document(
        title=settings.OUTBOX_ASYNCAPI_TITLE, version=settings.OUTBOX_ASYNCAPI_VERSION, leave_out=LEFT_OUT
    )


def test_the_checked_in_document_matches_the_code():
    assert CHECKED_IN.read_text() == asyncapi.render(from_the_code()), "run `manage.py export_asyncapi`"


def test_the_document_is_valid_asyncapi_3():
    validator = jsonschema_rs.validator_for(json.loads(SPEC.read_text()))
    document = json.loads(CHECKED_IN.read_text())

    assert [f"{e.instance_path}: {e.message}" for e in validator.iter_errors(document)] == []
    broken = json.loads(CHECKED_IN.read_text())
    next(iter(broken["operations"].values()))["action"] = "publish"  # AsyncAPI 2's word, not 3's
    assert not validator.is_valid(broken)  # the schema does judge


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
        for channel in document["channels"].values()
        for message in channel["messages"].values()
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
    location = requested["delivery_requested_v2"]["payload"]["allOf"][1]["properties"]["payload"]
    assert "#/components/schemas/" in json.dumps(location)  # the contract's $defs, moved where a $ref finds them


def test_the_command_writes_the_document_where_it_is_told(tmp_path, capsys):
    call_command("export_asyncapi", output=str(tmp_path / "asyncapi.json"))
    call_command("export_asyncapi", output="-")

    printed = capsys.readouterr().out
    assert (tmp_path / "asyncapi.json").read_text() == CHECKED_IN.read_text()
    assert printed.endswith(CHECKED_IN.read_text())


class Documented(Event):  # no `type`: an unregistered contract, for document() alone
    """The first paragraph of a docstring,
    on several indented lines.

    A second paragraph, left out."""

    n: int


def test_a_summary_is_the_first_paragraph_on_one_line_whatever_the_python():
    """Python 3.13 strips a docstring's indentation, 3.12 and before keep it: the summary is the same."""
    document = asyncapi.document(title="t", version="1", routes={}, declared={("documented.happened", 1): Documented})

    summary = document["channels"]["documented_happened"]["messages"]["documented_happened_v1"]["summary"]
    assert summary == "The first paragraph of a docstring, on several indented lines."
