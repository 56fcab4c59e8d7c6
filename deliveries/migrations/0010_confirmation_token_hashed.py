"""Proof-of-delivery tokens stored as their SHA-256, like customers' API tokens: a delivery
awaiting confirmation keeps working with the token it was shown."""

import hashlib

from django.db import migrations, models


def hash_the_tokens(apps, schema_editor):
    Delivery = apps.get_model("deliveries", "Delivery")
    for delivery in Delivery.objects.exclude(confirmation_token="").only("id", "confirmation_token"):
        delivery.confirmation_token_hash = hashlib.sha256(delivery.confirmation_token.encode()).hexdigest()
        delivery.save(update_fields=["confirmation_token_hash"])


class Migration(migrations.Migration):
    dependencies = [
        ("deliveries", "0009_package_travels_once"),
    ]

    operations = [
        migrations.AddField(
            model_name="delivery",
            name="confirmation_token_hash",
            field=models.CharField(blank=True, help_text="SHA-256 of the task token.", max_length=64),
        ),
        # Backwards, the tokens cannot be read back from their hashes: they are gone, and a delivery
        # awaiting confirmation then times out as if nobody had confirmed it.
        migrations.RunPython(hash_the_tokens, migrations.RunPython.noop),
        migrations.RemoveField(model_name="delivery", name="confirmation_token"),
    ]
