import django.core.serializers.json
from django.db import migrations, models

# The 202 body a repeat was answered with, and what was accepted, field by field.
FROM_THE_ANSWER = {
    "pickup_location": ("pickupLocation",),
    "dropoff_location": ("dropOffLocation",),
    "pickup_time": ("pickupTime",),
    "deadline": ("deadline",),
    "expedited": ("expedited",),
    "confirmation_required": ("confirmationRequired",),
    "package_id": ("packageInfo", "packageId"),
    "package_size": ("packageInfo", "size"),
    "package_weight_kg": ("packageInfo", "weight"),
    "package_tag": ("packageInfo", "tag"),
}


def _at(answer: dict, path: tuple[str, ...]):
    for key in path:
        answer = answer[key]
    return answer


def what_was_accepted(apps, schema_editor):
    """Each kept answer becomes what was accepted, from which the API answers a repeat."""
    deliveries = apps.get_model("deliveries", "Delivery").objects.using(schema_editor.connection.alias)
    for delivery in deliveries.exclude(accepted_as=None).only("pk", "accepted_as").iterator(chunk_size=2000):
        kept = {name: _at(delivery.accepted_as, path) for name, path in FROM_THE_ANSWER.items()}
        kept["package_tag"] = kept["package_tag"] or ""
        deliveries.filter(pk=delivery.pk).update(accepted_as=kept)


def the_answer_again(apps, schema_editor):
    deliveries = apps.get_model("deliveries", "Delivery").objects.using(schema_editor.connection.alias)
    for delivery in deliveries.exclude(accepted_as=None).iterator(chunk_size=2000):
        kept = delivery.accepted_as
        answer = {"deliveryId": str(delivery.pk), "status": "requested", "packageInfo": {}}
        for name, path in FROM_THE_ANSWER.items():
            (answer if len(path) == 1 else answer["packageInfo"])[path[-1]] = kept[name]
        answer["packageInfo"]["tag"] = answer["packageInfo"]["tag"] or None
        deliveries.filter(pk=delivery.pk).update(accepted_as=answer)


class Migration(migrations.Migration):
    """A repeated request is answered from what was accepted, rendered by the API, no longer from
    the API's answer kept by the service."""

    dependencies = [("deliveries", "0010_confirmation_token_hashed")]

    operations = [
        migrations.RenameField(model_name="delivery", old_name="first_answer", new_name="accepted_as"),
        migrations.AlterField(
            model_name="delivery",
            name="accepted_as",
            field=models.JSONField(
                blank=True,
                encoder=django.core.serializers.json.DjangoJSONEncoder,
                help_text="What was accepted, as it was then: a request repeated with its Idempotency-Key is answered so.",
                null=True,
            ),
        ),
        migrations.RunPython(what_was_accepted, the_answer_again),
    ]
