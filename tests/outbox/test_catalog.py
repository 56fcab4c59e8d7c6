"""The checked-in event catalog (docs/events) is the published language; changes to it are checked."""

from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from pydantic import BaseModel

from outbox.core.catalog import checked_in, current_schemas, incompatibilities, render

CATALOG = Path(settings.BASE_DIR) / "docs" / "events"


def production_schemas() -> dict[str, dict]:
    return {name: schema for name, schema in current_schemas().items() if schema["x-publisher"] != "probe"}


def test_the_checked_in_catalog_matches_the_code():
    on_disk, in_code = checked_in(CATALOG), production_schemas()
    problems = []
    for name, schema in in_code.items():
        if name not in on_disk:
            problems.append(f"{name} is missing: run `manage.py export_event_schemas`")
        elif breaks := incompatibilities(on_disk[name], schema):
            problems.append(f"{name} changed incompatibly ({'; '.join(breaks)}): declare a new version instead")
        elif render(on_disk[name]) != render(schema):
            problems.append(f"{name} is out of date: run `manage.py export_event_schemas`")
    assert problems == []


class Old(BaseModel):
    delivery_id: str
    weight: float
    note: str = ""


class Removed(BaseModel):
    delivery_id: str
    note: str = ""


class Renamed(BaseModel):
    delivery_id: str
    weight_kg: float
    note: str = ""


class Retyped(BaseModel):
    delivery_id: str
    weight: str
    note: str = ""


class NowRequired(BaseModel):
    delivery_id: str
    weight: float
    note: str


class OptionalAdded(BaseModel):
    delivery_id: str
    weight: float
    note: str = ""
    priority: str = "normal"


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (Removed, ["field 'weight' removed or renamed"]),
        (Renamed, ["field 'weight' removed or renamed", "field 'weight_kg' is now required"]),
        (Retyped, ["field 'weight' changed type from number to string"]),
        (NowRequired, ["field 'note' is now required"]),
        (OptionalAdded, []),
    ],
)
def test_breaking_changes_are_told_apart_from_compatible_ones(new, expected):
    assert incompatibilities(Old.model_json_schema(), new.model_json_schema()) == expected


def test_export_refuses_to_overwrite_a_version_with_an_incompatible_change(tmp_path):
    call_command("export_event_schemas", directory=str(tmp_path))
    path = tmp_path / "package.ready.v1.json"
    published = checked_in(tmp_path)[path.name]
    published["properties"]["legacy_code"] = {"type": "string"}  # the code has since dropped this field
    path.write_text(render(published))

    with pytest.raises(CommandError, match="package.ready.v1.json: field 'legacy_code' removed"):
        call_command("export_event_schemas", directory=str(tmp_path))


def test_export_writes_every_contract_and_version(tmp_path):
    call_command("export_event_schemas", directory=str(tmp_path))

    written = checked_in(tmp_path)
    assert {"delivery.requested.v1.json", "delivery.requested.v2.json"} <= set(written)
    assert written["delivery.requested.v2.json"]["x-publisher"] == "deliveries"


def test_a_project_without_base_dir_exports_too(tmp_path):
    """BASE_DIR is startproject's habit, not a setting Django defines: the default directory does without it."""
    with override_settings():
        del settings.BASE_DIR
        call_command("export_event_schemas", directory=str(tmp_path))

    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(current_schemas())
