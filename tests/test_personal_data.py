"""Personal data stays home: data that leaves a context in an event is out of its
control, so no event contract in docs/events may carry a person's name, address or words.

The test reads the published catalog, not the code, because the catalog is what other teams build
on; `test_catalog` keeps the two equal.
"""

import json
import re
from pathlib import Path

from django.conf import settings

CATALOG = Path(settings.BASE_DIR) / "docs" / "events"

# Fields whose name says they are about a person or carry what a person wrote.
PERSONAL = re.compile(
    r"name|e_?mail|phone|mobile|sms|address|street|city|postcode|zip|birth|contact|person|customer|"
    r"recipient|sender|note|comment|message|text|description|instruction|signature|blob"
)
# Free-text strings (no format, no enum) that are allowed, and why they hold nothing personal.
FREE_TEXT_ALLOWED = {
    "reason": "a reason code chosen by the publishing context (too_heavy, fleet_busy, ...)",
    "size": "a size class, Small, Medium or Large",
    "confirmation_required": "a kind of confirmation, None, FingerPrint, Picture or Voice",
    "confirmation_type": "the same kind, in the confirmation request (the task token itself never travels)",
    "tag": "the customer's package label: bounded and documented as not for personal data",
    "status": "a delivery's status, one of docs/api.md's status values",
    "status_reason": "a reason code chosen by the deliveries context, as `reason`",
    "webhook_id": "the id of a webhook message: msg_ and random characters, nothing of what it carries",
}


def contracts() -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in sorted(CATALOG.glob("*.json"))}


def fields(schema: dict, defs: dict, path: str = ""):
    """(dotted path, field name, field schema) for every property, nested models included."""
    for name, field in schema.get("properties", {}).items():
        yield f"{path}{name}", name, field
        for variant in [field, *field.get("anyOf", [])]:
            if "$ref" in variant:
                yield from fields(defs[variant["$ref"].rsplit("/", 1)[-1]], defs, f"{path}{name}.")


def is_free_text(field: dict) -> bool:
    variants = field.get("anyOf", [field])
    return any(v.get("type") == "string" and "format" not in v and "enum" not in v for v in variants)


def test_the_catalog_is_not_empty():
    assert len(contracts()) >= 20


def is_identifier(name: str, field: dict) -> bool:
    """An id (a number or a UUID) names a row, not a person: `sent_message_id` carries no message."""
    variants = field.get("anyOf", [field])
    return name.endswith("_id") and all(v.get("type") == "integer" or v.get("format") == "uuid" for v in variants)


def test_no_event_carries_a_field_named_for_personal_data():
    found = [
        f"{contract}: {dotted}"
        for contract, schema in contracts().items()
        for dotted, name, field in fields(schema, schema.get("$defs", {}))
        if PERSONAL.search(name) and not is_identifier(name, field)
    ]
    assert found == []


def test_every_free_text_field_in_an_event_is_one_known_to_hold_nothing_personal():
    found = [
        f"{contract}: {dotted}"
        for contract, schema in contracts().items()
        for dotted, name, field in fields(schema, schema.get("$defs", {}))
        if is_free_text(field) and name not in FREE_TEXT_ALLOWED
    ]
    assert found == [], "free text leaving its context: is it personal? say why not in FREE_TEXT_ALLOWED"


def test_the_package_tag_is_bounded_and_documented_as_not_for_personal_data():
    tags = [
        field
        for schema in contracts().values()
        for _, name, field in fields(schema, schema.get("$defs", {}))
        if name == "tag"
    ]
    assert tags
    for tag in tags:
        assert max(v.get("maxLength", 0) for v in tag.get("anyOf", [tag])) == 100
        assert "not for personal data" in tag["description"]
