"""Contexts refer to each other by id, never by relation (import-linter cannot see string references)."""

from django.apps import apps
from django.db import models
from django.test.utils import isolate_apps

CONTEXTS = {"packages", "drones", "deliveries", "notifications"}


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
