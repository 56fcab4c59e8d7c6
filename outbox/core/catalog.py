"""The published language: every event contract as JSON Schema, and what counts as breaking it."""

import json
from pathlib import Path

from outbox.core.contracts import contracts


def schema_file(event_type: str, version: int) -> str:
    return f"{event_type}.v{version}.json"


def current_schemas() -> dict[str, dict]:
    """File name -> JSON Schema of every declared contract, as the code says today."""
    schemas = {}
    for (event_type, version), contract in contracts().items():
        schema = contract.model_json_schema()
        schema["$id"] = schema_file(event_type, version)
        schema["x-event-type"], schema["x-version"], schema["x-publisher"] = event_type, version, contract.source()
        schemas[schema_file(event_type, version)] = schema
    return schemas


def render(schema: dict) -> str:
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def checked_in(directory: Path) -> dict[str, dict]:
    return {path.name: json.loads(path.read_text()) for path in sorted(directory.glob("*.v*.json"))}


def incompatibilities(old: dict, new: dict) -> list[str]:
    """Changes that break a consumer of `old`: a field removed (or renamed), retyped, or newly required.

    Adding an optional field is compatible: consumers ignore fields they do not know.
    """
    problems = []
    old_fields, new_fields = _fields(old), _fields(new)
    for name, shape in old_fields.items():
        if name not in new_fields:
            problems.append(f"field {name!r} removed or renamed")
        elif new_fields[name] != shape:
            problems.append(f"field {name!r} changed type from {shape} to {new_fields[name]}")
    for name in sorted(set(new.get("required", [])) - set(old.get("required", []))):
        problems.append(f"field {name!r} is now required")
    return problems


def _fields(schema: dict) -> dict[str, str]:
    definitions = schema.get("$defs", {})
    return {name: _shape(prop, definitions) for name, prop in schema.get("properties", {}).items()}


def _shape(prop: dict, definitions: dict) -> str:
    """A comparable description of a property's type, resolving references."""
    if "$ref" in prop:
        target = definitions.get(prop["$ref"].rsplit("/", 1)[-1], {})
        inner = {k: _shape(v, definitions) for k, v in sorted(target.get("properties", {}).items())}
        return json.dumps(inner, sort_keys=True)
    for key in ("anyOf", "oneOf", "allOf"):
        if key in prop:
            return f"{key}[{', '.join(sorted(_shape(p, definitions) for p in prop[key]))}]"
    if prop.get("type") == "array":
        return f"array[{_shape(prop.get('items', {}), definitions)}]"
    if "enum" in prop:
        return f"enum{sorted(map(str, prop['enum']))}"
    return f"{prop.get('type', 'any')}{':' + prop['format'] if 'format' in prop else ''}"
