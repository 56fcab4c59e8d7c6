"""Contexts refer to each other by id, never by relation (import-linter cannot see string references)."""

import re
from pathlib import Path

from django.apps import apps
from django.db import models
from django.test.utils import isolate_apps

CONTEXTS = {"packages", "drones", "deliveries", "notifications", "webhooks"}


def cross_context_relations(candidates) -> list[str]:
    found = []
    for model in candidates:
        own = model._meta.app_label
        if own not in CONTEXTS:
            continue
        for field in model._meta.get_fields():
            other = field.related_model._meta.app_label if field.is_relation and field.related_model else own
            if other != own and other in CONTEXTS | {"outbox"}:
                found.append(f"{own}.{model.__name__}.{field.name} -> {other}.{field.related_model.__name__}")
    return found


def test_no_model_of_one_context_relates_to_a_model_of_another():
    assert cross_context_relations(apps.get_models()) == []


@isolate_apps("packages", "drones")
def test_a_foreign_key_across_contexts_is_caught():
    class Drone(models.Model):
        class Meta:
            app_label = "drones"

    class Parcel(models.Model):
        drone = models.ForeignKey(Drone, on_delete=models.CASCADE)

        class Meta:
            app_label = "packages"

    assert sorted(cross_context_relations([Drone, Parcel])) == [
        "drones.Drone.parcel -> packages.Parcel",  # the reverse side is reported too
        "packages.Parcel.drone -> drones.Drone",
    ]


def default_database_uses(sources: dict[str, str]) -> list[str]:
    """Lines of a context's code that name the `default` database's connection or transaction
    directly: moved onto a database of its own (OUTBOX_CONTEXT_DATABASES), such a statement would
    still run on `default`, outside the context's transaction. `connection_of(label)` and the
    kernel's `atomic()` follow the context wherever the settings put it."""
    pattern = re.compile(
        r"from django\.db import [^\n]*\b(connection|transaction)\b|django\.db\.(connection|transaction)\b"
    )
    return [
        f"{path}:{number}: {line.strip()}"
        for path, source in sources.items()
        for number, line in enumerate(source.splitlines(), start=1)
        if pattern.search(line)
    ]


def test_no_context_names_the_default_databases_connection_or_transaction():
    root = Path(__file__).resolve().parent.parent
    sources = {
        str(path.relative_to(root)): path.read_text()
        for label in sorted(CONTEXTS)
        for path in (root / label).rglob("*.py")
        if "migrations" not in path.parts
    }
    assert default_database_uses(sources) == []


def test_a_context_that_names_the_default_connection_is_caught():
    found = default_database_uses(
        {
            "drones/a.py": "from django.db import IntegrityError, connection\n",
            "drones/b.py": "from django.db import transaction\nimport django.db.connection\n",
            "drones/c.py": "from outbox.api import atomic, connection_of\nconnection = connection_of('drones')\n",
        }
    )
    assert [f.split(":")[0] for f in found] == ["drones/a.py", "drones/b.py", "drones/b.py"]
